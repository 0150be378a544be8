"""Horovod backend: one ``mpirun`` (controller ``mpi``) or ``horovodrun --gloo`` (controller ``gloo``)
process starting every rank on this machine; its output is tagged per rank.

Elastic training (``training.min_workers`` < ``num_workers``) always runs ``horovodrun --gloo`` in elastic
mode, whatever ``mpi.controller`` says (and without ``mpi.extra_args``, which are mpirun's): Horovod's
elastic driver exists only over Gloo (an MPI world cannot change its size). horovodrun starts the planned
maximum of ranks (``-np``/``--max-np``: num_workers × slots_per_worker), keeps training while at least
``--min-np`` (min_workers × slots_per_worker) are left, learns the hosts from ``trainer/horovod_hosts.sh``
(the host discovery script: it prints $TFDIST_HOROVOD_HOSTS), and lets a failed host run ranks again after
a cooldown, so a lost worker rejoins; the ranks keep their state after every step call and commit it at
checkpoint boundaries (trainer/train.py).

One host name per worker. Horovod's elastic driver blacklists a whole host when any of its ranks fails
(runner/elastic/registration.py) and stops the job once every host is blacklisted: with every rank on
'localhost', losing one rank would end them all. A host is started locally (no ssh) when its name resolves to
an address of a local interface (runner/gloo_run.py, network.get_local_host_addresses), while blacklisting
is keyed by the name. So worker k runs its slots_per_worker ranks on a name of its own that resolves to
127.0.0.1: '127.0.0.1', '127.0.0.01', '127.0.0.001', ... (inet_aton reads a last part with leading zeros
as octal 1). That mirrors one host per worker machine: a killed rank blacklists only its worker's name.
Horovod orders the hosts as a set: rank 0 may be on any of them (the ranks find their cores and GPUs by
their host name, trainer/train.py ``elastic_slot``)."""

from __future__ import annotations

import os
import shlex

from tfdist import trainer
from tfdist.operators.plan import Process, Stage, own_cores, threads_per_process
from tfdist.trainer.contract import CORES_ENV, HOSTS_ENV
from tfdist.trainer.spec import Spec

# Ranks sharing one machine's cores with their TensorFlow threads (README, "Performance"): Horovod's
# background thread cycles every 0.1 ms instead of 1 ms, and an OpenMPI rank waiting in a collective
# yields its core instead of spinning on it. 2 ranks on 2 cores: 17,400 -> 30,000 examples/s.
# mpirun's "--mca mpi_yield_when_idle 0" in training.mpi.extra_args turns the yield off.
ONE_HOST_TUNING = {"HOROVOD_CYCLE_TIME": "0.1", "OMPI_MCA_mpi_yield_when_idle": "1"}

HOST_DISCOVERY_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(trainer.__file__)), "horovod_hosts.sh")
REJOIN_COOLDOWN_SECONDS = (1, 300)
"""horovodrun --blacklist-cooldown-range: a failed host runs ranks again after lower × 2^failures (+ up to
one lower) seconds, at most the upper: 2-3 s after its first failure, 4-5 s after its second, ... The
returning rank rejoins at the survivors' next commit; they wait for it while it starts (imports TensorFlow)."""


def local_host_names(workers: int) -> list[str]:
    """One distinct name per worker, each resolving to 127.0.0.1: '127.0.0.1', '127.0.0.01', ..."""
    return [f"127.0.0.{'0' * k}1" for k in range(workers)]


def train_stage(spec: Spec, command: tuple[str, ...]) -> Stage:
    t = spec.training
    mpi = t.mpi_settings
    ranks = t.data_readers
    horovodrun = os.path.join(os.path.dirname(command[0]), "horovodrun")
    hosts = ["-np", str(ranks), "-H", f"localhost:{ranks}"]
    gpus = ranks if t.gpus_per_worker else 0  # the local launcher runs every rank on this machine
    cores = ";".join(own_cores(spec, ranks))  # one block per local rank: each rank pins itself to its own
    env = {**threads_per_process(spec, t.processes), **ONE_HOST_TUNING, CORES_ENV: cores}
    if t.elastic:
        argv = (horovodrun, "--gloo", *elastic_args(spec), *command)
        # block k*slots + local rank for the ranks of worker k: each rank finds its own from its host name
        env[HOSTS_ENV] = ",".join(f"{host}:{mpi.slots_per_worker}" for host in local_host_names(t.num_workers))
    elif mpi.controller == "gloo":
        argv = (horovodrun, *hosts, "--gloo", *command)
    else:
        as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        argv = ("mpirun", *hosts, "--bind-to", "none", "--map-by", "slot", "--tag-output", *as_root,
                *mpi.extra_args, *command)
    process = Process(os.path.basename(argv[0]), 0, argv, env, gpus=gpus)
    # on Kubernetes the pods start the ranks themselves: a lost pod restarts the Job smaller (the launcher's)
    restarts = {"elastic_sizes": t.elastic_sizes, "max_restarts": t.max_restarts} if (
        t.elastic and t.launcher == "kubernetes") else {}
    return Stage("train", (process,), rank_tagged=True, rank_command=command, rank_pods=t.num_workers, **restarts)


def elastic_args(spec: Spec) -> list[str]:
    """horovodrun's elastic options. ``--reset-limit`` is twice ``training.max_restarts``: Horovod counts
    every reset of the world, a lost worker's and its return alike, so each of max_restarts losses may be
    followed by the worker's return."""
    t = spec.training
    slots = t.mpi_settings.slots_per_worker
    return ["-np", str(t.data_readers), "--min-np", str(t.min_workers * slots), "--max-np", str(t.data_readers),
            "--host-discovery-script", shlex.quote(HOST_DISCOVERY_SCRIPT),  # horovodrun runs it through a shell
            "--reset-limit", str(2 * t.max_restarts),
            "--blacklist-cooldown-range", *map(str, REJOIN_COOLDOWN_SECONDS)]
