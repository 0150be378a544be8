"""How a stage's processes are started and report back: exit codes, environment names, ports, a member's
TF_CONFIG, the mpirun argv and its rank tags, the pod entrypoint's argv and its termination message."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from tfdist.contract.stages import worker_command

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
"""Elastic Horovod: the job's hosts, 'host:slots' comma-separated, read by HOST_DISCOVERY_SCRIPT (which
spells it again: a shell script) and by each rank to find its block of cores."""
HOST_DISCOVERY_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod_hosts.sh")
"""Elastic Horovod's host discovery script (horovodrun --host-discovery-script), shipped with the contract."""
HOROVOD_SHARED_CORES_ENV = {"HOROVOD_CYCLE_TIME": "0.1", "OMPI_MCA_mpi_yield_when_idle": "1"}
"""Environment of Horovod ranks sharing cores with their TensorFlow threads (docs/performance.md): Horovod's
background thread cycles every 0.1 ms instead of 1 ms, and an OpenMPI rank waiting in a collective yields its
core instead of spinning on it (2 ranks on 2 cores: 17,400 -> 30,000 examples/s). mpirun's
``--mca mpi_yield_when_idle 0`` in training.mpi.extra_args turns the yield off."""
SCRATCH_ENV = "TFDIST_SCRATCH"
"""Environment of a stage's process: the local directory it copies an object store's artifacts into to read them
(shards, checkpoints) and writes TensorFlow's files in before they are uploaded; shared by the processes of one
host (the local launcher's stage, a pod)."""
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
    return found + [
        (f"rank-{rank}", text) for rank, text in zip(pieces[::2], pieces[1::2], strict=True) if text.strip()
    ]


def mpirun_argv(
    ranks: int,
    command: list[str] | tuple[str, ...],
    *,
    hosts: str = "",
    extra_args: tuple[str, ...] | list[str] = (),
    as_root: bool = False,
) -> list[str]:
    """mpirun starting ``ranks`` ranks of ``command`` slot by slot on ``hosts`` (else its hostfile's), unbound (each
    rank pins itself), each output line tagged with its rank (RANK_TAG); ``extra_args`` (training.mpi.extra_args)
    come last, before the command."""
    return [
        "mpirun",
        "-np",
        str(ranks),
        *(["-H", hosts] if hosts else []),
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        "--tag-output",
        *(["--allow-run-as-root"] if as_root else []),
        *extra_args,
        *command,
    ]


def encode_result(record: dict[str, Any]) -> str:
    """A result record as one compact line; refused when it would not fit a termination message."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > RESULT_MAX_BYTES:
        raise ValueError(f"result record of {len(text.encode())} bytes exceeds {RESULT_MAX_BYTES}: {text[:200]}…")
    return text


def pod_argv(
    python: str,
    run_dir: str,
    result: str,
    command: tuple[str, ...] | list[str],
    *,
    job: str = "",
    cluster: dict[str, int] | None = None,
    horovod_slots: int = 0,
    pods: int = 0,
    hostfile: str = "",
    heartbeats: str = "",
    hang_timeout: int | None = None,
) -> list[str]:
    """The argv of a pod (``tfdist.trainer.pod``): record the run in ``run_dir``, start ``command`` (as one TF
    cluster member, or as this pod's Horovod ranks, peers named after ``job``, or once every host of an MPI
    ``hostfile`` resolves), watching ``heartbeats`` for a hang (``hang_timeout``), then hand the stage's
    ``result`` record back as the termination message."""
    argv = [*worker_command(python, "pod"), "--run-dir", run_dir, "--result", result]
    if heartbeats and hang_timeout:
        argv += ["--heartbeats", heartbeats, "--hang-timeout", str(hang_timeout)]
    if hostfile:
        argv += ["--hostfile", hostfile]
    if cluster:
        argv += ["--job", job, "--cluster", ",".join(f"{role}={count}" for role, count in cluster.items())]
    elif horovod_slots:
        argv += ["--job", job, "--horovod-slots", str(horovod_slots), "--pods", str(pods)]
    return [*argv, "--", *command]
