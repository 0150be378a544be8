"""The kubernetes section: where, as whom and from which image the pods of each role run, and how the train stage
is run on the cluster."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field, field_validator

from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.section import NAME_PATTERN, Section

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
KUBERNETES = AuthorOnly("where, as whom and from which image the pods run is the author's")
Role = Literal["prepare", "validate", "chief", "ps", "worker", "evaluate", "export"]
ROLES: tuple[Role, ...] = get_args(Role)


class PodSettings(Section):
    """What the pods of one role get; every field may be set for all roles and per role."""

    image: Annotated[str, Field(min_length=1, pattern=r"^[^\s]+$")] | None = None
    """Container image with the trainer package (docker/Dockerfile.worker or .worker-gpu)."""
    cpu: Annotated[str, Field(pattern=QUANTITY_PATTERN)] | None = None
    """CPU request and limit, e.g. '4' or '500m'; also the worker's thread count when whole."""
    memory: Annotated[str, Field(pattern=QUANTITY_PATTERN)] | None = None
    """Memory request and limit, e.g. '8Gi'; default for ps pods: twice their share of the tables plus 1 GiB."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods must run on."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """Kubernetes tolerations, as in a pod spec."""
    affinity: dict[str, Any] | None = None
    """Kubernetes affinity, as in a pod spec."""


class ArtifactVolume(Section):
    claim_name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=253)]
    """A ReadWriteMany PersistentVolumeClaim holding the artifact root, mounted at the artifact root's own
    path in every pod."""


class KubernetesSpec(Section):
    """Where the stages run with 'training.launcher: kubernetes'. None of it can be overridden by a trigger."""

    connection_id: Annotated[str, Field(pattern=NAME_PATTERN)] = "kubernetes_default"
    """Airflow connection of type 'kubernetes' (in-cluster, kubeconfig file or inline kubeconfig)."""
    namespace: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)] = "default"
    """Namespace of every object a run creates."""
    pods: PodSettings
    """Settings of every pod ('image' required here)."""
    roles: dict[Role, PodSettings] = Field(default_factory=dict)
    """Per-role settings over 'pods' (roles: prepare, validate, chief, ps, worker, evaluate, export)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """When the kubelet pulls the image."""
    image_pull_secrets: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN)]] = Field(default_factory=list)
    """Secrets holding registry credentials."""
    service_account: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """Service account of the pods; default: the namespace's default."""
    priority_class: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """PriorityClass of the pods."""
    scheduler_name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """Scheduler of the pods (e.g. a gang scheduler); default: the cluster's."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on every object and pod."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations on every object and pod."""
    artifact_volume: ArtifactVolume | None = None
    """The shared volume holding a local artifact root; none with an artifact root in an object store."""
    credentials_secret: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=253)] | None = None
    """A Secret of the namespace whose keys become every pod's environment (e.g. AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY), for an object store on a cluster without IRSA or Workload Identity; default: the pods
    reach the store as their service account."""
    operator: Literal["auto", "native", "kubeflow"] = "auto"
    """How the train stage runs: 'native': Indexed Jobs and a headless Service (Kubernetes >= 1.31, no CRD);
    'kubeflow': a TFJob (TF cluster) or MPIJob (Horovod), refused when that CRD is not installed; 'auto':
    kubeflow when the cluster serves its CRD, else native. The other stages are always native Jobs."""
    startup_timeout_seconds: Annotated[int, Field(ge=10)] = 600
    """Pods not running by then fail the stage, with the scheduler's reason."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] = 3600
    """Finished objects are deleted this long after they finish."""
    log_members: Annotated[int, Field(ge=1)] | Literal["all"] = 2
    """How many members' whole logs reach the task log: the result member (chief, worker 0, rank 0's pod or the
    MPIJob's launcher) first, then the others in order; 'all' for every member (small jobs, debugging). Any
    other member's last lines are shown when it fails, is lost or hangs."""

    @field_validator("pods")
    @classmethod
    def _image(cls, value: PodSettings) -> PodSettings:
        if not value.image:
            raise ValueError(
                "kubernetes.pods.image: required: the worker image every pod runs, e.g. "
                "registry.example.com/tfdist-worker:2.21"
            )
        return value

    def for_role(self, role: str) -> PodSettings:
        """The settings of pods of ``role``: 'pods' with the fields the role sets over it (in a spec validated from
        its full JSON dump, spec.json, every field of a role counts as set)."""
        own = self.roles.get(role) if role in ROLES else None
        return self.pods.model_copy(update=own.model_dump(exclude_unset=True)) if own else self.pods


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ('8Gi', '512M') in bytes."""
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    number = quantity.rstrip("kKMGTi")
    return int(float(number) * units.get(quantity[len(number) :], 1))
