"""Horovod backend: one ``mpirun`` (controller ``mpi``) or ``horovodrun --gloo`` (controller ``gloo``)
process starting every rank on this machine; its output is tagged per rank."""

from __future__ import annotations

import os

from operators.plan import Process, Stage, own_cores, threads_per_process
from operators.spec import Spec

# Ranks sharing one machine's cores with their TensorFlow threads (README, "Performance"): Horovod's
# background thread cycles every 0.1 ms instead of 1 ms, and an OpenMPI rank waiting in a collective
# yields its core instead of spinning on it. 2 ranks on 2 cores: 17,400 -> 30,000 examples/s.
# mpirun's "--mca mpi_yield_when_idle 0" in training.mpi.extra_args turns the yield off.
ONE_HOST_TUNING = {"HOROVOD_CYCLE_TIME": "0.1", "OMPI_MCA_mpi_yield_when_idle": "1"}


def train_stage(spec: Spec, command: tuple[str, ...]) -> Stage:
    t = spec.training
    mpi = t.mpi_settings
    ranks = t.data_readers
    hosts = ["-np", str(ranks), "-H", f"localhost:{ranks}"]
    if mpi.controller == "gloo":
        horovodrun = os.path.join(os.path.dirname(command[0]), "horovodrun")
        argv = (horovodrun, *hosts, "--gloo", *command)
    else:
        as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        argv = ("mpirun", *hosts, "--bind-to", "none", "--map-by", "slot", "--tag-output", *as_root,
                *mpi.extra_args, *command)
    gpus = ranks if t.gpus_per_worker else 0  # the local launcher runs every rank on this machine
    cores = ";".join(own_cores(spec, ranks))  # one block per local rank: each rank pins itself to its own
    env = {**threads_per_process(spec, t.processes), **ONE_HOST_TUNING, "TFDIST_CORES": cores}
    process = Process(os.path.basename(argv[0]), 0, argv, env, gpus=gpus)
    return Stage("train", (process,), rank_tagged=True, rank_command=command)
