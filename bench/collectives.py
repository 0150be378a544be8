"""A training step without its forward and backward pass: zero gradients shaped like the spec model's
weights, all-reduced across the processes and applied by the optimizer, as the train stage does it.
What synchronous training with N processes on one host pays per step at the least.

    python -m bench.collectives mirrored --spec S --data D --steps N [--bytes-per-pack B]
                                                    one process per worker (TF_CONFIG); B: the gradients'
                                                    all-reduce packs (0, TF's default: all in one collective)
    python -m bench.collectives horovod  --spec S --data D --steps N   one rank per process (mpirun)

The first process prints ``sync_ms <milliseconds per step>``."""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from tfdist.contract.data_records import Manifest
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["mirrored", "horovod"])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--bytes-per-pack", type=int, default=0)
    args = parser.parse_args()

    from tfdist.trainer.models import build_model, build_optimizer
    from tfdist.trainer.runtime import import_tensorflow, load_spec

    tf = import_tensorflow()
    hvd = strategy = None
    if args.mode == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
        first = hvd.rank() == 0
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=(tf.distribute.experimental.CommunicationOptions(bytes_per_pack=args.bytes_per_pack))
        )
        first = not strategy.cluster_resolver.task_id
    spec = load_spec(args.spec)
    manifest = read_record(os.path.join(args.data, MANIFEST), Manifest)
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = build_model(spec, manifest, args.data)
        optimizer = build_optimizer(spec)
        optimizer.build(model.trainable_variables)

    def step():
        gradients = [tf.zeros_like(v) for v in model.trainable_variables]
        if hvd:
            gradients = hvd.grouped_allreduce(gradients, op=hvd.Sum)
        # all-reduces under the strategy
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))

    @tf.function
    def steps(n):
        for _ in tf.range(n):
            strategy.run(step) if strategy else step()

    steps(tf.constant(10))  # tracing, first connections
    if first and strategy:
        graph = steps.get_concrete_function(tf.constant(1)).graph.as_graph_def()
        ops = [n.op for f in graph.library.function for n in f.node_def] + [n.op for n in graph.node]
        print(f"collectives per step {sum(op.startswith('CollectiveReduce') for op in ops)}", flush=True)
    started = time.monotonic()
    steps(tf.constant(args.steps))
    if first:
        print(f"sync_ms {1000 * (time.monotonic() - started) / args.steps:.3f}", flush=True)


if __name__ == "__main__":
    main()
