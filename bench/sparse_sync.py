"""Sparse against densified gradient sync of an embedding table, per mode (``make bench``, issue 36): a step looks up
``--lookups`` rows per replica of a ``--rows`` × ``--dim`` table (``tfdist.trainer.embeddings.EmbeddingTable``,
as the models do), takes the gradient (an IndexedSlices), syncs it as the train stage does in that mode, sparse or
made dense (``--dense``), and applies it with Adam. What the step costs beyond the lookup is the sync and the update.

    python -m bench.sparse_sync mirrored --rows R --dim D --lookups B --steps N [--dense]   one process per worker
    python -m bench.sparse_sync horovod ...                                                  one rank per process
    python -m bench.sparse_sync parameter_server ...     chief, ps and workers (TF_CONFIG); the chief schedules

Mirrored: the optimizer all-reduces (a sparse gradient all-gathered); Horovod: ``grouped_allreduce`` (sparse:
two all-gathers); parameter server: the gradient is applied on the ps (sparse: the rows looked up are pushed). The
first process prints ``step_ms <milliseconds per step>``."""

from __future__ import annotations

import argparse
import contextlib
import time

MODES = ("mirrored", "horovod", "parameter_server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--lookups", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--dense", action="store_true")
    args = parser.parse_args()

    import keras

    from tfdist.trainer.runtime import import_tensorflow

    tf = import_tensorflow()
    from tfdist.trainer.embeddings import EmbeddingTable

    hvd = coordinator = None
    if args.mode == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
        strategy, first = None, hvd.rank() == 0
    elif args.mode == "mirrored":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        first = not strategy.cluster_resolver.task_id
    else:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type in ("ps", "worker"):
            server = tf.distribute.Server(
                resolver.cluster_spec(), resolver.task_type, resolver.task_id, protocol="grpc", start=True
            )
            return server.join()
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        coordinator, first = tf.distribute.coordinator.ClusterCoordinator(strategy), True
    with strategy.scope() if strategy else contextlib.nullcontext():
        table = EmbeddingTable(args.rows, args.dim, name="table")
        table.build(None)
        optimizer = keras.optimizers.Adam()
        optimizer.build(table.trainable_variables)
    variables = table.trainable_variables

    def step():
        ids = tf.random.uniform([args.lookups], 0, args.rows, dtype=tf.int32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table(ids))
        gradients = tape.gradient(loss, variables)
        if args.dense:
            gradients = [tf.convert_to_tensor(g) for g in gradients]
        if hvd:
            gradients = hvd.grouped_allreduce(gradients, op=hvd.Sum)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))

    @tf.function
    def steps(n):
        for _ in tf.range(n):
            strategy.run(step) if strategy else step()

    def run(n: int) -> None:
        if coordinator:
            coordinator.schedule(steps, args=(tf.constant(n),))
            coordinator.join()
        else:
            steps(tf.constant(n))

    run(10)  # tracing, first connections
    started = time.monotonic()
    run(args.steps)
    if first:
        print(f"step_ms {1000 * (time.monotonic() - started) / args.steps:.3f}", flush=True)


if __name__ == "__main__":
    main()
