"""Stage train: one custom training loop; the gradient sync is chosen by the mode.

- ``multi_worker_mirrored`` (backend tf): one process per worker, cluster from TF_CONFIG; the optimizer
  all-reduces gradients across workers. Keras 3 ``model.fit`` fails across workers here, this loop does not.
- ``parameter_server`` (backend tf): the chief coordinates (ClusterCoordinator.schedule), variables live
  on the ps tasks, workers run the scheduled steps; ps and worker processes only serve.
- Horovod (backend mpi): one rank per process; initial weights broadcast from rank 0, gradients summed
  with ``hvd.grouped_allreduce`` (``DistributedGradientTape`` breaks on Keras 3 variables).
- Horovod elastic (``training.min_workers`` < ``num_workers``, under ``horovodrun --gloo`` in elastic mode):
  the loop runs inside Horovod's elastic ``run_fn``; the ranks keep their state (model and optimizer
  variables, step, epoch sums) in host memory after every step call, and commit it (asking whether hosts
  came back) at every checkpoint boundary. A lost rank makes the others' collective fail: they restore the
  state of the last step call, re-form the world with whoever is left and go on; a returning rank joins at
  the survivors' next commit and receives rank 0's state. Each (re)start re-shards the data by the new
  rank/size and keeps the global batch (global // size per rank); the learning rate stays scaled by the
  planned ranks (num_workers × slots_per_worker), so a change of size changes neither. Rank 0 logs
  ``rank-0: world size 2 -> 1 at step 120 (restored commit at step 120)``.
  Horovod's own elastic state classes and ``hvd.elastic.run`` do not work with Keras 3 (why: docs/operations.md,
  "Elastic training, per mode"), so ``KerasVariablesState`` below saves, restores and broadcasts the Keras
  variables itself, under Horovod's ``run_fn`` with our own error mapping.

Each worker or rank reads its own train shards. The chief (worker 0, the PS chief, rank 0) writes
checkpoints into the run's checkpoint directory; a restarted run resumes from the latest one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import json
import os
import re
import resource
import shutil
import tempfile
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract.launch import CORES_ENV, EXIT_REFUSED, HOSTS_ENV
from tfdist.contract.layout import MANIFEST
from tfdist.contract.progress import CurveWrite, TrainProgress, beat, curve_line, warm_start_summary
from tfdist.contract.records import write_record
from tfdist.contract.stages import TrainArgs
from tfdist.contract.train_records import CurvePoint, TrainResult
from tfdist.infra import storage
from tfdist.infra.jsonfiles import sha256_file
from tfdist.trainer import data, scratch
from tfdist.trainer.models import IntegrityError, build_embedding_optimizer, build_model, build_optimizer, table_bytes
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, memory_limit, run_stage, say, tf_config
from tfdist.trainer.summaries import scalar_writer, summaries_upload
from tfdist.trainer.train_metrics import TaskSums
from tfdist.trainer.uploads import Job, Pace, Uploader
from tfdist.trainer.warm_start import ParentRestore

if TYPE_CHECKING:
    from tfdist.spec import Spec, TrainingSpec

STEPS_PER_CALL = 10  # training steps per tf.function call (per worker closure with a parameter server)
PROGRESS_SECONDS = 2.0
HOROVOD_FAILED = re.compile(r"Horovod has been shut down|gloo/transport|\{\{node [^}]*Horovod|\[Op:Horovod")
"""A TensorFlow error of a Horovod collective (a peer lost: Gloo's read error, or Horovod shut down after it)."""


def dense_rows(training: TrainingSpec) -> float:
    """The most rows of a table whose gradient an all-reduce mode makes dense (``training.sparse_gradients``): every
    table ('dense'), none ('gather'), or ('auto') those of at most half the global batch's rows, where all-gathering
    the rows looked up (at least the global batch of them) moves more than a ring all-reduce of the whole table (twice
    its rows)."""
    return {"dense": float("inf"), "gather": 0, "auto": training.global_batch_size // 2}[training.sparse_gradients]


def densified(tf, gradients: list, variables: list, max_rows: float, static_only: bool = False) -> list:
    """The gradients with those of tables of at most ``max_rows`` rows (IndexedSlices, from embedding lookups) made
    dense (``dense_rows``). With ``static_only``, also those whose number of rows is known only at run time (lists,
    crosses)."""
    return [
        tf.convert_to_tensor(g)
        if isinstance(g, tf.IndexedSlices) and (v.shape[0] <= max_rows or (static_only and g.values.shape[0] is None))
        else g
        for g, v in zip(gradients, variables, strict=True)
    ]


class Mirrored:
    """MultiWorkerMirroredStrategy over the TF_CONFIG cluster; every worker takes part in saving. The optimizer
    all-reduces the gradients; a sparse one (IndexedSlices) is all-gathered, unless its table is small or its
    number of rows varies (a list's, a cross's): TensorFlow 2.21 pads those to the longest inside a ``tf.cond``,
    and with a few of them in one step the workers' collectives failed ("Shape mismatch in the collective
    instance"), so they are made dense (``densified``)."""

    every_worker_saves = True
    io_device: str | None = None
    """The device that reads and writes checkpoint files in an object store's scratch (None: each variable's own)."""
    steps_per_call = STEPS_PER_CALL
    learning_rate_scale = 1

    def __init__(self, tf, training: TrainingSpec):
        self.tf = tf
        self.dense_rows = dense_rows(training)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = self.strategy.cluster_resolver
        self.name = f"{resolver.task_type or 'worker'}-{resolver.task_id or 0}"
        self.workers = max(1, len(resolver.cluster_spec().as_dict().get("worker", [])))
        self.is_chief = not resolver.task_id

    def scope(self):
        return self.strategy.scope()

    def start(self, variables: list) -> None:
        """Called once the checkpoint, if any, is restored, with every variable of the model and its optimizers."""

    def sync_gradients(self, gradients: list, variables: list) -> list:
        return densified(self.tf, gradients, variables, self.dense_rows, static_only=True)  # the optimizer reduces

    def summed(self, gradients: list) -> list:
        """Synced gradients summed over the replicas, for a sparse optimizer (a Keras optimizer sums them itself)."""
        return self.tf.distribute.get_replica_context().all_reduce("sum", gradients) if gradients else gradients

    def _chunk(self, replica_step, size: int):
        """tf.function running ``steps`` steps from ``iterator``: the sum of their step vectors (``size`` values)
        over replicas. Each replica keeps its own sums; they are reduced across workers once per call, not per
        step."""
        strategy, tf = self.strategy, self.tf

        @tf.function
        def chunk(iterator, steps):
            sums = strategy.run(lambda: tf.zeros([size]))
            for _ in tf.range(steps):
                sums = strategy.run(lambda batch, total: total + replica_step(batch), args=(next(iterator), sums))
            return strategy.reduce("SUM", sums, axis=None)

        return chunk

    def _from_context(self, dataset_fn):
        return lambda ctx: dataset_fn(ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.get_per_replica_batch_size)

    def step_runner(self, replica_step, size: int, dataset_fn):
        """``run(steps)`` → the sum of the step vectors (``size`` values) over all replicas and ``steps`` steps."""
        iterator = iter(self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn)))
        chunk = self._chunk(replica_step, size)
        return lambda steps: chunk(iterator, self.tf.constant(steps)).numpy().astype(float)


class ParameterServer(Mirrored):
    """ParameterServerStrategy: this process is the chief; steps are scheduled onto the workers. Each variable lives
    on a ps and is updated there: a sparse gradient pushes only the looked-up rows, and lookups read only them."""

    every_worker_saves = False
    io_device = "/job:chief/replica:0/task:0/device:CPU:0"
    """With an object store the chief reads and writes every checkpoint file: the ps hold the variables, but on
    Kubernetes they do not see the chief's scratch, where its checkpoints are written before upload. Its memory
    then holds the tables while it saves."""

    def __init__(self, tf, training: TrainingSpec, resolver):
        from tfdist.trainer.embeddings import TablePartitioner

        self.tf = tf
        self.partitioner = TablePartitioner(training.parameter_server_settings, training.num_ps)
        self.strategy = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=self.partitioner
        )
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.name, self.is_chief = "chief-0", True
        self.workers = len(resolver.cluster_spec().as_dict()["worker"])
        self.steps_per_call = STEPS_PER_CALL * self.workers  # each worker's closure runs STEPS_PER_CALL steps

    @contextlib.contextmanager
    def scope(self):
        """The strategy's scope, in which tables over ``training.parameter_server.shard_min_bytes`` are split."""
        with self.strategy.scope(), self.partitioner.building():
            yield

    def sync_gradients(self, gradients: list, variables: list) -> list:
        return gradients

    def summed(self, gradients: list) -> list:
        return gradients

    def _from_context(self, dataset_fn):
        """Each worker reads its own shards: TF's input context makes every worker's pipeline 0 of 1."""
        worker_index = self.tf.distribute.coordinator.experimental_get_current_worker_index
        return lambda ctx: dataset_fn(worker_index(), self.workers, ctx.get_per_replica_batch_size)

    def step_runner(self, replica_step, size: int, dataset_fn):
        iterator = iter(
            self.coordinator.create_per_worker_dataset(
                lambda: self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn))
            )
        )
        chunk = self._chunk(replica_step, size)

        def run(steps):
            shares = [steps // self.workers + (i < steps % self.workers) for i in range(self.workers)]
            results = [self.coordinator.schedule(chunk, args=(iterator, self.tf.constant(n))) for n in shares if n]
            self.coordinator.join()
            return sum(r.fetch().astype(float) for r in results)

        return run


class Horovod:
    """Horovod ranks (mpirun or horovodrun); rank 0 alone writes checkpoints. ``grouped_allreduce`` all-gathers a
    sparse gradient (IndexedSlices: Horovod 0.28.1 does two grouped all-gathers), unless its table is small
    (``densified``)."""

    every_worker_saves = False
    io_device = None
    steps_per_call = STEPS_PER_CALL

    def __init__(self, tf, training: TrainingSpec):
        import horovod.tensorflow as hvd

        hvd.init()
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            tf.config.set_visible_devices(gpus[self.local_index(hvd) % len(gpus)], "GPU")
        self.tf, self.hvd = tf, hvd
        self.dense_rows = dense_rows(training)
        # autograph would convert Horovod's Python wrappers at every trace: 1.2 s instead of 0.2 s
        self.grouped_allreduce = tf.autograph.experimental.do_not_convert(hvd.grouped_allreduce)
        mpi = training.mpi_settings
        # by the planned ranks: a world restarted (or continuing) with fewer keeps the global batch, and so the rate
        self.learning_rate_scale = training.num_workers * mpi.slots_per_worker if mpi.scale_learning_rate else 1

    # the current world: an elastic world changes while the process runs
    name = property(lambda self: f"rank-{self.hvd.rank()}")
    workers = property(lambda self: self.hvd.size())
    is_chief = property(lambda self: self.hvd.rank() == 0)

    @staticmethod
    def local_index(hvd) -> int:
        """This rank's place among the ranks on its machine (its GPU)."""
        return hvd.local_rank()

    def scope(self):
        return contextlib.nullcontext()

    def start(self, variables: list) -> None:
        for i, variable in enumerate(variables):
            variable.assign(self.hvd.broadcast(self.tf.convert_to_tensor(variable), root_rank=0, name=f"init_{i}"))

    def sync_gradients(self, gradients: list, variables: list) -> list:
        """The gradients summed over the ranks: the dense ones in one grouped all-reduce, the sparse ones in another
        (Horovod 0.28.1 pairs the gathered slices with the wrong tensors when both kinds are in one call), their
        indices as int64 (one all-gather takes one dtype; a cross's ids are int64, a lookup's int32)."""
        tf, hvd = self.tf, self.hvd
        gradients = densified(tf, gradients, variables, self.dense_rows)
        sparse = [i for i, g in enumerate(gradients) if isinstance(g, tf.IndexedSlices)]
        dense = [i for i, g in enumerate(gradients) if i not in sparse]
        slices = [gradients[i] for i in sparse]
        as_int64 = [tf.IndexedSlices(g.values, tf.cast(g.indices, tf.int64), g.dense_shape) for g in slices]
        summed = dict(zip(dense, self.grouped_allreduce([gradients[i] for i in dense], op=hvd.Sum), strict=True))
        summed.update(zip(sparse, self.grouped_allreduce(as_int64, op=hvd.Sum), strict=True))
        return [summed[i] for i in range(len(gradients))]

    def summed(self, gradients: list) -> list:
        return gradients  # by sync_gradients

    def step_runner(self, replica_step, size: int, dataset_fn):
        tf, hvd = self.tf, self.hvd
        iterator = iter(dataset_fn(hvd.rank(), hvd.size(), lambda global_batch: global_batch // hvd.size()))

        @tf.function
        def chunk(steps):
            sums = tf.zeros([size])
            for _ in tf.range(steps):
                sums += replica_step(next(iterator))
            return self.grouped_allreduce([sums], op=hvd.Sum)[0]

        return lambda steps: chunk(tf.constant(steps)).numpy().astype(float)


class ElasticHorovod(Horovod):
    """Horovod elastic (module docstring): ``run(train, state)`` trains in Horovod's elastic loop."""

    @staticmethod
    def local_index(hvd) -> int:
        return elastic_slot()

    def start(self, variables: list) -> None:
        """Nothing: a collective outside the elastic loop would meet a joining rank's state sync; the state's
        first sync broadcasts rank 0's variables."""

    def lost_peer(self, error: Exception):
        """Horovod's HorovodInternalError (reset and go on from the last commit) for an error of a Horovod
        collective, whose peer was lost; None for any other error."""
        from horovod.common.exceptions import HorovodInternalError

        message = str(error)
        if not isinstance(error, self.tf.errors.OpError) or not HOROVOD_FAILED.search(message):
            return None
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        cause = next((line for line in lines if HOROVOD_FAILED.search(line) and not line.startswith("File ")), lines[0])
        return HorovodInternalError(f"{type(error).__name__}: {cause[:300]}")

    def state(self, variables, **progress):
        """Horovod elastic state over Keras 3 variables and the plain values in ``progress``."""
        from horovod.common.elastic import ObjectState

        sync = self

        class KerasVariablesState(ObjectState):
            """``hvd.elastic.TensorFlowKerasState`` for Keras 3: commit copies the variables to host memory,
            restore assigns them back, sync broadcasts rank 0's (then its progress values)."""

            def __init__(self):
                self.variables = variables
                self._committed = [v.numpy() for v in variables]
                super().__init__(bcast_object=sync.hvd.broadcast_object, get_rank=sync.hvd.rank, **progress)

            def save(self):
                self._committed = [v.numpy() for v in self.variables]
                super().save()

            def restore(self):
                for variable, value in zip(self.variables, self._committed, strict=True):
                    variable.assign(value)
                super().restore()

            def sync(self):
                try:
                    for i, variable in enumerate(self.variables):
                        variable.assign(
                            sync.hvd.broadcast(sync.tf.convert_to_tensor(variable), root_rank=0, name=f"state_{i}")
                        )
                    self._committed = [v.numpy() for v in self.variables]
                    super().sync()
                except Exception as error:  # a rank lost while syncing: reset again
                    lost = sync.lost_peer(error)
                    if lost is None:
                        raise
                    raise lost from error

        return KerasVariablesState()

    def run(self, train, state):
        """``train(state)`` in Horovod's elastic loop: a lost peer restores the last commit, a change of hosts
        (a worker back) keeps it; either way the world is re-formed (shutdown, init) and ``train`` called again."""
        from horovod.common.elastic import run_fn
        from horovod.common.exceptions import HostsUpdatedInterrupt

        def attempt(state):
            name = self.name
            try:
                return train(state)
            except HostsUpdatedInterrupt:
                say(f"{name}: hosts changed at step {state.step}; re-forming the world")
                raise
            except Exception as error:
                lost = self.lost_peer(error)
                if lost is None:
                    raise
                say(f"{name}: lost a peer at step {state.step}: {lost}")
                raise lost from error

        def reset():
            gc.collect()  # the ended world's dataset iterator and step function (in cycles through the error's frames)
            self.hvd.shutdown()
            self.hvd.init()

        return run_fn(attempt, reset)(state)


def serve(tf, resolver) -> None:
    """A parameter-server cluster's ps or worker task: serve until the launcher stops this process."""
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True
    )
    say(f"{resolver.task_type}-{resolver.task_id}: serving at {server.target}")
    server.join()


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


def elastic_run(training: TrainingSpec) -> bool:
    """Horovod elastic: the spec asks for it and horovodrun started this rank in elastic mode (another
    launcher starting the ranks itself gets the fixed-size loop)."""
    return training.backend == "mpi" and training.elastic and os.environ.get("HOROVOD_ELASTIC") == "1"


def elastic_slot() -> int:
    """This rank's place among the ranks on this machine under elastic horovodrun: each worker is a host of its
    own (TFDIST_HOROVOD_HOSTS, operators/launchers/processes.py), so local ranks repeat across workers; the place is
    the host's position × its slots + the local rank (stable: a returning worker gets its host name back)."""
    hosts = [entry.rpartition(":") for entry in os.environ.get(HOSTS_ENV, "").split(",") if entry]
    names = [host for host, _, _ in hosts]
    local_rank = int(os.environ.get("HOROVOD_LOCAL_RANK", 0))
    if os.environ.get("HOROVOD_HOSTNAME") not in names:
        return local_rank
    return names.index(os.environ["HOROVOD_HOSTNAME"]) * int(hosts[0][2]) + local_rank


def pin_elastic_rank() -> None:
    """Pin this rank to its block of TFDIST_CORES by its ``elastic_slot`` (not its local rank), before TensorFlow
    starts its threads; runtime's own pinning (by local rank) is left nothing to do."""
    blocks = os.environ.pop(CORES_ENV, "").split(";")
    index = elastic_slot()
    if index < len(blocks) and blocks[index]:
        os.sched_setaffinity(0, [int(core) for core in blocks[index].split(",")])


def gradient_sync(tf, training: TrainingSpec, elastic: bool):
    """This process's gradient sync, by the spec's mode; None for a parameter-server cluster's ps or worker task,
    which serves instead."""
    if elastic:
        return ElasticHorovod(tf, training)
    if training.backend == "mpi":
        return Horovod(tf, training)
    if training.strategy == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type in ("ps", "worker"):
            return serve(tf, resolver)
        return ParameterServer(tf, training, resolver)
    return Mirrored(tf, training)


def new_progress(step: int, size: int) -> dict:
    """Training progress from ``step``: the step, the current epoch's sums of the step vectors (``size`` values),
    steps and examples, the finished epochs' metrics."""
    return {"step": step, "epoch_sums": np.zeros(size), "epoch_steps": 0, "epoch_examples": 0, "history": []}


class TrainingRun:
    """One training process's run: its model and checkpoint (built on creation), the restore, the training loop
    (fixed-size, or one per world under Horovod elastic) with its progress and checkpoints, and the result."""

    def __init__(self, tf, sync, spec: Spec, args: TrainArgs, manifest: dict[str, Any]) -> None:
        import keras

        from tfdist.trainer.embeddings import tables, trained_weights

        self.tf, self.sync, self.args, self.spec, self.training = tf, sync, args, spec, spec.training
        self.manifest = manifest
        self.global_batch = self.training.global_batch_size
        self.steps_per_epoch = max(1, manifest["train"]["examples"] // self.global_batch)
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
        self.task = TaskSums(manifest["label"], spec.loss)
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
            self.finish(self.train_elastic() if isinstance(sync, ElasticHorovod) else self.train_fixed())

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
            .skip(first_step // (readers if isinstance(self.sync, ParameterServer) else 1))
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

    def train_fixed(self) -> types.SimpleNamespace:
        """Train with the world the process started in; the final progress."""
        progress = types.SimpleNamespace(**new_progress(self.start_step, self.task.size))
        run_steps = self.sync.step_runner(
            self.replica_step(self.global_batch),
            self.task.size,
            lambda r, n, b: self.dataset(r, n, b, first_step=self.start_step),
        )
        self.train(run_steps, progress, self.global_batch)
        return progress

    def train_elastic(self):
        """Train in Horovod's elastic loop (module docstring); the final state."""
        # each world has its own dataset iterator: with tf.data's autotune on, destroying the ended worlds' ones
        # made a rank's exit wait 3-60 s for their autotune threads (Model::OptimizeLoop); parallelism is fixed
        without_autotune = self.tf.data.Options()
        without_autotune.autotune.enabled = False
        state = self.sync.state(
            self.variables,
            **new_progress(self.start_step, self.task.size),
            world_size=self.sync.workers,
        )
        state.reached = self.start_step  # the end of this rank's last step call (not part of the state)
        self.sync.run(functools.partial(self.train_world, dataset_options=without_autotune), state)
        return state

    def train_world(self, state, dataset_options) -> None:
        """One world's training: entered at the start and again after every reset, with the committed state
        synchronized from rank 0."""
        sync, every = self.sync, self.training.checkpoint_every_steps
        size = sync.workers
        if state.world_size != size:
            if sync.is_chief:  # reached: the end of the step call the world changed in (or at)
                say(
                    f"{sync.name}: world size {state.world_size} -> {size} at step {state.reached} "
                    f"(restored commit at step {state.step})"
                )
                self.last_report = float("-inf")  # report the first step call of the new world
            state.world_size = size
        batch = self.global_batch // size * size
        run_steps = sync.step_runner(
            self.replica_step(batch),
            self.task.size,
            lambda r, n, b: self.dataset(r, n, b, first_step=state.step).with_options(dataset_options),
        )

        def commit() -> None:
            """Keep this step call's state (host memory, no collective); at checkpoint boundaries also ask
            rank 0's driver notifications whether hosts came back (a collective: 5-6 ms with Gloo on 2
            cores, a third of the throughput if done after every step call)."""
            if state.step % every == 0:
                state.commit()  # save, then check_host_updates: raises HostsUpdatedInterrupt
            else:
                state.save()

        self.train(run_steps, state, batch, commit)

    def train(self, run_steps, p, batch: int, commit=lambda: None) -> None:
        """Steps from ``p.step`` to the last, ``batch`` examples each; ``p`` holds the progress (``new_progress``),
        ``commit()`` follows every step call."""
        sync, total, per_epoch = self.sync, self.total_steps, self.steps_per_epoch
        every = self.training.checkpoint_every_steps
        while p.step < total:
            step = p.step
            steps = min(sync.steps_per_call, total - step, every - step % every, per_epoch - step % per_epoch)
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
            commit()

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

    def finish(self, p) -> None:
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


def refuse_tables_over_memory(spec: Spec, manifest: dict[str, Any]) -> None:
    """Refuse (EXIT_REFUSED) to train when the tables of weights by id that this process and the others of its role
    on this host hold (with the optimizer's slots: every worker or rank holds them all; with parameter servers each
    ps its share, at least the largest table) take over half of the memory this process has, naming the features
    and the fix."""
    t = spec.training
    config = tf_config()
    role = "worker"
    if t.strategy == "parameter_server":
        role = config.get("task", {}).get("type")
        if role != "ps":
            return
    tables = table_bytes(spec, manifest)
    if not tables:
        return
    each = sum(tables.values()) // t.num_ps if role == "ps" else sum(tables.values())  # split or round-robin
    sharing = processes_on_this_host(config)
    needed = each * sharing
    available, source = memory_limit()
    if needed > available // 2:
        largest = sorted(tables.items(), key=lambda item: -item[1])
        fix = f"give the {role}s more memory, or " + (
            "add parameter servers (training.num_ps)"
            if role == "ps"
            else "split the tables over parameter servers (training.strategy parameter_server)"
        )
        here = f" ({sharing} such processes on this host: {needed / 2**20:,.0f} MiB)" if sharing > 1 else ""
        fail(
            f"the tables of the categorical features need {each / 2**20:,.0f} MiB in this {role} process with the "
            f"optimizer's slots ({', '.join(f'{name} {size / 2**20:,.0f} MiB' for name, size in largest)}){here}, "
            f"over half of the {available / 2**20:,.0f} MiB it has ({source}). Lower vocabulary.max_tokens, "
            f"hash_buckets or embedding_dim of data.features {', '.join(name for name, _ in largest)} (or the "
            f"crosses' hash_buckets), or {fix}",
            EXIT_REFUSED,
        )


def processes_on_this_host(config: dict[str, Any]) -> int:
    """The processes of this one's role on its host, itself included, which share its memory: Horovod's local ranks,
    or the TF cluster's (``config``: TF_CONFIG) members of its role at its address's host."""
    local_ranks = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("HOROVOD_LOCAL_SIZE")
    if local_ranks:
        return int(local_ranks)
    task = config.get("task", {})
    members = config.get("cluster", {}).get(task.get("type"), [])
    if not members:
        return 1
    host = members[task["index"]].rsplit(":", 1)[0]
    return sum(member.rsplit(":", 1)[0] == host for member in members)


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
