"""The training section: the backend and strategy, the workers and parameter servers, Horovod's settings, elasticity,
checkpoints and the warm start."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.rules import Rule, equals
from tfdist.spec.section import NAME_PATTERN, PARSED, Section

MAX_EPOCHS = 1000
"""The most ``training.epochs`` a spec, or a run's override, may ask for."""
MPI_ARG_PATTERN = r"^[^\x00\n]+$"
RESERVED_MPI_ARGS = ("-np", "-n", "-c", "--np", "-H", "--host", "-hostfile", "--hostfile", "--tag-output")


class MPISpec(Section):
    """Horovod over OpenMPI ('mpirun') or Gloo ('horovodrun --gloo')."""

    controller: Literal["mpi", "gloo"] | None = None
    """Default: 'mpi' with 'extra_args'; else 'mpi' where the machine starting the ranks has OpenMPI's 'mpirun',
    and 'gloo' where it has not (decided when the stage starts, so a spec reads the same everywhere)."""
    slots_per_worker: Annotated[int, Field(ge=1, le=64)] = 1
    """Ranks per worker machine (one per GPU when 'gpus_per_worker' > 0): ranks = workers × slots."""
    extra_args: list[Annotated[str, Field(pattern=MPI_ARG_PATTERN)]] = Field(default_factory=list)
    """Extra 'mpirun' arguments, one list item each (passed as argv, never through a shell); '-np' and '-H'
    are the launcher's."""
    scale_learning_rate: bool = True
    """Multiply 'model.learning_rate' by the number of ranks (Horovod's convention); false if the rate was
    tuned for the global batch."""

    @field_validator("extra_args")
    @classmethod
    def _not_ours(cls, value: list[str]) -> list[str]:
        for arg in value:
            if arg.split("=")[0] in RESERVED_MPI_ARGS:
                raise ValueError(f"{arg!r} is set by the launcher from num_workers and slots_per_worker")
        return value


class WarmStartSpec(Section):
    source: Literal["none", "baseline"] = Field("none", alias="from")
    """'none': random initial weights; 'baseline': the weights (and the optimizer's state, where the optimizer is
    the same) of the version the gate compares with, the newest published for a data interval ending no later
    than this run's (a backfill starts from what was live then)."""
    on_mismatch: Literal["cold", "fail"] = "cold"
    """When some of the baseline's variables do not fit the spec's model (names or shapes): 'cold' starts from
    random weights, naming them; 'fail' refuses the run (no retry)."""


class ParameterServerSpec(Section):
    """How the tables of weights by id are spread over the parameter servers."""

    shard_min_bytes: Annotated[int, Field(ge=1 << 16)] = 1 << 22
    """A table of at least twice this many bytes of float32 weights is split by rows into shards (a ShardedVariable)
    of at least this many bytes, spread over the ps tasks; its optimizer slots are split alike, on the same tasks."""
    max_shards: Annotated[int, Field(ge=1, le=1024)] | None = None
    """The most shards of one table; default: 'training.num_ps'."""

    def shards(self, table_bytes: int, num_ps: int) -> int:
        """How many shards a table of ``table_bytes`` bytes of weights is split into."""
        return max(1, min(self.max_shards or num_ps, table_bytes // self.shard_min_bytes))


def _elastic_sizes(t: TrainingSpec) -> str | None:
    if t.min_workers is not None and t.min_workers > t.num_workers:
        return f"training.min_workers: at most num_workers ({t.num_workers}), got {t.min_workers}"
    if t.elastic and t.elastic_sizes == (t.num_workers,):
        return (
            f"training.min_workers: no worker count from {t.min_workers} to {t.num_workers - 1} "
            f"splits global_batch_size {t.global_batch_size} evenly across its replicas; "
            "lower min_workers or pick a global batch size they divide"
        )
    return None


def _horovod_or_parameter_servers(t: TrainingSpec) -> str | None:
    """Horovod is all-reduce with its own settings; parameter servers come with their strategy, and it with them."""
    if t.backend == "mpi":
        if t.strategy != "multi_worker_mirrored":
            return "training.strategy: 'parameter_server' needs backend 'tf' (Horovod is all-reduce)"
        if t.num_ps:
            return (
                f"training.num_ps: parameter servers need backend 'tf' and strategy "
                f"'parameter_server', got {t.num_ps} with backend 'mpi'"
            )
    elif t.mpi is not None:
        return "training.mpi: Horovod settings need backend 'mpi'"
    elif t.strategy == "parameter_server" and not t.num_ps:
        return "training.num_ps: strategy 'parameter_server' needs at least 1 parameter server, got 0"
    elif t.strategy == "multi_worker_mirrored" and t.num_ps:
        return (
            f"training.num_ps: parameter servers need strategy 'parameter_server', got "
            f"{t.num_ps} with 'multi_worker_mirrored'"
        )
    return None


_HOROVOD_OR_PARAMETER_SERVERS = {
    "if": equals("backend", "mpi"),
    "then": {"properties": {"strategy": {"const": "multi_worker_mirrored"}, "num_ps": {"maximum": 0}}},
    "else": {
        "properties": {"mpi": {"type": "null"}},
        "if": equals("strategy", "parameter_server"),
        "then": {"required": ["num_ps"], "properties": {"num_ps": {"minimum": 1}}},
        "else": {"properties": {"num_ps": {"maximum": 0}}},
    },
}
"""``_horovod_or_parameter_servers`` in JSON Schema."""


def _a_rank_per_gpu(t: TrainingSpec) -> str | None:
    mpi = t.mpi_settings
    if t.backend == "mpi" and t.gpus_per_worker and mpi.slots_per_worker != t.gpus_per_worker:
        return (
            f"training.mpi.slots_per_worker: must equal gpus_per_worker "
            f"({t.gpus_per_worker}), one rank per GPU, got {mpi.slots_per_worker}"
        )
    return None


def _mpirun_arguments(t: TrainingSpec) -> str | None:
    mpi = t.mpi_settings
    if t.backend == "mpi" and mpi.extra_args and (mpi.controller == "gloo" or t.elastic):
        return (
            "training.mpi.extra_args: mpirun arguments need controller 'mpi' without "
            "elastic training (min_workers below num_workers runs horovodrun over Gloo)"
        )
    return None


def _sharding_needs_parameter_servers(t: TrainingSpec) -> str | None:
    if t.parameter_server is not None and t.strategy != "parameter_server":
        return "training.parameter_server: table sharding needs strategy 'parameter_server'"
    return None


class TrainingSpec(Section):
    backend: Literal["tf", "mpi"] = "tf"
    """'tf': a TF cluster from TF_CONFIG; 'mpi': Horovod ranks."""
    strategy: Literal["multi_worker_mirrored", "parameter_server"] = "multi_worker_mirrored"
    """With backend 'tf': synchronous all-reduce, or a chief with parameter servers and workers."""
    launcher: Annotated[Literal["local", "kubernetes"], AuthorOnly("it chooses the machines the training runs on")] = (
        "local"
    )
    """Where every stage runs: 'local' (processes on this machine) or 'kubernetes' (pods; see 'kubernetes')."""
    num_workers: Annotated[int, Field(ge=1, le=64)] = 2
    """Training workers (with Horovod: worker machines, each running 'slots_per_worker' ranks)."""
    num_ps: Annotated[int, Field(ge=0, le=64)] = 0
    """Parameter-server tasks (strategy 'parameter_server' only)."""
    mpi: MPISpec | None = None
    """Horovod settings (backend 'mpi' only; defaults apply when omitted)."""
    parameter_server: ParameterServerSpec | None = None
    """How tables are sharded over the ps tasks (strategy 'parameter_server' only; defaults apply when omitted)."""
    sparse_gradients: Literal["gather", "dense", "auto"] = "auto"
    """With all-reduce (multi_worker_mirrored, Horovod), a table's gradient of the rows a step looked up: 'gather'
    all-gathers the rows, 'dense' makes it a whole table and all-reduces it, 'auto' chooses per table by its rows
    and the rows a step looks up."""
    gpus_per_worker: Annotated[int, Field(ge=0, le=16)] = 0
    """GPUs each worker uses (given with CUDA_VISIBLE_DEVICES locally, with Horovod one per rank; on
    Kubernetes nvidia.com/gpu limits)."""
    cpus_per_worker: Annotated[int, Field(ge=1)] | None = None
    """Threads per worker; default: the machine's cores shared evenly, each process pinned to its share
    (local launcher)."""
    epochs: Annotated[int, Field(ge=1, le=MAX_EPOCHS)] = 5
    """Passes over the training shards, at most 1,000; ``timeout_minutes``, which no run may override, bounds each
    task's time whatever the epochs."""
    global_batch_size: Annotated[int, Field(ge=1)] = 64
    """Examples per training step, split evenly across the replicas (with 'parameter_server' each step runs
    on one worker)."""
    checkpoint_every_steps: Annotated[int, Field(ge=1)] = 100
    """The chief writes a checkpoint every this many steps (and at the end)."""
    keep_checkpoints: Annotated[int, Field(ge=1)] = 3
    """Checkpoints kept in the run's checkpoint directory."""
    upload_every_seconds: Annotated[float, Field(ge=0, le=3600)] = 10.0
    """With an object store's artifact root, the chief uploads what it writes as it trains (the checkpoints, the
    TensorBoard summaries, the progress and the curve) beside the training, each at most once per this many seconds
    (0: every time), and always the first and the last. A restarted training resumes from the newest checkpoint
    uploaded, and the runs page and TensorBoard lag by up to this much. Fewer uploads take less of the training's
    cores."""
    seed: int = 0
    """Seed for weight initialization and shuffling."""
    timeout_minutes: Annotated[int, Field(ge=1), PARSED] = 120
    """Each task's execution timeout."""
    hang_timeout_seconds: Annotated[int, Field(ge=10)] | None = 600
    """The train stage fails when no training process has finished a step for this long (a worker stopped,
    or stuck in a collective), naming the stopped one; null: only ``timeout_minutes`` bounds a hang. On
    Kubernetes each training pod watches the heartbeats."""
    min_workers: Annotated[int, Field(ge=1, le=64)] | None = None
    """Elastic training: the fewest workers training continues with after losing some (killed, hung), from
    the last checkpoint (TF cluster, restarted smaller) or Horovod commit (elastic 'horovodrun --gloo',
    whatever 'mpi.controller' says; a lost worker rejoins), keeping the global batch; default
    'num_workers': losing a worker fails the stage (the task's retry resumes from the checkpoint). On
    Kubernetes the launcher restarts the Job with the pods left, in every mode."""
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    """Elastic training: how many losses one try of the train task may continue after before it fails
    (with Horovod, each may be followed by the worker's return). With 'parameter_server' (local launcher), also
    how many times a killed worker is restarted in place, elastic or not."""
    warm_start: Annotated[WarmStartSpec, AuthorOnly("which model a run continues from is the author's")] = Field(
        default_factory=WarmStartSpec
    )
    """Where training starts: 'none', 'baseline', or {from: baseline, on_mismatch: cold | fail}."""
    summary_every_steps: Annotated[int, Field(ge=1)] = 50
    """The chief writes TensorBoard summaries (loss, accuracy, examples/s, learning rate) and a point of the
    training curve at the end of the first step call at or past every this many steps, and at the last."""
    tensorboard_url: Annotated[
        str | None, Field(pattern=r"^https?://[^\s]+$"), AuthorOnly("it is a link every user of the DAG follows")
    ] = None
    """A TensorBoard serving this pipeline's runs: adds a 'TensorBoard' link to the train task (else Airflow's
    setting [tfdist] tensorboard_url)."""
    pool: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """Airflow pool of the train task: at most that many slots of training run at once (backfills included)."""
    pool_slots: Annotated[Annotated[int, Field(ge=1)] | None, PARSED] = None
    """Slots one training run takes in the pool; default: its number of processes."""

    @field_validator("warm_start", mode="before")
    @classmethod
    def _warm_start_word(cls, value: Any) -> Any:
        return {"from": value} if isinstance(value, str) else value

    rules = (
        Rule(_elastic_sizes),
        Rule(_horovod_or_parameter_servers, schema=(_HOROVOD_OR_PARAMETER_SERVERS,)),
        Rule(_a_rank_per_gpu),
        Rule(_mpirun_arguments),
        Rule(_sharding_needs_parameter_servers),
    )

    @property
    def mpi_settings(self) -> MPISpec:
        return self.mpi or MPISpec()

    @property
    def parameter_server_settings(self) -> ParameterServerSpec:
        return self.parameter_server or ParameterServerSpec()

    @property
    def elastic(self) -> bool:
        """Training continues with fewer workers after a loss."""
        return self.min_workers is not None and self.min_workers < self.num_workers

    @property
    def elastic_sizes(self) -> tuple[int, ...]:
        """Worker counts training may continue with, largest first: from num_workers down to min_workers,
        those whose replicas split the global batch evenly (every step keeps the global batch size)."""
        sizes = range(self.num_workers, (self.min_workers or self.num_workers) - 1, -1)
        per_worker = max(1, self.gpus_per_worker) * (self.mpi_settings.slots_per_worker if self.backend == "mpi" else 1)
        if self.strategy == "parameter_server":  # each step runs on one worker, whatever their number
            return tuple(sizes)
        return tuple(n for n in sizes if self.global_batch_size % (n * per_worker) == 0)

    @property
    def data_readers(self) -> int:
        """Processes that each read their own train shards."""
        return self.num_workers * self.mpi_settings.slots_per_worker if self.backend == "mpi" else self.num_workers

    @property
    def processes(self) -> int:
        """Training processes one run starts (its default pool slots)."""
        if self.strategy == "parameter_server":
            return 1 + self.num_ps + self.num_workers
        return self.data_readers

    @property
    def replicas(self) -> int:
        """Model replicas a global batch is split across in one step."""
        if self.backend == "mpi":
            return self.data_readers
        if self.strategy == "parameter_server":
            return max(1, self.gpus_per_worker)  # each step runs on one worker
        return self.num_workers * max(1, self.gpus_per_worker)
