"""Stage train: one custom training loop, which knows no mode: the gradient sync chosen by the mode
(``tfdist.trainer.syncs``, one module per mode) builds the model in its scope, syncs the gradients, runs the steps,
and runs the training in its worlds (one, or one per world under Horovod elastic). The memory guard
(``memory_guard``) refuses tables too large for the host before TensorFlow starts.

Each worker or rank reads its own train shards. The chief (worker 0, the PS chief, rank 0) writes
checkpoints into the run's checkpoint directory; a restarted run resumes from the latest one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import MANIFEST
from tfdist.contract.progress import CurveWrite, TrainProgress, beat, curve_line, warm_start_summary
from tfdist.contract.records import write_record
from tfdist.contract.stages import TrainArgs
from tfdist.contract.train_records import CurvePoint, TrainResult
from tfdist.infra import storage
from tfdist.infra.jsonfiles import sha256_file
from tfdist.trainer import data, scratch
from tfdist.trainer.memory_guard import refuse_tables_over_memory
from tfdist.trainer.models import IntegrityError, build_embedding_optimizer, build_model, build_optimizer
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say
from tfdist.trainer.summaries import scalar_writer, summaries_upload
from tfdist.trainer.syncs import State, Sync, gradient_sync
from tfdist.trainer.syncs.elastic import elastic_run, pin_elastic_rank
from tfdist.trainer.train_metrics import TaskSums
from tfdist.trainer.uploads import Job, Pace, Uploader
from tfdist.trainer.warm_start import ParentRestore

if TYPE_CHECKING:
    from tfdist.spec import Spec

STEPS_PER_CALL = 10  # training steps per tf.function call (per worker closure with a parameter server)
PROGRESS_SECONDS = 2.0


def shard_records(tf, files: list[str], reader, readers: int, seed: int):
    """The records of reader ``reader`` of ``readers`` (an int, or a parameter-server worker's index tensor): every
    ``readers``-th shard from the ``reader``-th, endless, shuffled (a tensor seed fails under a global seed)."""
    return (  # shards are read one after another: parallel reads cost a worker's only core ~10%
        tf.data.Dataset.from_tensor_slices(files)
        .shard(readers, reader)
        .flat_map(tf.data.TFRecordDataset)
        .shuffle(4096, seed=seed, reshuffle_each_iteration=True)
        .repeat()
    )


def steady_rate(step: int, now: float, warm: tuple[float, int] | None, global_batch: int) -> float | None:
    """Examples/s since the first step call (tracing excluded); None before a second call."""
    if warm is None or step == warm[1] or now <= warm[0]:
        return None
    return round((step - warm[1]) * global_batch / (now - warm[0]), 1)


def weights_digest(model) -> str:
    """A digest of the model's Keras weights (a table split over parameter servers is not read onto the chief)."""
    h = hashlib.sha256()
    for weight in model.weights:
        h.update(weight.numpy().tobytes())
    return h.hexdigest()[:16]


def new_progress(step: int, size: int) -> dict:
    """Training progress from ``step``: the step, the current epoch's sums of the step vectors (``size`` values),
    steps and examples, the finished epochs' metrics."""
    return {"step": step, "epoch_sums": np.zeros(size), "epoch_steps": 0, "epoch_examples": 0, "history": []}


class TrainingRun:
    """One training process's run: its model and checkpoint (built on creation), the restore, the training loop
    (in the sync's worlds) with its progress and checkpoints, and the result."""

    def __init__(self, tf, sync: Sync, spec: Spec, args: TrainArgs, manifest: Manifest) -> None:
        import keras

        from tfdist.trainer.embeddings import tables, trained_weights

        self.tf, self.sync, self.args, self.spec, self.training = tf, sync, args, spec, spec.training
        self.manifest = manifest
        self.global_batch = self.training.global_batch_size
        self.steps_per_epoch = max(1, manifest.train.examples // self.global_batch)
        self.total_steps = self.training.epochs * self.steps_per_epoch
        self.uploads: Uploader | None = None
        self.pace = Pace(self.training.upload_every_seconds)  # of the chief's uploads
        self.uploader()  # the chief's starts now: its imports overlap the model's building
        keras.utils.set_random_seed(self.training.seed)
        with sync.scope():
            self.model = build_model(spec, manifest, args.data)
            self.optimizer = build_optimizer(spec, scale=sync.learning_rate_scale)
            self.table_optimizer = build_embedding_optimizer(spec, scale=sync.learning_rate_scale)
            self.dense, self.table_pieces = trained_weights(self.model, sparse=bool(self.table_optimizer))
            self.optimizer.build(self.dense)
            self.optimizers = {"optimizer": self.optimizer}  # by their part of the checkpoint
            if self.table_optimizer:
                self.table_optimizer.build(tables(self.model))
                self.optimizers["embedding_optimizer"] = self.table_optimizer
            # our own step count: optimizer.iterations loses increments under asynchronous parameter-server training
            self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.checkpoint = tf.train.Checkpoint(model=self.model, step=self.step_counter, **self.optimizers)
            # with an object store, the checkpoint files are written in this process's scratch, for it to upload
            io_device = sync.io_device if storage.is_object_store(args.checkpoints) else None
            self.checkpoint_options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.files = data.shard_paths(args.data, manifest, "train")
        self.parse = data.parse_fn(tf, manifest)
        self.task = TaskSums(manifest.label, spec.loss)
        self.managers: dict[str | None, Any] = {}
        self.latest, self.start_step = None, 0
        # the chief's TensorBoard writer, made before training (or at the first summary of a rank become rank 0)
        self.summaries: Callable[[int, dict[str, float | None]], None] | None = None
        self.window = Window(self.task)
        self.curve_lines = b""  # the chief's points of the training curve
        # started: when training began; warm: (time, step) after the first step call, which includes tracing:
        # throughput counts from there; stepped: when the last step call ended (throughput counts training, not
        # the checkpoints saved after it); last_report: when progress was last reported. All set by run().
        self.warm: tuple[float, int] | None = None
        self.started = self.stepped = self.last_report = float("nan")
        self.learning_rate = float("nan")  # the optimizer's, set by run() once restored
        self.holds = contextlib.ExitStack()  # the warm start's parent, held until training ends
        # an object store's checkpoints, heartbeats and summaries are written locally (scratch), the chief's uploaded
        self.checkpoint_dir = scratch.local_path(args.checkpoints)
        self.heartbeats = scratch.local_path(args.heartbeats)

    def uploader(self) -> Uploader | None:
        """This process's uploads to an object store, once it is the chief: started at its first call as the chief
        (from the set-up, or after an elastic rank became rank 0)."""
        if self.uploads is None and self.sync.is_chief and storage.is_object_store(self.args.checkpoints):
            self.uploads = Uploader(self.args.checkpoints)
        return self.uploads

    def run(self) -> None:
        """Restore; unless a finished run's result is there, train to the last step and write the result. The warm
        start's parent stays held (never pruned) until then."""
        with self.holds:
            self.restore()
            # constant through the training (no schedule): read once, since a read of the distributed variable
            # costs most of a summary's time (0.5 ms of 0.7 under MultiWorkerMirrored)
            self.learning_rate = float(self.optimizer.learning_rate.numpy())
            sync = self.sync
            if self.start_step >= self.total_steps and storage.exists(self.args.result):
                say(f"{sync.name}: already trained to step {self.start_step} ({self.latest}); nothing to do")
                return
            cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
            say(
                f"{sync.name}: {'resuming from ' + self.latest if self.latest else 'starting fresh'} at step "
                f"{self.start_step} of {self.total_steps} ({self.steps_per_epoch} steps/epoch, global batch "
                f"{self.global_batch}, {sync.workers} workers, cores {cores})"
            )
            self.say_split_tables()
            os.makedirs(self.heartbeats, exist_ok=True)
            if sync.is_chief:
                self.summaries = scalar_writer(self.tf, self.args.tensorboard)
            self.started = self.stepped = self.last_report = time.monotonic()
            self.finish(self.train_worlds())

    def say_split_tables(self) -> None:
        """Log the tables split over the ps tasks: their shards and the tasks holding them."""
        from tfdist.trainer.embeddings import tables

        split = {name: table.variables for name, table in tables(self.model).items() if hasattr(table, "variables")}
        if split:
            say(
                f"{self.sync.name}: tables split over the ps tasks: "
                + "; ".join(
                    f"{name} {len(shards)} shards on ps "
                    + ",".join(str(self.tf.DeviceSpec.from_string(shard.device).task) for shard in shards)
                    for name, shards in split.items()
                )
            )

    @property
    def variables(self) -> list:
        """Every variable of the model and its optimizers."""
        from tfdist.trainer.embeddings import split_tables

        table_optimizer = self.table_optimizer.variables if self.table_optimizer else []
        return [*self.model.variables, *split_tables(self.model), *self.optimizer.variables, *table_optimizer]

    def restore(self) -> None:
        """The latest checkpoint's weights, optimizer state and step, if there is one (one that does not restore
        refuses the stage); then the sync's start."""
        self.latest = self.tf.train.latest_checkpoint(scratch.fetch_checkpoints(self.args.checkpoints))
        if self.latest:
            try:
                self.checkpoint.restore(self.latest, options=self.checkpoint_options).assert_existing_objects_matched()
            except Exception as exc:
                fail(
                    str(
                        IntegrityError(
                            "restores",
                            self.latest,
                            f"{type(exc).__name__}: {exc}. Delete its files "
                            f"({self.latest}.index, {self.latest}.data-*) to resume from the checkpoint "
                            "before it",
                        )
                    ),
                    EXIT_REFUSED,
                )
        else:
            self.start_from_parent()
        self.sync.start(self.variables)
        self.start_step = int(self.step_counter.numpy())

    def start_from_parent(self) -> None:
        """A run's first start: the warm start's parent restored (or a cold start, said and recorded)."""
        parent = self.holds.enter_context(
            ParentRestore(self.spec, self.args.run, self.args.model_dir, self.args.warm_start_record)
        )
        record = parent.restore(self.tf, self.model, self.optimizers, self.manifest, self.args.data)
        if self.sync.is_chief:
            write_record(self.args.warm_start_record, record)
            chosen = record.parent
            say(
                f"{self.sync.name}: "
                + (
                    f"warm start from version {chosen.version} (run {chosen.run_id}): restored the {record.restored}"
                    if chosen
                    else f"cold start: {record.cold_start}"
                )
            )

    def manager(self):
        """The chief's CheckpointManager on the run's checkpoint directory (with MultiWorkerMirrored, every other
        worker's on a directory of its own); None for ranks that do not save. Made at the first save: an
        elastic rank may become rank 0 on the way."""
        sync = self.sync
        if not (sync.is_chief or sync.every_worker_saves):
            return None
        directory = self.checkpoint_dir if sync.is_chief else None
        if directory not in self.managers:
            self.managers[directory] = self.tf.train.CheckpointManager(
                self.checkpoint,
                directory or tempfile.mkdtemp(prefix="tfdist-ckpt-"),
                max_to_keep=self.training.keep_checkpoints,
            )
        return self.managers[directory]

    def dataset(self, reader, readers: int, per_replica_batch, first_step: int):
        """The dataset of reader ``reader`` of ``readers``: its own records (``shard_records``), batched, from
        ``first_step``."""
        return (
            shard_records(self.tf, self.files, reader, readers, self.training.seed)
            .batch(per_replica_batch(self.global_batch), drop_remainder=True)
            .skip(first_step // (readers if self.sync.readers_take_turns else 1))
            .map(self.parse, num_parallel_calls=data.READ_PARALLELISM)
            .prefetch(2)
        )

    def replica_step(self, batch: int):
        """One replica's training step, its loss averaged over ``batch`` examples (the step's, over replicas): the
        step vector [loss, the task's metric sums] (``TaskSums``)."""
        tf, model, optimizer, sync, task = self.tf, self.model, self.optimizer, self.sync, self.task

        dense, pieces, table_optimizer = self.dense, self.table_pieces, self.table_optimizer

        def step(features_labels):
            features, labels = features_labels
            variables = [*dense, *pieces]
            with tf.GradientTape() as tape:
                outputs = model(features, training=True)
                loss = tf.nn.compute_average_loss(task.losses(tf, labels, outputs), global_batch_size=batch)
            gradients = sync.sync_gradients(tape.gradient(loss, variables), variables)
            optimizer.apply_gradients(zip(gradients[: len(dense)], dense, strict=True))
            if table_optimizer:
                table_optimizer.apply(sync.summed(gradients[len(dense) :]), pieces)
            return tf.concat([loss[None], task.sums(tf, labels, outputs)], 0)

        return step

    def train_worlds(self) -> State:
        """Train in the sync's worlds; the final progress."""
        state = self.sync.state(
            self.variables,
            **new_progress(self.start_step, self.task.size),
            world_size=self.sync.workers,
        )
        state.reached = self.start_step  # the end of this process's last step call (not part of the state)
        self.sync.run(self.train_world, state)
        return state

    def train_world(self, state: State) -> None:
        """One world's training: entered at the start and, under Horovod elastic, again after every reset, with the
        committed state synchronized from rank 0."""
        sync = self.sync
        size = sync.workers
        if state.world_size != size:
            if sync.is_chief:  # reached: the end of the step call the world changed in (or at)
                say(
                    f"{sync.name}: world size {state.world_size} -> {size} at step {state.reached} "
                    f"(restored commit at step {state.step})"
                )
                self.last_report = float("-inf")  # report the first step call of the new world
            state.world_size = size
        batch = sync.step_batch(self.global_batch)
        run_steps = sync.step_runner(
            self.replica_step(batch),
            self.task.size,
            lambda r, n, b: self.dataset(r, n, b, first_step=state.step),
        )
        self.train(run_steps, state, batch)

    def train(self, run_steps, p: State, batch: int) -> None:
        """Steps from ``p.step`` to the last, ``batch`` examples each; ``p`` holds the progress, kept after every
        step call and committed at checkpoint boundaries (a commit after every step call, a collective of 5-6 ms with
        Gloo on 2 cores, would cost Horovod elastic a third of its throughput)."""
        sync, total, per_epoch = self.sync, self.total_steps, self.steps_per_epoch
        every, per_call = self.training.checkpoint_every_steps, STEPS_PER_CALL * sync.chunks_per_call
        while p.step < total:
            step = p.step
            steps = min(per_call, total - step, every - step % every, per_epoch - step % per_epoch)
            p.reached = step + steps  # where this step call ends, if it does
            sums = run_steps(steps)
            self.stepped = time.monotonic()
            p.step = step = step + steps
            beat(self.heartbeats, sync.name, step)
            if self.warm is None:
                self.warm = (time.monotonic(), step)
                say(f"{sync.name}: first {steps} steps done in {self.warm[0] - self.started:.2f}s (tracing included)")
            p.epoch_sums = p.epoch_sums + sums  # new values, never changed in place: a commit keeps references
            p.epoch_steps, p.epoch_examples = p.epoch_steps + steps, p.epoch_examples + steps * batch
            loss, metrics = self.task.summarized(p.epoch_sums, p.epoch_steps, p.epoch_examples)
            if step % every == 0 or step == total:
                self.save_checkpoint(step)
            self.window.add(sums, steps, steps * batch)
            if step % self.training.summary_every_steps < steps or step == total:
                self.summarize(step)
            self.report(step, loss, metrics)
            if step % per_epoch == 0:
                p.history = [*p.history, {"loss": loss, **metrics}]  # a new list: a commit keeps a reference
                p.epoch_sums, p.epoch_steps, p.epoch_examples = np.zeros(self.task.size), 0, 0
            if step % every == 0:
                p.commit()  # save, then (Horovod elastic) check_host_updates: raises HostsUpdatedInterrupt
            else:
                p.save()

    def save_checkpoint(self, step: int) -> None:
        saver = self.manager()
        if saver:
            self.step_counter.assign(step)
            saver.save(checkpoint_number=step, options=self.checkpoint_options)
            if self.sync.is_chief:
                say(f"{self.sync.name}: saved checkpoint {saver.latest_checkpoint}")
                key = f"the checkpoints' upload to {self.args.checkpoints}"
                if (uploads := self.uploader()) and self.pace.due(key, step == self.total_steps):
                    uploads.check()
                    keep, what = self.training.keep_checkpoints, f"the upload of {saver.latest_checkpoint}"
                    job = scratch.checkpoint_upload(self.checkpoint_dir, self.args.checkpoints, keep)
                    uploads.submit(job, f"{what} to {self.args.checkpoints}", key)

    def summarize(self, step: int) -> None:
        """The chief writes the steps since the last summary (mean loss, the train metrics, examples/s) and the
        learning rate to TensorBoard and the training curve; every process starts a new window."""
        window, self.window = self.window, Window(self.task)
        if not self.sync.is_chief:
            return
        point = {"step": step, **window.means(), "learning_rate": self.learning_rate}
        if self.summaries is None:
            self.summaries = scalar_writer(self.tf, self.args.tensorboard)
        self.summaries(step, {k: v for k, v in point.items() if k != "step"})
        self.curve_lines += curve_line(CurvePoint.model_validate(point))
        self.write_record(CurveWrite(self.args.curve, self.curve_lines), "the training curve", step)
        job, what = summaries_upload(self.args.tensorboard)
        if (uploads := self.uploader()) and self.pace.due(what, step == self.total_steps):
            uploads.submit(job, what)

    def write_record(self, write: Job, record: str, step: int) -> None:
        """Write a record of the run's progress at ``step``: with a local root now; with an object store in the
        uploads' turn when one is due (an unreachable store never holds up a step; a later write of the record
        makes a waiting one needless)."""
        if not (uploads := self.uploader()):
            write()
        elif self.pace.due(record, step == self.total_steps):
            uploads.submit(write, f"the write of {record} at step {step}", key=record)

    def report(self, step: int, loss: float, metrics: dict[str, float | None]) -> None:
        """Log the progress (the chief also writes it to the progress record) every PROGRESS_SECONDS and at the
        last step."""
        now = time.monotonic()
        if now - self.last_report < PROGRESS_SECONDS and step != self.total_steps:
            return
        sync, epoch = self.sync, step / self.steps_per_epoch
        rate = steady_rate(step, now, self.warm, self.global_batch)
        if sync.is_chief:
            record = TrainProgress(
                step=step,
                total_steps=self.total_steps,
                epoch=round(epoch, 3),
                epochs=self.training.epochs,
                loss=loss,
                metrics=metrics,
                examples_per_sec=rate,
                workers=sync.workers,
                global_batch_size=self.global_batch,
                elapsed_seconds=round(now - self.started, 1),
                updated_at=time.time(),
            )
            self.write_record(functools.partial(write_record, self.args.progress, record), "the progress", step)
        shown = " ".join(f"{k} {v:.4f}" for k, v in {"loss": loss, **metrics}.items() if v is not None)
        say(
            f"{sync.name}: step {step}/{self.total_steps} epoch {epoch:.2f} {shown}"
            + (f" examples/s {rate:,.0f}" if rate else "")
        )
        self.last_report = now

    def finish(self, p: State) -> None:
        """Log the final weights' digest; the chief writes the result record, another worker that saved removes
        its own checkpoint directory."""
        finished = time.monotonic()
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sync, args, history = self.sync, self.args, p.history
        say(
            f"{sync.name}: done at step {p.step}; weights sha256 {weights_digest(self.model)}; "
            f"peak RSS {peak_mb:.0f} MB"
        )
        saver = self.manager()
        if not sync.is_chief:
            if saver:
                shutil.rmtree(saver.directory, ignore_errors=True)
            return
        if uploads := self.uploader():
            uploads.close()  # the result names the last checkpoint: it is in the store first
        write_record(
            args.result,
            TrainResult(
                checkpoint=storage.join(args.checkpoints, os.path.basename(saver.latest_checkpoint)),
                checkpoint_dir=args.checkpoints,
                final_step=p.step,
                resumed_from_step=self.start_step,
                data_manifest_sha256=sha256_file(os.path.join(args.data, MANIFEST)),
                metrics=history[-1] if history else {},
                loss_per_epoch=[round(m["loss"], 5) for m in history],
                examples_per_sec=steady_rate(p.step, self.stepped, self.warm, self.global_batch),
                workers=sync.workers,
                train_seconds=round(finished - self.started, 2),
                warm_start=warm_start_summary(self.args.warm_start_record),
            ),
        )
        say(f"{sync.name}: wrote {args.result}: {json.dumps(history[-1] if history else {})}")


class Window:
    """The training steps since the last summary: the sum of their step vectors, steps, examples, and when it
    began."""

    def __init__(self, task: TaskSums) -> None:
        self.task, self.sums = task, np.zeros(task.size)
        self.steps = self.examples = 0
        self.began = time.monotonic()

    def add(self, sums: np.ndarray, steps: int, examples: int) -> None:
        self.sums, self.steps, self.examples = self.sums + sums, self.steps + steps, self.examples + examples

    def means(self) -> dict[str, float | None]:
        """The loss and train metrics of the window, and its examples/s."""
        seconds = time.monotonic() - self.began
        loss, metrics = self.task.summarized(self.sums, self.steps, self.examples)
        return {
            "loss": loss,
            **metrics,
            "examples_per_sec": round(self.examples / seconds, 1) if seconds > 0 else None,
        }


def main() -> None:
    args = TrainArgs.parse()
    spec = load_spec(args.spec)
    manifest, local_data = data.verified_manifest(args.data, "train")
    args = dataclasses.replace(args, data=local_data)
    refuse_tables_over_memory(spec, manifest)
    elastic = elastic_run(spec.training)
    if elastic:
        pin_elastic_rank()
    tf = import_tensorflow()
    sync = gradient_sync(tf, spec.training, elastic)
    if sync is not None:
        TrainingRun(tf, sync, spec, args, manifest).run()


if __name__ == "__main__":
    run_stage(main)
