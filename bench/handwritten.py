"""The best hand-written training script, the benchmark's yardstick: what a good engineer writes from the
TensorFlow and Horovod guides without the plugin. Same model, same shards, same global batch, the same steps
per tf.function call as the train stage, and each process on its own block of cores with TensorFlow's thread
pools sized to it (TensorFlow's default gives every process every core: oversubscribed).

    python -m bench.handwritten single   --spec S --data D --steps N [--steps-per-call K]   one process, all cores
    python -m bench.handwritten mirrored ...   one process per worker, TF_CONFIG cluster (MultiWorkerMirroredStrategy)
    python -m bench.handwritten ps ...         chief + ps + workers from TF_CONFIG (ParameterServerStrategy)
    python -m bench.handwritten horovod ...    one rank per process under horovodrun

The local processes are the TF cluster's workers (or Horovod's local ranks); with more processes than cores
(the parameter-server cluster) none is pinned. The chief prints ``examples/s <rate>`` counted after the first
call."""

from __future__ import annotations

import argparse
import json
import os
import time

from tfdist.contract import MANIFEST


def loop_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments of every hand-written loop: the run's spec and prepared data, the steps timed, the steps per
    tf.function call."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--steps-per-call", type=int, required=True)
    return parser


def input_fn(tf, files: list[str], parse, global_batch: int):
    """A hand-written loop's input function: the pipeline's share of the shards, shuffled, repeated, batched to its
    replica's share of the global batch, parsed, prefetched."""

    def dataset(ctx):
        return (
            tf.data.TFRecordDataset(files[ctx.input_pipeline_id :: ctx.num_input_pipelines])
            .shuffle(4096)
            .repeat()
            .batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
            .map(parse, num_parallel_calls=2)
            .prefetch(2)
        )

    return dataset


def examples_per_sec(call, args: argparse.Namespace, global_batch: int, wait) -> float:
    """Examples/s of ``call()`` (``args.steps_per_call`` steps) repeated for ``args.steps`` steps, at least twice,
    the first call (tracing) not counted; ``wait(result)`` returns when a call's work is done."""
    calls = max(2, args.steps // args.steps_per_call)
    wait(call())
    started = time.monotonic()
    for _ in range(calls - 1):
        result = call()
    wait(result)
    return (calls - 1) * args.steps_per_call * global_batch / (time.monotonic() - started)


def pin_to_own_cores(mode: str) -> int:
    """Pin this process to its block of the cores by its local index; the block's size (0: not pinned)."""
    if mode == "horovod":
        index = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or os.environ["HOROVOD_LOCAL_RANK"])
        count = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ["HOROVOD_LOCAL_SIZE"])
    elif mode == "mirrored":
        config = json.loads(os.environ["TF_CONFIG"])
        index, count = config["task"]["index"], len(config["cluster"]["worker"])
    else:
        return 0
    cores = sorted(os.sched_getaffinity(0))
    if count > len(cores):
        return 0
    share = len(cores) // count
    os.sched_setaffinity(0, cores[index * share : (index + 1) * share])
    return share


def main() -> None:
    parser = loop_parser(__doc__)
    parser.add_argument("mode", choices=["single", "mirrored", "ps", "horovod"])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cores = pin_to_own_cores(args.mode)  # before TensorFlow starts its threads, which inherit the cores
    import keras
    import tensorflow as tf

    if cores:
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(min(2, cores))

    from tfdist.trainer import data
    from tfdist.trainer.models import build_model, build_optimizer
    from tfdist.trainer.runtime import load_spec

    spec = load_spec(args.spec)
    with open(os.path.join(args.data, MANIFEST)) as f:
        manifest = json.load(f)
    global_batch = spec.training.global_batch_size
    files = data.shard_paths(args.data, manifest, "train")
    parse = data.parse_fn(tf, manifest)

    dataset = input_fn(tf, files, parse, global_batch)

    hvd = coordinator = None
    is_chief = True
    if args.mode == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
        strategy, is_chief = tf.distribute.get_strategy(), hvd.rank() == 0
    elif args.mode == "mirrored":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        is_chief = not strategy.cluster_resolver.task_id
    elif args.mode == "ps":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type in ("ps", "worker"):
            tf.distribute.Server(
                resolver.cluster_spec(),
                job_name=resolver.task_type,
                task_index=resolver.task_id,
                protocol="grpc",
                start=True,
            ).join()
            return
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    else:
        strategy = tf.distribute.get_strategy()

    with strategy.scope():
        model = build_model(spec, manifest, args.data)
        optimizer = build_optimizer(spec, scale=hvd.size() if hvd else 1)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    if hvd:
        for variable in [*model.variables, *optimizer.variables]:
            variable.assign(hvd.broadcast(tf.convert_to_tensor(variable), root_rank=0))
        ctx = tf.distribute.InputContext(hvd.size(), hvd.rank(), hvd.size())
        iterator = iter(dataset(ctx))
    elif coordinator:
        iterator = iter(
            coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(dataset))
        )
    else:
        iterator = iter(strategy.distribute_datasets_from_function(dataset))

    def step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_fn(labels, model(features, training=True)), global_batch_size=global_batch
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        if hvd:
            gradients = hvd.grouped_allreduce(gradients, op=hvd.Sum)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_steps(iterator):
        loss = tf.constant(0.0)
        for _ in tf.range(args.steps_per_call):
            loss = (
                step(next(iterator))
                if hvd
                else strategy.reduce("SUM", strategy.run(step, args=(next(iterator),)), axis=None)
            )
        return loss

    def call():
        if coordinator:
            return coordinator.schedule(train_steps, args=(iterator,))
        return train_steps(iterator)

    rate = examples_per_sec(call, args, global_batch, wait=(lambda _: coordinator.join()) if coordinator else float)
    if is_chief:
        print(f"examples/s {rate:.1f}", flush=True)


if __name__ == "__main__":
    main()
