"""TF cluster backend: one process per cluster member, each with its TF_CONFIG.

``multi_worker_mirrored``: N workers. ``parameter_server``: a chief (the coordinator), P parameter
servers and N workers; ps and workers serve until the launcher stops them after the chief is done.

Elastic (``training.min_workers``): TensorFlow cannot resize a running cluster, so the launcher restarts it
from the latest checkpoint with the workers it has left (Stage.elastic_sizes)."""

from __future__ import annotations

from tfdist.operators.plan import Process, Stage, own_cores, threads_per_process
from tfdist.trainer.contract import CORES_ENV
from tfdist.trainer.spec import Spec


def train_stage(spec: Spec, command: tuple[str, ...]) -> Stage:
    t = spec.training
    roles = [("worker", t.num_workers)]
    if t.strategy == "parameter_server":
        roles = [("chief", 1), ("ps", t.num_ps), *roles]
    env = threads_per_process(spec, t.processes)
    members = [(role, i) for role, count in roles for i in range(count)]
    processes = tuple(
        Process(role, i, command, {**env, CORES_ENV: cores}, gpus=t.gpus_per_worker if role == "worker" else 0)
        for (role, i), cores in zip(members, own_cores(spec, len(members)))
    )
    servers = ("ps", "worker") if t.strategy == "parameter_server" else ()
    elastic = {"elastic_sizes": t.elastic_sizes, "max_restarts": t.max_restarts} if t.elastic else {}
    return Stage("train", processes, tf_cluster=True, servers=servers, **elastic)
