"""The best hand-written training script, the benchmark's yardstick: what a good engineer writes from the
TensorFlow and Horovod guides without the plugin. Same model, same shards, same global batch, the same steps
per tf.function call as the train stage, and each process on its own block of cores with TensorFlow's thread
pools sized to it (TensorFlow's default gives every process every core: oversubscribed).

    python -m bench.handwritten single   --spec S --data D --steps N [--steps-per-call K]   one process, all cores
    python -m bench.handwritten mirrored ...   one process per worker, TF_CONFIG cluster (MultiWorkerMirroredStrategy)
    python -m bench.handwritten ps ...         chief + ps + workers from TF_CONFIG (ParameterServerStrategy)
    python -m bench.handwritten horovod ...    one rank per process under horovodrun
    python -m bench.handwritten sharded_ps ... the same cluster: bench/ctr.py's model with sharded tables, by hand

The local processes are the TF cluster's workers (or Horovod's local ranks); with more processes than cores
(the parameter-server cluster) none is pinned. The chief prints ``examples/s <rate>`` counted after the first
call."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time

from tfdist.contract.data_records import Manifest
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record


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


def tabular_parse(tf, manifest: dict):
    """A hand-written parser of prepare_data's tabular shards: numeric features float32 [batch, n], categorical
    strings [batch, 1], lists [batch, None] padded with "", the label float32 [batch, 1]."""
    kinds = {
        "numeric": lambda f: tf.io.FixedLenFeature([math.prod(f["shape"])], tf.float32),
        "categorical": lambda f: tf.io.FixedLenFeature([1], tf.string),
        "categorical_list": lambda f: tf.io.RaggedFeature(tf.string),
    }
    label = manifest["label"]["name"]
    schema = {f["name"]: kinds[f["kind"]](f) for f in manifest["features"]} | {
        label: tf.io.FixedLenFeature([1], tf.int64)
    }

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, schema)
        labels = tf.cast(parsed.pop(label), tf.float32)
        return {k: v.to_tensor("") if isinstance(v, tf.RaggedTensor) else v for k, v in parsed.items()}, labels

    return parse


def ps_cluster(tf, partitioner=None):
    """In a parameter-server cluster from TF_CONFIG: a ps or worker task serves until it is stopped (None); the chief
    gets (the strategy, its coordinator)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol="grpc",
            start=True,
        ).join()
        return None
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    return strategy, tf.distribute.coordinator.ClusterCoordinator(strategy)


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


class LazyAdam:
    """Adam on the rows a step looked up only: per shard of a table, its moments colocated with it, the update
    computed on the shard's ps task and scattered into the shard, the moments and the rows."""

    def __init__(self, tf, strategy, shards: list, learning_rate: float, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        self.tf, self.shards = tf, shards
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.moments = []
        for shard in shards:
            with strategy.extended.colocate_vars_with(shard):
                zeros = tf.zeros(shard.shape)
                self.moments.append((tf.Variable(zeros, trainable=False), tf.Variable(zeros, trainable=False)))

    def apply(self, gradients: list) -> None:
        """One step of the shards' gradients (IndexedSlices, an id repeated in a batch summed)."""
        tf = self.tf
        t = tf.cast(self.iterations.assign_add(1), tf.float32)
        rate = self.learning_rate * tf.sqrt(1 - self.beta_2**t) / (1 - self.beta_1**t)
        for gradient, shard, (m, v) in zip(gradients, self.shards, self.moments, strict=True):
            with tf.device(shard.device):
                ids, position = tf.unique(gradient.indices)
                rows = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(ids)[0])
                m_rows = self.beta_1 * m.sparse_read(ids) + (1 - self.beta_1) * rows
                v_rows = self.beta_2 * v.sparse_read(ids) + (1 - self.beta_2) * tf.square(rows)
                m.scatter_update(tf.IndexedSlices(m_rows, ids))
                v.scatter_update(tf.IndexedSlices(v_rows, ids))
                shard.scatter_sub(tf.IndexedSlices(rate * m_rows / (tf.sqrt(v_rows) + self.epsilon), ids))


def sharded_ps(args: argparse.Namespace, keras, tf) -> None:
    """An mlp over tabular data with large hashed tables (bench/ctr.py), written by hand for a parameter-server
    cluster without tfdist's training code: each table a tf.Variable that MinSizePartitioner (the spec's
    training.parameter_server) shards over the ps tasks, created shard by shard there, looked up by hashed id; lazy
    Adam on the tables, Keras's Adam on the dense tower."""
    from tfdist.infra.jsonfiles import read_json
    from tfdist.spec import ParameterServerSpec, load_spec

    spec = load_spec(read_json(args.spec))
    t, m = spec.training, spec.model
    sharding = t.parameter_server or ParameterServerSpec()
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=sharding.shard_min_bytes, max_shards=sharding.max_shards or t.num_ps
    )
    cluster = ps_cluster(tf, partitioner)
    if cluster is None:
        return
    strategy, coordinator = cluster
    manifest = read_json(os.path.join(args.data, MANIFEST))
    numeric = [f["name"] for f in manifest["features"] if f["kind"] == "numeric"]
    categorical = [f for f in manifest["features"] if f["kind"] == "categorical"]
    mean = tf.constant([x for name in numeric for x in manifest["stats"][name]["mean"]])
    std = tf.sqrt(tf.constant([x for name in numeric for x in manifest["stats"][name]["variance"]]))
    hashing = {f["name"]: keras.layers.Hashing(f["hash_buckets"]) for f in categorical}

    def uniform(shape, partition_shape=None, partition_offset=None):
        return tf.random.uniform(partition_shape or shape, -0.05, 0.05)

    with strategy.scope():
        tables = {
            f["name"]: tf.Variable(functools.partial(uniform, shape), shape=shape, dtype=tf.float32)
            for f in categorical
            if (shape := (f["ids"], f["embedding_dim"]))
        }
        layers = [
            layer
            for units in m.hidden_units
            for layer in (keras.layers.Dense(units, activation=m.activation), keras.layers.Dropout(m.dropout))
        ]
        tower = keras.Sequential([*layers, keras.layers.Dense(1, activation="sigmoid")])
        tower.build((None, len(numeric) + sum(f["embedding_dim"] for f in categorical)))
        optimizer = keras.optimizers.Adam(m.learning_rate)
        optimizer.build(tower.trainable_variables)
        shards = [shard for table in tables.values() for shard in getattr(table, "variables", [table])]
        lazy_adam = LazyAdam(tf, strategy, shards, m.learning_rate)
    loss_fn = keras.losses.BinaryCrossentropy(reduction=None)
    files = [os.path.join(args.data, s["file"]) for s in manifest["train"]["shards"]]
    dataset = input_fn(tf, files, tabular_parse(tf, manifest), t.global_batch_size)
    iterator = iter(coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(dataset)))

    def step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            parts = [(tf.concat([features[name] for name in numeric], axis=1) - mean) / std]
            parts += [
                tf.nn.embedding_lookup(table, hashing[name](features[name])[:, 0]) for name, table in tables.items()
            ]
            probability = tower(tf.concat(parts, axis=1), training=True)
            loss = tf.nn.compute_average_loss(loss_fn(labels, probability), global_batch_size=t.global_batch_size)
        dense, sparse = tape.gradient(loss, (tower.trainable_variables, shards))
        optimizer.apply_gradients(zip(dense, tower.trainable_variables, strict=True))
        lazy_adam.apply(sparse)
        return loss

    @tf.function
    def train_steps(iterator):
        loss = tf.constant(0.0)
        for _ in tf.range(args.steps_per_call):
            loss = strategy.run(step, args=(next(iterator),))
        return loss

    def call():
        return coordinator.schedule(train_steps, args=(iterator,))

    for _ in range(t.num_workers):  # every worker traces its steps before the timing (as the train stage's first call)
        call()
    coordinator.join()
    rate = examples_per_sec(call, args, t.global_batch_size, wait=lambda _: coordinator.join())
    print(f"examples/s {rate:.1f}", flush=True)
    os._exit(0)  # done: the coordinator's threads would hold the process ~9 s longer


def main() -> None:
    parser = loop_parser(__doc__)
    parser.add_argument("mode", choices=["single", "mirrored", "ps", "horovod", "sharded_ps"])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cores = pin_to_own_cores(args.mode)  # before TensorFlow starts its threads, which inherit the cores
    import keras
    import tensorflow as tf

    if cores:
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(min(2, cores))
    if args.mode == "sharded_ps":
        return sharded_ps(args, keras, tf)

    from tfdist.trainer import data
    from tfdist.trainer.models import build_model, build_optimizer
    from tfdist.trainer.runtime import load_spec

    spec = load_spec(args.spec)
    manifest = read_record(os.path.join(args.data, MANIFEST), Manifest)
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
        cluster = ps_cluster(tf)
        if cluster is None:
            return
        strategy, coordinator = cluster
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
