"""Stage train: one custom training loop; the gradient sync is chosen by the mode.

- ``multi_worker_mirrored`` (backend tf): one process per worker, cluster from TF_CONFIG; the optimizer
  all-reduces gradients across workers. Keras 3 ``model.fit`` fails across workers here, this loop does not.
- ``parameter_server`` (backend tf): the chief coordinates (ClusterCoordinator.schedule), variables live
  on the ps tasks, workers run the scheduled steps; ps and worker processes only serve.
- Horovod (backend mpi): one rank per process; initial weights broadcast from rank 0, gradients summed
  with ``hvd.grouped_allreduce`` (``DistributedGradientTape`` breaks on Keras 3 variables).

Each worker or rank reads its own train shards. The chief (worker 0, the PS chief, rank 0) writes
checkpoints into the run's checkpoint directory; a restarted run resumes from the latest one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import shutil
import tempfile
import time

from trainer import data
from trainer.artifacts import read_json, sha256_file, write_json_atomic
from trainer.contract import beat
from trainer.models import build_model, build_optimizer
from trainer.runtime import import_tensorflow, load_spec, parse_args, say

STEPS_PER_CALL = 10  # training steps per tf.function call
PROGRESS_SECONDS = 2.0


class Mirrored:
    """MultiWorkerMirroredStrategy over the TF_CONFIG cluster; every worker takes part in saving."""

    every_worker_saves = True
    learning_rate_scale = 1

    def __init__(self, tf):
        self.tf = tf
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = self.strategy.cluster_resolver
        self.name = f"{resolver.task_type or 'worker'}-{resolver.task_id or 0}"
        self.workers = max(1, len(resolver.cluster_spec().as_dict().get("worker", [])))
        self.is_chief = not resolver.task_id

    def scope(self):
        return self.strategy.scope()

    def start(self, model, optimizer) -> None:
        """Called once the checkpoint, if any, is restored."""

    def sync_gradients(self, gradients):
        return gradients  # the optimizer all-reduces them under the strategy

    def _chunk(self, replica_step):
        """tf.function running ``steps`` steps from ``iterator``: the sums of loss and correct over replicas.
        Each replica keeps its own sums; they are reduced across workers once per call, not per step."""
        strategy, tf = self.strategy, self.tf

        def accumulate(batch, sums):
            return [total + value for total, value in zip(sums, replica_step(batch))]

        @tf.function
        def chunk(iterator, steps):
            sums = strategy.run(lambda: [tf.constant(0.0), tf.constant(0.0)])
            for _ in tf.range(steps):
                sums = strategy.run(accumulate, args=(next(iterator), sums))
            return [strategy.reduce("SUM", total, axis=None) for total in sums]

        return chunk

    @staticmethod
    def _from_context(dataset_fn):
        return lambda ctx: dataset_fn(ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.get_per_replica_batch_size)

    def step_runner(self, replica_step, dataset_fn):
        """``run(steps)`` → [loss sum, correct sum] over all replicas and ``steps`` steps."""
        iterator = iter(self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn)))
        chunk = self._chunk(replica_step)
        return lambda steps: [float(v) for v in chunk(iterator, self.tf.constant(steps))]


class ParameterServer(Mirrored):
    """ParameterServerStrategy: this process is the chief; steps are scheduled onto the workers."""

    every_worker_saves = False

    def __init__(self, tf, resolver):
        self.tf = tf
        self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.name, self.is_chief = "chief-0", True
        self.workers = len(resolver.cluster_spec().as_dict()["worker"])

    def step_runner(self, replica_step, dataset_fn):
        iterator = iter(self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn))))
        chunk = self._chunk(replica_step)

        def run(steps):
            shares = [steps // self.workers + (i < steps % self.workers) for i in range(self.workers)]
            results = [self.coordinator.schedule(chunk, args=(iterator, self.tf.constant(n))) for n in shares if n]
            self.coordinator.join()
            return [sum(float(r.fetch()[i]) for r in results) for i in range(2)]

        return run


class Horovod:
    """Horovod ranks (mpirun or horovodrun); rank 0 alone writes checkpoints."""

    every_worker_saves = False

    def __init__(self, tf, spec):
        import horovod.tensorflow as hvd

        hvd.init()
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
        self.tf, self.hvd = tf, hvd
        # autograph would convert Horovod's Python wrappers at every trace: 1.2 s instead of 0.2 s
        self.grouped_allreduce = tf.autograph.experimental.do_not_convert(hvd.grouped_allreduce)
        self.name, self.workers, self.is_chief = f"rank-{hvd.rank()}", hvd.size(), hvd.rank() == 0
        mpi = spec["training"]["mpi"]
        self.learning_rate_scale = hvd.size() if mpi is None or mpi["scale_learning_rate"] else 1

    def scope(self):
        return contextlib.nullcontext()

    def start(self, model, optimizer) -> None:
        for i, variable in enumerate([*model.variables, *optimizer.variables]):
            variable.assign(self.hvd.broadcast(self.tf.convert_to_tensor(variable), root_rank=0, name=f"init_{i}"))

    def sync_gradients(self, gradients):
        return self.grouped_allreduce(gradients, op=self.hvd.Sum)

    def step_runner(self, replica_step, dataset_fn):
        tf, hvd = self.tf, self.hvd
        iterator = iter(dataset_fn(hvd.rank(), hvd.size(), lambda global_batch: global_batch // hvd.size()))

        @tf.function
        def chunk(steps):
            sums = [tf.constant(0.0), tf.constant(0.0)]
            for _ in tf.range(steps):
                sums = [total + value for total, value in zip(sums, replica_step(next(iterator)))]
            return self.grouped_allreduce(sums, op=hvd.Sum)

        return lambda steps: [float(v) for v in chunk(tf.constant(steps))]


def serve(tf, resolver) -> None:
    """A parameter-server cluster's ps or worker task: serve until the launcher stops this process."""
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    say(f"{resolver.task_type}-{resolver.task_id}: serving at {server.target}")
    server.join()


def steady_rate(step: int, now: float, warm: tuple[float, int] | None, global_batch: int) -> float | None:
    """Examples/s since the first step call (tracing excluded); None before a second call."""
    if warm is None or step == warm[1] or now <= warm[0]:
        return None
    return round((step - warm[1]) * global_batch / (now - warm[0]), 1)


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for weight in model.weights:
        h.update(weight.numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    args = parse_args(__doc__, "data", "checkpoints", "result", "heartbeats")
    spec = load_spec(args.spec)
    tf = import_tensorflow()
    import keras

    t = spec["training"]
    if t["backend"] == "mpi":
        sync = Horovod(tf, spec)
    elif t["strategy"] == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type in ("ps", "worker"):
            return serve(tf, resolver)
        sync = ParameterServer(tf, resolver)
    else:
        sync = Mirrored(tf)
    manifest_path = os.path.join(args.data, "manifest.json")
    manifest = read_json(manifest_path)
    global_batch = t["global_batch_size"]
    steps_per_epoch = max(1, manifest["train"]["examples"] // global_batch)
    total_steps = t["epochs"] * steps_per_epoch
    keras.utils.set_random_seed(t["seed"])

    with sync.scope():
        model = build_model(spec, manifest)
        optimizer = build_optimizer(spec, scale=sync.learning_rate_scale)
        optimizer.build(model.trainable_variables)
        # our own step count: optimizer.iterations loses increments under asynchronous parameter-server training
        step_counter = tf.Variable(0, dtype=tf.int64, trainable=False)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_counter)
    latest = tf.train.latest_checkpoint(args.checkpoints)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    sync.start(model, optimizer)
    start_step = int(step_counter.numpy())
    if start_step >= total_steps and os.path.exists(args.result):
        say(f"{sync.name}: already trained to step {start_step} ({latest}); nothing to do")
        return
    say(f"{sync.name}: {'resuming from ' + latest if latest else 'starting fresh'} at step {start_step} of "
        f"{total_steps} ({steps_per_epoch} steps/epoch, global batch {global_batch}, {sync.workers} workers, "
        f"cores {','.join(map(str, sorted(os.sched_getaffinity(0))))})")
    os.makedirs(args.heartbeats, exist_ok=True)
    manager = None
    if sync.is_chief or sync.every_worker_saves:
        directory = args.checkpoints if sync.is_chief else tempfile.mkdtemp(prefix="tfdist-ckpt-")
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=t["keep_checkpoints"])

    files = data.shard_paths(args.data, manifest, "train")
    parse = data.parse_fn(tf, manifest)

    def dataset_fn(reader, readers, per_replica_batch):
        """The dataset of reader ``reader`` of ``readers``: its own shards, endless, batched."""
        return (  # shards are read one after another: parallel reads cost a worker's only core ~10%
            tf.data.TFRecordDataset(files[reader::readers])
            .shuffle(4096, seed=t["seed"] + reader, reshuffle_each_iteration=True)
            .repeat()
            .batch(per_replica_batch(global_batch), drop_remainder=True)
            .skip(start_step // (readers if isinstance(sync, ParameterServer) else 1))
            .map(parse, num_parallel_calls=data.READ_PARALLELISM)
            .prefetch(2)
        )

    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    def replica_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            probabilities = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(labels, probabilities), global_batch_size=global_batch)
        gradients = sync.sync_gradients(tape.gradient(loss, model.trainable_variables))
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(probabilities, -1), labels), tf.float32))
        return loss, correct

    run_steps = sync.step_runner(replica_step, dataset_fn)
    every = t["checkpoint_every_steps"]
    step, epoch_loss, epoch_correct, epoch_steps, history = start_step, 0.0, 0.0, 0, []
    started = last_report = time.monotonic()
    warm = None  # (time, step) after the first call, which includes tracing: throughput counts from there
    while step < total_steps:
        steps = min(STEPS_PER_CALL, total_steps - step, every - step % every, steps_per_epoch - step % steps_per_epoch)
        loss_sum, correct_sum = run_steps(steps)
        step += steps
        beat(args.heartbeats, sync.name)
        if warm is None:
            warm = (time.monotonic(), step)
            say(f"{sync.name}: first {steps} steps done in {warm[0] - started:.2f}s (tracing included)")
        epoch_loss, epoch_correct, epoch_steps = epoch_loss + loss_sum, epoch_correct + correct_sum, epoch_steps + steps
        metrics = {"loss": epoch_loss / epoch_steps, "accuracy": epoch_correct / (epoch_steps * global_batch)}
        if manager and (step % every == 0 or step == total_steps):
            step_counter.assign(step)
            manager.save(checkpoint_number=step)
            if sync.is_chief:
                say(f"{sync.name}: saved checkpoint {manager.latest_checkpoint}")
        now = time.monotonic()
        if now - last_report >= PROGRESS_SECONDS or step == total_steps:
            rate = steady_rate(step, now, warm, global_batch)
            say(f"{sync.name}: step {step}/{total_steps} epoch {step / steps_per_epoch:.2f} "
                f"loss {metrics['loss']:.4f} accuracy {metrics['accuracy']:.4f}"
                + (f" examples/s {rate:,.0f}" if rate else ""))
            last_report = now
        if step % steps_per_epoch == 0:
            history.append(metrics)
            epoch_loss, epoch_correct, epoch_steps = 0.0, 0.0, 0
    finished = time.monotonic()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    say(f"{sync.name}: done at step {step}; weights sha256 {weights_digest(model)}; peak RSS {peak_mb:.0f} MB")
    if not sync.is_chief:
        if manager:
            shutil.rmtree(manager.directory, ignore_errors=True)
        return
    write_json_atomic(args.result, {
        "checkpoint": manager.latest_checkpoint,
        "checkpoint_dir": args.checkpoints,
        "final_step": step,
        "resumed_from_step": start_step,
        "data_manifest_sha256": sha256_file(manifest_path),
        "metrics": history[-1] if history else {},
        "loss_per_epoch": [round(m["loss"], 5) for m in history],
        "examples_per_sec": steady_rate(step, finished, warm, global_batch),
        "workers": sync.workers,
        "train_seconds": round(finished - started, 2),
    })
    say(f"{sync.name}: wrote {args.result}: {json.dumps(history[-1] if history else {})}")


if __name__ == "__main__":
    main()
