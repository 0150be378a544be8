"""The contract between the Airflow side (``tfdist.operators``) and the worker runtime (``tfdist.trainer``):
the run key and the run's file layout, the run record, each stage's result record, the train stage's progress
record, exit codes, environment names, a member's TF_CONFIG, the rank tags of Horovod's output, and how a
stage and the pod entrypoint are started.
Both sides import this module; it imports neither Airflow nor TensorFlow, so a worker image and the
Airflow side cannot drift apart.

Each stage writes its result record, the task's XCom value, as ``<run dir>/<task id>/result.json``: at most
RESULT_MAX_BYTES of JSON, so that on Kubernetes it travels back as the pod's termination message and the
Airflow side never reads the artifact volume."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

from tfdist.trainer.artifacts import read_json, write_json_atomic

EXIT_REFUSED = 3
"""Exit code of a stage that refuses its input (a checkpoint that fails an integrity check, an export of a
model that was not blessed, data prepared from other input): the task fails without a retry."""
EXIT_HUNG = 4
"""Exit code of a pod whose training hung (a process of its own stopped, or no member stepping for
``training.hang_timeout_seconds``): its entrypoint killed the training and wrote who hung as the termination
message."""
RESULT_MAX_BYTES = 4096
"""The most a termination message holds (the kubelet truncates beyond)."""
CORES_ENV, THREADS_ENV = "TFDIST_CORES", "TFDIST_THREADS"
"""Environment of a training process: the cores it pins itself to ('0', '2,3'; Horovod ranks: one block per
local rank, ';'-separated) and its thread budget."""
HOSTS_ENV = "TFDIST_HOROVOD_HOSTS"
"""Elastic Horovod: the job's hosts, 'host:slots' comma-separated, read by trainer/horovod_hosts.sh (which
spells it again: a shell script) and by each rank to find its block of cores."""
HOROVOD_SHARED_CORES_ENV = {"HOROVOD_CYCLE_TIME": "0.1", "OMPI_MCA_mpi_yield_when_idle": "1"}
"""Environment of Horovod ranks sharing cores with their TensorFlow threads (README, "Performance"): Horovod's
background thread cycles every 0.1 ms instead of 1 ms, and an OpenMPI rank waiting in a collective yields its
core instead of spinning on it (2 ranks on 2 cores: 17,400 -> 30,000 examples/s). mpirun's
``--mca mpi_yield_when_idle 0`` in training.mpi.extra_args turns the yield off."""
SPEC_ENV, RUN_ENV = "TFDIST_SPEC", "TFDIST_RUN"
"""Environment of a pod: the run's effective spec and run record (JSON), recorded by the pod itself."""
TF_PORT, RENDEZVOUS_PORT = 2222, 2223
TERMINATION_LOG = "/dev/termination-log"


def tf_config(cluster: dict[str, list[str]], role: str, index: int) -> str:
    """TF_CONFIG of one TF cluster member: every member's address by role, and its own task."""
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


RANK_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<std(?:out|err)>:")
"""How mpirun (--tag-output) and horovodrun tag each rank's output, and trainer.pod its own ranks' (rank_tag)."""


def rank_tag(rank: int) -> str:
    """The tag of a line rank ``rank`` wrote, as mpirun and horovodrun write it."""
    return f"[{rank}]<stdout>:"


def split_rank_tags(name: str, line: str) -> list[tuple[str, str]]:
    """(source, text) pieces of one output line of mpirun --tag-output or horovodrun: ``rank-N`` for each
    tagged piece, ``name`` for untagged text. mpirun tags each write, not each line, so a line may hold
    several tagged pieces; empty pieces are dropped."""
    untagged, *pieces = RANK_TAG.split(line)
    found = [(name, untagged)] if untagged.strip() else []
    return found + [(f"rank-{rank}", text) for rank, text in zip(pieces[::2], pieces[1::2]) if text.strip()]


def mpirun_argv(ranks: int, command: list[str] | tuple[str, ...], *, hosts: str = "", forwarded: tuple[str, ...] = (),
                extra_args: tuple[str, ...] | list[str] = (), as_root: bool = False) -> list[str]:
    """mpirun starting ``ranks`` ranks of ``command`` slot by slot on ``hosts`` (else its hostfile's), unbound (each
    rank pins itself), each output line tagged with its rank (RANK_TAG), passing on the variables ``forwarded``;
    ``extra_args`` (training.mpi.extra_args) come last, before the command."""
    return ["mpirun", "-np", str(ranks), *(["-H", hosts] if hosts else []), "--bind-to", "none", "--map-by", "slot",
            "--tag-output", *(["--allow-run-as-root"] if as_root else []),
            *(arg for name in forwarded for arg in ("-x", name)), *extra_args, *command]


def stage_command(python: str, stage: str) -> list[str]:
    """How a worker process starts the stage ``stage`` (``prepare``, ``train``, ``evaluate``, ``export``, ``pod``):
    ``python -m tfdist.trainer.<stage>``, the module path taken from this package wherever it is installed."""
    return [python, "-m", f"{__package__}.{stage}"]


Args = TypeVar("Args", bound="StageArgs")


@dataclass(frozen=True)
class StageArgs:
    """A stage's command-line arguments, typed: the Airflow side writes them (``to_argv``), the stage's entry point
    reads them (``parse``). A field ``source_dir`` is the flag ``--source-dir``; a tuple field is repeated; a field
    left at its default is not written. Every value is a path or a number the plan chose."""

    stage: ClassVar[str]
    """The worker module running the stage (``tfdist.trainer.<stage>``)."""
    spec: str
    """The run's effective spec (spec.json)."""

    def to_argv(self) -> list[str]:
        argv: list[str] = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            for item in value if isinstance(value, tuple) else (value,):
                argv += [_flag(field.name), str(item)]
        return argv

    def command(self, python: str) -> list[str]:
        """The argv of a process running the stage with these arguments."""
        return [*stage_command(python, self.stage), *self.to_argv()]

    @classmethod
    def parse(cls: type[Args], argv: list[str] | None = None) -> Args:
        parser = argparse.ArgumentParser(prog=f"python -m {__package__}.{cls.stage}", description=cls.__doc__)
        for field in dataclasses.fields(cls):
            required = field.default is dataclasses.MISSING
            options = {"action": "append"} if field.type.startswith("tuple") else {
                "type": int if field.type == "int" else str}
            parser.add_argument(_flag(field.name), dest=field.name, required=required,
                                **({} if required else {"default": field.default}), **options)
        values = vars(parser.parse_args(argv))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class PrepareArgs(StageArgs):
    """Stage prepare_data: the run's input → train/eval shards and the data manifest."""

    stage = "prepare"
    out: str
    result: str
    source: tuple[str, ...]
    """The input: files or glob patterns (fsspec URLs), one per partition of the run's window."""
    pods: int = 1
    """On Kubernetes: the stage's pods, each writing a share of the input."""
    coordination: str = ""
    """With ``pods``: the directory they meet in, on the shared volume."""


@dataclass(frozen=True)
class TrainArgs(StageArgs):
    """Stage train: the run's shards → checkpoints (the chief's), progress and heartbeats."""

    stage = "train"
    data: str
    checkpoints: str
    result: str
    heartbeats: str
    progress: str


@dataclass(frozen=True)
class EvaluateArgs(StageArgs):
    """Stage evaluate: the run's checkpoints → metrics and the gate's blessing."""

    stage = "evaluate"
    run: str
    data: str
    model_dir: str
    checkpoints: str
    train_result: str
    out: str
    result: str


@dataclass(frozen=True)
class ExportArgs(StageArgs):
    """Stage export: the blessed checkpoint → a published SavedModel version."""

    stage = "export"
    run: str
    data: str
    model_dir: str
    eval: str
    version_base: int
    result: str


RUN_KEY_READABLE = 64
"""At most this many characters of a run id stay readable in its run key."""


def run_key(run_id: str) -> str:
    """A run's directory name, one-to-one with its exact run id, whoever chose it (a trigger may): up to
    RUN_KEY_READABLE characters of it to read (letters, digits, '_' and '-'; others become '_'), then a hash of
    all of it. Never empty, '.' or '..', never more than one path component."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", run_id)[:RUN_KEY_READABLE] or "run"
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}"


def runs_root(artifact_root: str, dag_id: str) -> str:
    """Where a pipeline's run directories live under its artifact root."""
    return os.path.join(artifact_root, dag_id, "runs")


def run_path(artifact_root: str, dag_id: str, run_id: str) -> str:
    """One run's directory: keyed by its pipeline and run, never by wall-clock time."""
    return os.path.join(runs_root(artifact_root, dag_id), run_key(run_id))


MANIFEST, BLESSING = "manifest.json", "blessing.json"
"""In the data directory, what prepare_data produced (shards, counts, hashes, statistics); in the eval
directory, the gate's decision."""


@dataclass(frozen=True)
class RunLayout:
    """Where one run's artifacts live: ``<artifact root>/<pipeline>/runs/<run key>/``."""

    run_dir: str

    spec_file = property(lambda self: os.path.join(self.run_dir, "spec.json"))
    run_file = property(lambda self: os.path.join(self.run_dir, "run.json"))
    data_dir = property(lambda self: os.path.join(self.run_dir, "data"))
    checkpoint_dir = property(lambda self: os.path.join(self.run_dir, "checkpoints"))
    eval_dir = property(lambda self: os.path.join(self.run_dir, "eval"))
    heartbeat_dir = property(lambda self: os.path.join(self.run_dir, "train", "heartbeats"))
    progress_file = property(lambda self: os.path.join(self.run_dir, "train", "progress.json"))
    manifest_file = property(lambda self: os.path.join(self.data_dir, MANIFEST))
    blessing_file = property(lambda self: os.path.join(self.eval_dir, BLESSING))

    def result(self, task_id: str) -> str:
        """The result record of the stage ``task_id``."""
        return os.path.join(self.run_dir, task_id, "result.json")


class Beat(NamedTuple):
    time: float
    """When the member last finished a step call (the file's mtime)."""
    pid: int
    step: int
    """The global step it had reached."""


def beat(heartbeat_dir: str, member: str, step: int) -> None:
    """Mark ``member`` (a training process: ``worker-1``, ``rank-3``) as progressing, at global ``step``."""
    path = os.path.join(heartbeat_dir, member)
    try:
        with open(path + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {step}")
    except OSError as exc:  # raised by the close, which names no file
        raise OSError(exc.errno, exc.strerror, path + ".tmp") from exc
    os.replace(path + ".tmp", path)


def last_beats(heartbeat_dir: str) -> dict[str, Beat]:
    """Each training process's last heartbeat, by member name."""
    beats = {}
    for entry in os.scandir(heartbeat_dir) if os.path.isdir(heartbeat_dir) else ():
        if not entry.name.endswith(".tmp"):
            try:
                with open(entry.path) as f:
                    pid, step = f.read().split()
                beats[entry.name] = Beat(entry.stat().st_mtime, int(pid), int(step))
            except (FileNotFoundError, ValueError):
                continue
    return beats


def stalled(heartbeat_dir: str, since: float, timeout: float) -> dict[str, Beat] | None:
    """The beats since ``since`` when none of them is newer than ``timeout`` seconds, else None (also before
    the first beat: starting a cluster is bounded by its own timeouts)."""
    beats = {m: b for m, b in last_beats(heartbeat_dir).items() if b.time >= since}
    if not beats or time.time() - max(b.time for b in beats.values()) < timeout:
        return None
    return beats


def longest_silent(beats: dict[str, Beat]) -> tuple[str, str]:
    """(the member silent longest, how long each has been silent): in a hung collective every member waits for
    the one that stopped stepping first."""
    now = time.time()
    return min(beats, key=lambda m: beats[m].time), "the others wait for it: " + ", ".join(
        f"{m} last stepped {now - b.time:.0f} s ago" for m, b in sorted(beats.items()))


@dataclass(frozen=True)
class TrainProgress:
    """Where the train stage is, written by its chief (``progress.json``) at most every few seconds while it
    trains and once at the end; the training-runs page shows it live."""

    step: int
    total_steps: int
    epoch: float
    """Epochs done, fractional."""
    epochs: int
    loss: float
    """The current epoch's mean training loss so far."""
    accuracy: float
    examples_per_sec: float | None
    """Since the first step call (tracing excluded); None until a second call ended."""
    workers: int
    global_batch_size: int
    elapsed_seconds: float
    updated_at: float
    """Unix time of the write."""

    @property
    def seconds_left(self) -> float | None:
        """At the current rate (None until there is one)."""
        if not self.examples_per_sec:
            return None
        return round((self.total_steps - self.step) * self.global_batch_size / self.examples_per_sec, 1)

    def write(self, path: str) -> None:
        write_json_atomic(path, dataclasses.asdict(self))

    @classmethod
    def read(cls, path: str) -> "TrainProgress | None":
        """The progress at ``path``, None when training has not written one yet."""
        try:
            return cls(**read_json(path))
        except FileNotFoundError:
            return None


def checkpoint_step(checkpoint_dir: str) -> int:
    """The global step of the latest checkpoint (``ckpt-<step>``, named in TensorFlow's ``checkpoint`` state
    file), 0 when there is none."""
    try:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            found = re.search(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', f.read(), re.MULTILINE)
    except FileNotFoundError:
        return 0
    return int(found.group(1)) if found else 0


class RunMismatch(ValueError):
    """The run directory was produced from another spec."""


def record_run(layout: RunLayout, spec: dict[str, Any], run: dict[str, Any]) -> None:
    """Write the run's record (identity, window, overrides) and effective spec once; refuse a run directory
    that was made from another spec. Safe to call from every process of a stage at once."""
    if os.path.exists(layout.spec_file):
        if read_json(layout.spec_file) != spec:
            raise RunMismatch(f"{layout.run_dir} was produced from a different spec (see {layout.spec_file}); "
                              "use a new run, or move that directory away to redo this run")
        return
    write_json_atomic(layout.run_file, run)
    write_json_atomic(layout.spec_file, spec)


def encode_result(record: dict[str, Any]) -> str:
    """A result record as one compact line; refused when it would not fit a termination message."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > RESULT_MAX_BYTES:
        raise ValueError(f"result record of {len(text.encode())} bytes exceeds {RESULT_MAX_BYTES}: {text[:200]}…")
    return text


def pod_argv(python: str, run_dir: str, result: str, command: tuple[str, ...] | list[str], *, job: str = "",
             cluster: dict[str, int] | None = None, horovod_slots: int = 0, pods: int = 0,
             hostfile: str = "", heartbeats: str = "", hang_timeout: int | None = None) -> list[str]:
    """The argv of a pod (``tfdist.trainer.pod``): record the run in ``run_dir``, start ``command`` (as one TF
    cluster member, or as this pod's Horovod ranks, peers named after ``job``, or once every host of an MPI
    ``hostfile`` resolves), watching ``heartbeats`` for a hang (``hang_timeout``), then hand the stage's
    ``result`` record back as the termination message."""
    argv = [*stage_command(python, "pod"), "--run-dir", run_dir, "--result", result]
    if heartbeats and hang_timeout:
        argv += ["--heartbeats", heartbeats, "--hang-timeout", str(hang_timeout)]
    if hostfile:
        argv += ["--hostfile", hostfile]
    if cluster:
        argv += ["--job", job, "--cluster", ",".join(f"{role}={count}" for role, count in cluster.items())]
    elif horovod_slots:
        argv += ["--job", job, "--horovod-slots", str(horovod_slots), "--pods", str(pods)]
    return [*argv, "--", *command]
