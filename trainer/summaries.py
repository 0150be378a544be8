"""TensorBoard scalars, written as TensorFlow's summary ops write them (an event file of ``tf.train.Event`` records
with scalar-plugin summaries) from its protocol buffers: a worker image needs no ``tensorboard`` package to write
them, only whoever views them.

Not through ``tf.summary``: each scalar is an eager op, and its file writer's creation and first write are slow
(made at the first summary, inside the training measured): together about 6% of a small model's training time at
one every 50 steps. Building the records from protocol buffers costs a small fraction of that."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

from tfdist.trainer import scratch
from tfdist.trainer.uploads import Job


def scalar_writer(tf, logdir: str) -> Callable[[int, dict[str, float | None]], None]:
    """``write(step, {tag: value})``: the values as scalar summaries at ``step`` in an event file under
    ``logdir``, flushed at once (TensorBoard shows a running training); a None value is left out. An object
    store's ``logdir`` is written in the scratch (``summaries_upload`` uploads it)."""
    from tensorflow.core.framework import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorflow.core.util import event_pb2

    local = scratch.local_path(logdir)
    os.makedirs(local, exist_ok=True)
    name = f"events.out.tfevents.{time.time():.0f}.{socket.gethostname()}.{os.getpid()}.v2"
    records = tf.io.TFRecordWriter(os.path.join(local, name))
    records.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
    scalar = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    shape = tensor_shape_pb2.TensorShapeProto()

    def write(step: int, values: dict[str, float | None]) -> None:
        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag=tag,
                    tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[value]),
                    metadata=scalar,
                )
                for tag, value in values.items()
                if value is not None
            ]
        )
        records.write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())
        records.flush()

    return write


def summaries_upload(logdir: str) -> tuple[Job, str]:
    """The upload of an object store's ``logdir`` from its scratch copy, and what the logs call it."""
    return scratch.tree_upload(scratch.local_path(logdir), logdir), f"the upload of the summaries to {logdir}"
