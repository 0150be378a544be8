"""TensorBoard scalars, written with TensorFlow's own summary ops: a worker image needs no ``tensorboard``
package to write them (``tf.summary.scalar`` does), only whoever views them."""

from __future__ import annotations

from collections.abc import Callable


def scalar_writer(tf, logdir: str) -> Callable[[int, dict[str, float | None]], None]:
    """``write(step, {tag: value})``: the values as scalar summaries at ``step`` in an event file under
    ``logdir``, flushed at once (TensorBoard shows a running training); a None value is left out."""
    from tensorflow.core.framework import summary_pb2

    writer = tf.summary.create_file_writer(logdir)
    scalar = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))

    def write(step: int, values: dict[str, float | None]) -> None:
        with writer.as_default(step=step):
            for tag, value in values.items():
                if value is not None:
                    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=scalar)
        writer.flush()

    return write
