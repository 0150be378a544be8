"""How the local launcher realizes a stage: processes on this machine, each an argv list and its environment.

- A stage of one member: one process, with this machine's cores as its thread budget.
- A TF cluster: one process per member, each with its TF_CONFIG (members on 127.0.0.1 ports), its own block of
  cores when the machine's cores are shared evenly, and its GPUs.
- Horovod: one ``mpirun`` (``mpi.controller: mpi``) or ``horovodrun --gloo`` (``gloo``) process starting every
  rank; its output is tagged per rank.

Elastic Horovod (``training.min_workers`` < ``num_workers``) always runs ``horovodrun --gloo`` in elastic mode,
whatever ``mpi.controller`` says (and without ``mpi.extra_args``, which are mpirun's): Horovod's elastic driver
exists only over Gloo (an MPI world cannot change its size). horovodrun starts the planned maximum of ranks
(``-np``/``--max-np``: num_workers × slots_per_worker), keeps training while at least ``--min-np``
(min_workers × slots_per_worker) are left, learns the hosts from ``contract/horovod_hosts.sh`` (the host
discovery script: it prints $TFDIST_HOROVOD_HOSTS), and lets a failed host run ranks again after a cooldown, so
a lost worker rejoins; the ranks keep their state after every step call and commit it at checkpoint boundaries
(trainer/syncs/elastic.py). So the launcher does not restart an elastic Horovod stage itself.

One host name per worker. Horovod's elastic driver blacklists a whole host when any of its ranks fails
(runner/elastic/registration.py) and stops the job once every host is blacklisted: with every rank on
'localhost', losing one rank would end them all. A host is started locally (no ssh) when its name resolves to
an address of a local interface (runner/gloo_run.py, network.get_local_host_addresses), while blacklisting
is keyed by the name. So worker k runs its slots_per_worker ranks on a name of its own that resolves to
127.0.0.1: '127.0.0.1', '127.0.0.01', '127.0.0.001', ... (inet_aton reads a last part with leading zeros
as octal 1). That mirrors one host per worker machine: a killed rank blacklists only its worker's name.
Horovod orders the hosts as a set: rank 0 may be on any of them (the ranks find their cores and GPUs by
their host name, trainer/syncs/elastic.py ``elastic_slot``)."""

from __future__ import annotations

import collections
import os
import shlex
import shutil
import socket
import sys
from dataclasses import dataclass, field

from tfdist.contract.launch import (
    CORES_ENV,
    HOROVOD_SHARED_CORES_ENV,
    HOST_DISCOVERY_SCRIPT,
    HOSTS_ENV,
    THREADS_ENV,
    mpirun_argv,
    tf_config,
)
from tfdist.operators.plan import Elastic, StagePlan

REJOIN_COOLDOWN_SECONDS = (1, 300)
"""horovodrun --blacklist-cooldown-range: a failed host runs ranks again after lower × 2^failures (+ up to
one lower) seconds, at most the upper: 2-3 s after its first failure, 4-5 s after its second, ... The
returning rank rejoins at the survivors' next commit; they wait for it while it starts (imports TensorFlow)."""


@dataclass(frozen=True)
class Process:
    """One process to start: argv list (never a shell string) and the environment it adds."""

    name: str
    role: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    rank_tagged: bool = False
    """mpirun/horovodrun: its output lines carry rank tags, relayed as ``[rank-N]``."""


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def available_cores() -> list[int]:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return sorted(os.sched_getaffinity(0))


def threads_per_process(stage: StagePlan, processes: int) -> dict[str, str]:
    """Environment giving each of the stage's ``processes`` processes its threads: its own count, else its
    share of this machine's cores."""
    return {THREADS_ENV: str(stage.cpus_per_process or max(1, len(available_cores()) // processes))}


def own_cores(stage: StagePlan, processes: int) -> list[str]:
    """Per training process, the cores it pins itself to (TFDIST_CORES, e.g. '0' or '2,3'), when the run
    shares this machine's cores evenly (no ``cpus_per_process``, no more processes than cores): process
    k gets block k. Pinned, 2 workers on 2 cores train 25-28% faster (mirrored, Horovod). Empty
    strings: not pinned."""
    cores = available_cores()
    if stage.cpus_per_process or processes > len(cores):
        return [""] * processes
    share = len(cores) // processes
    return [",".join(map(str, cores[k * share : (k + 1) * share])) for k in range(processes)]


def devices(first: int, count: int) -> dict[str, str]:
    """The GPUs a process sees (none: CUDA_VISIBLE_DEVICES empty)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(first, first + count)))}


def local_processes(
    stage: StagePlan,
    *,
    python: str = sys.executable,
    command: list[str] | None = None,
    addresses: list[str] | None = None,
) -> list[Process]:
    """The stage's processes on this machine. ``command``: what each process (or rank) runs, by default the
    stage's own; ``addresses``: a TF cluster's member addresses (host:port, in member order; by default free
    ports of 127.0.0.1)."""
    command = command or stage.args.command(python)
    if stage.sync == "horovod":
        return [horovod_process(stage, command)]
    if stage.sync is None:
        (member,) = stage.members
        return [Process(member.name, member.role, tuple(command), {**threads_per_process(stage, 1), **devices(0, 0)})]
    addresses = addresses or [f"127.0.0.1:{port}" for port in free_ports(len(stage.members))]
    cluster: dict[str, list[str]] = collections.defaultdict(list)
    for member, address in zip(stage.members, addresses, strict=True):
        cluster[member.role].append(address)
    threads = threads_per_process(stage, len(stage.members))
    return [
        Process(
            m.name,
            m.role,
            tuple(command),
            {
                **threads,
                CORES_ENV: cores,
                **devices(m.index * m.gpus, m.gpus),
                "TF_CONFIG": tf_config(dict(cluster), m.role, m.index),
            },
        )
        for m, cores in zip(stage.members, own_cores(stage, len(stage.members)), strict=True)
    ]


def local_host_names(workers: int) -> list[str]:
    """One distinct name per worker, each resolving to 127.0.0.1: '127.0.0.1', '127.0.0.01', ..."""
    return [f"127.0.0.{'0' * k}1" for k in range(workers)]


def horovod_controller(stage: StagePlan) -> str:
    """How the Horovod stage's ranks start on this machine: its ``mpi.controller``, else 'mpi' where OpenMPI's
    mpirun is installed here and 'gloo' where it is not."""
    chosen = stage.horovod.controller if stage.horovod else None
    return chosen or ("mpi" if shutil.which("mpirun") else "gloo")


def horovod_process(stage: StagePlan, command: list[str]) -> Process:
    """The one mpirun or horovodrun process starting every rank of ``command`` on this machine."""
    ranks = stage.workers * stage.slots
    horovodrun = os.path.join(os.path.dirname(command[0]), "horovodrun")
    cores = ";".join(own_cores(stage, ranks))  # one block per local rank: each rank pins itself to its own
    env = {
        **threads_per_process(stage, ranks),
        **HOROVOD_SHARED_CORES_ENV,
        CORES_ENV: cores,
        **devices(0, ranks if stage.gpus_per_worker else 0),
    }  # one GPU per rank, every rank on this machine
    if stage.elastic:
        argv = [horovodrun, "--gloo", *elastic_args(stage, stage.elastic), *command]
        # block k*slots + local rank for the ranks of worker k: each rank finds its own from its host name
        env[HOSTS_ENV] = ",".join(f"{host}:{stage.slots}" for host in local_host_names(stage.workers))
    elif horovod_controller(stage) == "gloo":
        argv = [horovodrun, "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo", *command]
    else:
        argv = mpirun_argv(
            ranks,
            command,
            hosts=f"localhost:{ranks}",
            extra_args=list(stage.horovod.extra_args) if stage.horovod else [],
            as_root=os.geteuid() == 0,
        )
    name = os.path.basename(argv[0])
    return Process(f"{name}-0", name, tuple(argv), env, rank_tagged=True)


def elastic_args(stage: StagePlan, elastic: Elastic) -> list[str]:
    """horovodrun's elastic options. ``--reset-limit`` is twice ``training.max_restarts``: Horovod counts
    every reset of the world, a lost worker's and its return alike, so each of max_restarts losses may be
    followed by the worker's return."""
    ranks = str(stage.workers * stage.slots)
    return [
        "-np",
        ranks,
        "--min-np",
        str(elastic.min_workers * stage.slots),
        "--max-np",
        ranks,
        "--host-discovery-script",
        shlex.quote(HOST_DISCOVERY_SCRIPT),  # horovodrun runs it through a shell
        "--reset-limit",
        str(2 * elastic.max_restarts),
        "--blacklist-cooldown-range",
        *map(str, REJOIN_COOLDOWN_SECONDS),
    ]
