"""Stage train: one custom training loop; how gradients are synchronized depends on the mode.

Mode ``multi_worker_mirrored``: one process per worker, cluster from TF_CONFIG,
MultiWorkerMirroredStrategy; the optimizer all-reduces gradients across workers.
(Keras 3 ``model.fit`` fails across workers under this strategy, the custom loop does not.)

Each worker reads its own train shards; the chief (worker 0) writes checkpoints into the
run's checkpoint directory, the others into a temp directory (every worker must take part in
saving). A restarted run resumes from the latest checkpoint."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from trainer import data
from trainer.artifacts import read_json, write_json_atomic
from trainer.models import build_model, build_optimizer
from trainer.runtime import import_tensorflow, load_spec, parse_args, say

STEPS_PER_CALL = 10  # training steps per tf.function call
PROGRESS_SECONDS = 2.0


class Mirrored:
    """Gradient sync by MultiWorkerMirroredStrategy over the TF_CONFIG cluster."""

    def __init__(self, tf):
        self.tf = tf
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = self.strategy.cluster_resolver
        self.role = resolver.task_type or "worker"
        self.index = resolver.task_id or 0
        self.num_workers = max(1, len(resolver.cluster_spec().as_dict().get("worker", [])))
        self.is_chief = self.index == 0

    def scope(self):
        return self.strategy.scope()

    def worker_dataset(self, dataset_fn):
        """``dataset_fn(pipeline_index, num_pipelines, per_replica_batch)`` → this worker's distributed dataset."""
        return self.strategy.distribute_datasets_from_function(
            lambda ctx: dataset_fn(ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.get_per_replica_batch_size)
        )

    def run(self, replica_step, batch):
        """One synchronized step; returns the sums of the replicas' outputs."""
        outputs = self.strategy.run(replica_step, args=(batch,))
        return [self.strategy.reduce("SUM", o, axis=None) for o in outputs]


def main() -> None:
    args = parse_args(__doc__, "data", "checkpoints", "result")
    spec = load_spec(args.spec)
    tf = import_tensorflow()
    t = spec["training"]
    manifest = read_json(os.path.join(args.data, "manifest.json"))
    sync = Mirrored(tf)
    name = f"{sync.role}-{sync.index}"
    global_batch = t["global_batch_size"]
    steps_per_epoch = max(1, manifest["train"]["examples"] // global_batch)
    total_steps = t["epochs"] * steps_per_epoch
    import keras

    keras.utils.set_random_seed(t["seed"])

    with sync.scope():
        model = build_model(spec, manifest)
        optimizer = build_optimizer(spec)
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    latest = tf.train.latest_checkpoint(args.checkpoints)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    start_step = int(optimizer.iterations.numpy())
    if start_step >= total_steps and os.path.exists(args.result):
        say(f"{name}: already trained to step {start_step} ({latest}); nothing to do")
        return
    say(f"{name}: {'resuming from ' + latest if latest else 'starting fresh'} at step {start_step} of "
        f"{total_steps} ({steps_per_epoch} steps/epoch, global batch {global_batch}, {sync.num_workers} workers)")
    checkpoint_dir = args.checkpoints if sync.is_chief else tempfile.mkdtemp(prefix="tfdist-ckpt-")
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=t["keep_checkpoints"])

    files = data.shard_paths(args.data, manifest, "train")
    parse = data.parse_fn(tf, manifest)

    def dataset_fn(pipeline, num_pipelines, per_replica_batch):
        own = files[pipeline::num_pipelines]
        return (
            tf.data.TFRecordDataset(own, num_parallel_reads=min(len(own), data.READ_PARALLELISM))
            .shuffle(4096, seed=t["seed"] + pipeline, reshuffle_each_iteration=True)
            .repeat()
            .batch(per_replica_batch(global_batch), drop_remainder=True)
            .skip(start_step)
            .map(parse, num_parallel_calls=data.READ_PARALLELISM)
            .prefetch(2)
        )

    iterator = iter(sync.worker_dataset(dataset_fn))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    def replica_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            probabilities = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(labels, probabilities), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(probabilities, -1), labels), tf.float32))
        return loss, correct

    @tf.function
    def train_steps(iterator, steps):
        loss_sum, correct_sum = tf.constant(0.0), tf.constant(0.0)
        for _ in tf.range(steps):
            loss, correct = sync.run(replica_step, next(iterator))
            loss_sum += loss
            correct_sum += correct
        return loss_sum, correct_sum

    every = t["checkpoint_every_steps"]
    step, epoch_loss, epoch_correct, epoch_steps = start_step, 0.0, 0.0, 0
    started = last_report = time.monotonic()
    while step < total_steps:
        steps = min(STEPS_PER_CALL, total_steps - step, every - step % every, steps_per_epoch - step % steps_per_epoch)
        loss_sum, correct_sum = train_steps(iterator, tf.constant(steps))
        step += steps
        epoch_loss, epoch_correct, epoch_steps = (
            epoch_loss + float(loss_sum), epoch_correct + float(correct_sum), epoch_steps + steps
        )
        metrics = {"loss": epoch_loss / epoch_steps, "accuracy": epoch_correct / (epoch_steps * global_batch)}
        now = time.monotonic()
        if step % every == 0 or step == total_steps:
            manager.save(checkpoint_number=step)
        if now - last_report >= PROGRESS_SECONDS or step == total_steps:
            rate = (step - start_step) * global_batch / (now - started)
            say(f"{name}: step {step}/{total_steps} epoch {step / steps_per_epoch:.2f} "
                f"loss {metrics['loss']:.4f} accuracy {metrics['accuracy']:.4f} examples/s {rate:,.0f}")
            last_report = now
        if step % steps_per_epoch == 0:
            final_metrics, epoch_loss, epoch_correct, epoch_steps = metrics, 0.0, 0.0, 0
    elapsed = time.monotonic() - started
    if not sync.is_chief:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        return
    write_json_atomic(args.result, {
        "checkpoint": manager.latest_checkpoint,
        "checkpoint_dir": args.checkpoints,
        "final_step": step,
        "resumed_from_step": start_step,
        "metrics": final_metrics if step > start_step else {},
        "examples_per_sec": round((step - start_step) * global_batch / elapsed, 1) if step > start_step else None,
        "workers": sync.num_workers,
        "train_seconds": round(elapsed, 2),
    })
    say(f"{name}: done at step {step}; checkpoint {manager.latest_checkpoint}")


if __name__ == "__main__":
    main()
