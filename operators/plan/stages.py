"""The plan of one stage: its arguments, its members and everything a launcher needs to realize it, resolved
from the spec here so that no launcher reads the spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

from tfdist.contract.stages import StageArgs, TrainArgs
from tfdist.spec import ROLES, KubernetesSpec, Spec
from tfdist.spec.sizing import tables_per_pod


@dataclass(frozen=True)
class Member:
    """One member of a stage: a process of a TF cluster, a Horovod worker (its ``slots`` ranks), or a stage's
    one process."""

    role: str
    index: int
    gpus: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Elastic:
    """After losing workers, the stage restarts from its latest checkpoint with the workers it has left."""

    sizes: tuple[int, ...]
    """The worker counts it may restart with, largest first."""
    max_restarts: int
    """Restarts allowed within one run of the stage."""
    min_workers: int
    """The fewest workers it trains with (elastic Horovod keeps training down to them)."""


@dataclass(frozen=True)
class Horovod:
    """How a Horovod stage's ranks start."""

    controller: Literal["mpi", "gloo"] | None
    """'mpi' (OpenMPI's mpirun) or 'gloo' (horovodrun --gloo); None: 'mpi' where the launcher's machine has
    mpirun, else 'gloo' (the launcher decides, so a spec reads the same everywhere)."""
    extra_args: tuple[str, ...] = ()
    """Extra mpirun arguments, one argv item each."""


@dataclass(frozen=True, kw_only=True)
class PodResources:
    """What the pods of one role get (the spec's ``kubernetes.pods``, with the role's settings over it)."""

    image: str
    cpu: str | None
    memory: str | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    affinity: Mapping[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class Following:
    """Where a run's objects live and how a started stage is followed: what a launcher's watch carries (into the
    triggerer and the task's state store)."""

    connection_id: str
    namespace: str
    startup_timeout_seconds: int
    """Pods not running by then fail the stage."""
    log_members: int | None
    """How many members' whole logs reach the task log, the result member first (None: all)."""


@dataclass(frozen=True, kw_only=True)
class KubernetesPlacement:
    """Where and how a run's pods run on Kubernetes: the spec's ``kubernetes`` section, resolved per role. Every
    field is copied from the spec, whose field defaults are the only ones."""

    following: Following
    pods: Mapping[str, PodResources]
    """Every role's pods (roles: prepare, validate, chief, ps, worker, evaluate, export)."""
    artifact_claim: str | None
    """The PersistentVolumeClaim holding the artifact root, mounted at ``artifact_root`` in every pod; None with
    an artifact root in an object store."""
    artifact_root: str
    credentials_secret: str | None
    """The Secret whose keys are every pod's environment (an object store's credentials)."""
    image_pull_policy: str
    image_pull_secrets: tuple[str, ...]
    service_account: str | None
    priority_class: str | None
    scheduler_name: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    operator: Literal["auto", "native", "kubeflow"]
    ttl_seconds_after_finished: int


def kubernetes_placement(spec: Spec) -> KubernetesPlacement | None:
    """The run's Kubernetes placement, None without a ``kubernetes`` section."""
    k8s: KubernetesSpec | None = spec.kubernetes
    if k8s is None:
        return None
    pods: dict[str, PodResources] = {role: _pod_resources(spec, k8s, role) for role in ROLES}
    following = Following(
        connection_id=k8s.connection_id,
        namespace=k8s.namespace,
        startup_timeout_seconds=k8s.startup_timeout_seconds,
        log_members=None if k8s.log_members == "all" else k8s.log_members,
    )
    return KubernetesPlacement(
        following=following,
        pods=MappingProxyType(pods),
        artifact_claim=k8s.artifact_volume.claim_name if k8s.artifact_volume else None,
        artifact_root=spec.artifact_root,
        credentials_secret=k8s.credentials_secret,
        image_pull_policy=k8s.image_pull_policy,
        image_pull_secrets=tuple(k8s.image_pull_secrets),
        service_account=k8s.service_account,
        priority_class=k8s.priority_class,
        scheduler_name=k8s.scheduler_name,
        labels=MappingProxyType(dict(k8s.labels)),
        annotations=MappingProxyType(dict(k8s.annotations)),
        operator=k8s.operator,
        ttl_seconds_after_finished=k8s.ttl_seconds_after_finished,
    )


PS_RUNTIME_BYTES = 1 << 30
"""What a ps pod is given besides its tables: TensorFlow's runtime (an idle ps task's resident memory, measured with
TF 2.21 on CPU: 0.75 GiB; the pod's entrypoint process: 0.05 GiB) and headroom."""


def ps_memory(spec: Spec) -> str:
    """The memory (request and limit) of a ps pod whose spec gives none: twice the most bytes of tables a ps holds
    (``sizing.tables_per_pod``: the tables may take at most half of a pod's memory, as the spec and the trainer demand
    of a memory given) plus PS_RUNTIME_BYTES, in MiB."""
    return f"{-(-(2 * tables_per_pod(spec) + PS_RUNTIME_BYTES) // 2**20)}Mi"


def _pod_resources(spec: Spec, k8s: KubernetesSpec, role: str) -> PodResources:
    """What the pods of ``role`` get: the spec's settings; a ps pod without a memory, sized by its tables."""
    pods = k8s.for_role(role)
    sized = role == "ps" and spec.training.num_ps and not pods.memory
    return PodResources(
        image=pods.image or "",
        cpu=pods.cpu,
        memory=ps_memory(spec) if sized else pods.memory,
        node_selector=MappingProxyType(dict(pods.node_selector)),
        tolerations=tuple(pods.tolerations),
        affinity=pods.affinity,
    )


@dataclass(frozen=True)
class StagePlan:
    """The plan of one stage (one task), launcher-neutral: its arguments, its members and how they meet, not
    where or how they start (each launcher realizes it: processes on this machine, or Kubernetes objects)."""

    task_id: str
    args: StageArgs
    members: tuple[Member, ...]
    sync: Literal["tf_cluster", "horovod"] | None = None
    """How the members train together: a TF cluster (each member one process, told the cluster by its
    TF_CONFIG), or Horovod (each member a worker running ``slots`` ranks); None: one member alone."""
    slots: int = 1
    """Horovod: ranks per worker."""
    horovod: Horovod | None = None
    servers: tuple[str, ...] = ()
    """Roles that serve until stopped (parameter-server ``ps`` and ``worker``): the stage is done when every
    other member has succeeded, then the launcher stops them."""
    writers: int | None = None
    """prepare_data: processes writing shards, each a share of the input (None: the stage chooses)."""
    hang_timeout_seconds: int | None = None
    """Training: the stage fails when no training process has made progress for this long."""
    elastic: Elastic | None = None
    worker_restarts: int = 0
    """Parameter server: how many times (``training.max_restarts``, shared with elastic restarts) a lost worker
    process is restarted in place, with its TF_CONFIG and address, while the chief's coordinator runs the lost
    closures on the other workers and takes the worker back once it serves again (TF's ClusterCoordinator)."""
    cpus_per_process: int | None = None
    """Threads of each training process (``training.cpus_per_worker``); None: this machine's cores shared evenly."""
    kubernetes: KubernetesPlacement | None = None
    """Where its pods run, with ``training.launcher: kubernetes``."""

    @property
    def result_file(self) -> str:
        """Where the stage writes its result record (tfdist.contract)."""
        return self.args.result_file

    @property
    def heartbeat_dir(self) -> str:
        """Training: where each training process marks its progress (tfdist.contract.beat)."""
        return self.args.heartbeats if isinstance(self.args, TrainArgs) else ""

    @property
    def checkpoint_dir(self) -> str:
        """Training: where the chief writes checkpoints (tfdist.contract.checkpoint_step reads the latest)."""
        return self.args.checkpoints if isinstance(self.args, TrainArgs) else ""

    @property
    def workers(self) -> int:
        return sum(m.role == "worker" for m in self.members)

    @property
    def gpus_per_worker(self) -> int:
        return max((m.gpus for m in self.members if m.role == "worker"), default=0)

    def with_workers(self, count: int) -> StagePlan:
        """The stage with its first ``count`` workers (a TF cluster's other roles as they were)."""
        return replace(self, members=tuple(m for m in self.members if m.role != "worker" or m.index < count))


def train_stage(spec: Spec, args: TrainArgs, placement: KubernetesPlacement | None) -> StagePlan:
    """Horovod (backend mpi): ``num_workers`` workers of ``slots_per_worker`` ranks. A TF cluster (backend tf):
    ``num_workers`` workers, with a parameter-server chief and ``num_ps`` parameter servers, which serve."""
    t = spec.training
    workers = tuple(Member("worker", i, t.gpus_per_worker) for i in range(t.num_workers))
    elastic = Elastic(t.elastic_sizes, t.max_restarts, t.min_workers or t.num_workers) if t.elastic else None
    train = StagePlan(
        "train",
        args,
        workers,
        "tf_cluster",
        hang_timeout_seconds=t.hang_timeout_seconds,
        elastic=elastic,
        cpus_per_process=t.cpus_per_worker,
        kubernetes=placement,
    )
    if t.backend == "mpi":
        mpi = t.mpi_settings
        horovod = Horovod(mpi.controller or ("mpi" if mpi.extra_args else None), tuple(mpi.extra_args))
        return replace(train, sync="horovod", slots=mpi.slots_per_worker, horovod=horovod)
    if t.strategy == "parameter_server":
        others = (Member("chief", 0), *(Member("ps", i) for i in range(t.num_ps)))
        return replace(train, members=others + workers, servers=("ps", "worker"), worker_restarts=t.max_restarts)
    return train
