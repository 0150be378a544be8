"""The Kubernetes objects of one stage of a run, as plain dicts (what ``kubectl apply -f`` takes): pure
functions of the plan of a stage and the run's identity. No client, no cluster, no Airflow.

- native (any cluster >= 1.31, no CRD): one Indexed Job per stage; a TF cluster or Horovod stage adds a
  headless Service (``publishNotReadyAddresses``) giving each pod the stable name ``<job>-<index>.<service>``,
  and its pods start through ``tfdist.trainer.pod``. The parameter-server Job succeeds when the chief (index 0)
  does; any pod failing fails the Job at once, a disruption (eviction, preemption) by its own rule.
- kubeflow: the train stage as a TFJob (``kubeflow.org/v1``) or an MPIJob (``kubeflow.org/v2beta1``). An
  MPIJob's pods run as the worker image's user (IMAGE_UID): the workers' sshd with that user's config on
  port 2222 (docker/sshd_config), the job's SSH key pair mounted in that user's ~/.ssh, and ``mpirun``
  passing the ranks the launcher pod's environment (an ssh session gets none of its pod's: tfdist.trainer.pod)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import replace
from typing import Any

from tfdist.contract.launch import (
    HOROVOD_SHARED_CORES_ENV,
    RENDEZVOUS_PORT,
    RUN_ENV,
    SCRATCH_ENV,
    SPEC_ENV,
    TERMINATION_LOG,
    TF_PORT,
    THREADS_ENV,
    mpirun_argv,
    pod_argv,
)
from tfdist.contract.stages import PrepareArgs
from tfdist.infra import storage
from tfdist.infra.jsonfiles import digest_json
from tfdist.operators.plan import KubernetesPlacement, Plan, StagePlan

PYTHON = "python"
"""The worker images' Python, which runs every pod's command."""
NAME_MAX = 52
"""Job names leave room for '-<index>' in their pods' host names (a DNS label: at most 63 characters)."""
TF_REPLICA_TYPES = {"chief": "Chief", "ps": "PS", "worker": "Worker"}
LABEL_PREFIX = "tfdist"
IMAGE_UID, IMAGE_HOME = 1000, "/home/tfdist"
"""The worker images' user (docker/Dockerfile.worker: ``useradd --uid 1000 tfdist``, ``USER 1000``) and its
home, which holds an MPIJob's SSH set-up: the operator's Secret at ``.ssh``, the sshd config at
``.sshd_config``. An MPIJob pins its pods to this user (securityContext.runAsUser)."""
MPI_HOSTFILE = "/etc/mpi/hostfile"
"""Where Kubeflow's MPI operator mounts the hostfile it writes into an MPIJob's launcher pod."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def object_name(pipeline_id: str, run_id: str, task_id: str) -> str:
    """The stage's objects' name: a DNS label of at most NAME_MAX characters, the same for every try of
    the task (a retry finds the running Job by it), distinct for every (pipeline, run, stage)."""
    readable = re.sub(r"[^a-z0-9]+", "-", f"{pipeline_id}-{task_id}".lower()).strip("-")
    return f"tfd-{readable[: NAME_MAX - 15].rstrip('-')}-{_digest(pipeline_id, run_id, task_id)}"


PIPELINE_LABEL = f"{LABEL_PREFIX}/pipeline-id"
"""The label and annotation naming the pipeline of every object (its DAG's id, or '<dag id>.<task group id>')."""


def label_value(value: str) -> str:
    """``value`` as a valid label value: kept when it is one, else made one and told apart by a digest."""
    if len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value):
        return value
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:51].strip("_.-")
    return f"{readable}-{_digest(value)}".lstrip("-")


SPEC_HASH_ANNOTATION = f"{LABEL_PREFIX}/spec-hash"
"""On the object that ends a stage: the hash of the stage's objects as made (spec_hash); a retry follows an earlier
try's objects only when it makes the same."""


def spec_hash(plan: Plan, stage: StagePlan, kubeflow: bool) -> str:
    """The hash of what the stage's objects say, whatever the try that makes them."""
    return digest_json(stage_objects(plan, stage, 0, kubeflow=kubeflow))[:16]


def identity(
    k8s: KubernetesPlacement, pipeline_id: str, run_id: str, task_id: str, try_number: int
) -> tuple[dict, dict]:
    """(labels, annotations) of every object and pod of the stage: who made it, for which run."""
    labels = {
        **k8s.labels,
        "app.kubernetes.io/managed-by": "tfdist",
        PIPELINE_LABEL: label_value(pipeline_id),
        f"{LABEL_PREFIX}/run-id": label_value(run_id),
        f"{LABEL_PREFIX}/task-id": task_id,
        f"{LABEL_PREFIX}/try-number": str(try_number),
    }
    annotations = {**k8s.annotations, PIPELINE_LABEL: pipeline_id, f"{LABEL_PREFIX}/run-id": run_id}
    return labels, annotations


def placement(stage: StagePlan) -> KubernetesPlacement:
    """Where the stage's pods run."""
    if stage.kubernetes is None:
        raise ValueError("kubernetes: the spec has no kubernetes section (pods.image, artifact_volume, ...)")
    return stage.kubernetes


def _container(k8s: KubernetesPlacement, role: str, name: str, argv: list[str], env: dict[str, str], gpus: int) -> dict:
    pods = k8s.pods[role]
    amounts = {k: v for k, v in (("cpu", pods.cpu), ("memory", pods.memory)) if v}
    resources = {"requests": dict(amounts), "limits": {**amounts, **({"nvidia.com/gpu": gpus} if gpus else {})}}
    container: dict[str, Any] = {
        "name": name,
        "image": pods.image,
        "imagePullPolicy": k8s.image_pull_policy,
        "command": argv,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "envFrom": [{"secretRef": {"name": k8s.credentials_secret}}] if k8s.credentials_secret else None,
        "resources": {k: v for k, v in resources.items() if v},
        "volumeMounts": [{"name": _volume(k8s)["name"], "mountPath": _mount_path(k8s)}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {k: v for k, v in container.items() if v is not None}


SCRATCH_MOUNT = "/var/tmp/tfdist-scratch"
"""Where a pod keeps its local copies of an object store's artifacts (an emptyDir: gone with the pod)."""


def _volume(k8s: KubernetesPlacement) -> dict:
    """The pod's one volume: the artifact volume, or with an object-store root its scratch."""
    if k8s.artifact_claim:
        return {"name": "artifacts", "persistentVolumeClaim": {"claimName": k8s.artifact_claim}}
    return {"name": "scratch", "emptyDir": {}}


def _mount_path(k8s: KubernetesPlacement) -> str:
    return k8s.artifact_root if k8s.artifact_claim else SCRATCH_MOUNT


def _pod_template(
    k8s: KubernetesPlacement, role: str, container: dict, labels: dict, annotations: dict, **extra: Any
) -> dict:
    pods = k8s.pods[role]
    pod = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [_volume(k8s)],
        "serviceAccountName": k8s.service_account,
        "priorityClassName": k8s.priority_class,
        "schedulerName": k8s.scheduler_name,
        "imagePullSecrets": [{"name": s} for s in k8s.image_pull_secrets] or None,
        "nodeSelector": dict(pods.node_selector) or None,
        "tolerations": [dict(t) for t in pods.tolerations] or None,
        "affinity": dict(pods.affinity) if pods.affinity is not None else None,
        # the artifact volume writable by the images' user, where the storage applies fsGroup
        "securityContext": {"fsGroup": IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch"}
        if k8s.artifact_claim
        else None,
        **extra,
    }
    return {
        "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
        "spec": {k: v for k, v in pod.items() if v is not None},
    }


def _env(plan: Plan, stage: StagePlan, role: str, per_pod: int = 1, horovod: bool = False) -> dict[str, str]:
    """A process's environment in a pod: threads from the role's whole CPUs (shared by the pod's ``per_pod``
    processes); the run's spec and record for ``tfdist.trainer.pod`` to write in the run directory."""
    cpu = placement(stage).pods[role].cpu
    threads = {THREADS_ENV: str(max(1, int(cpu) // per_pod))} if cpu and cpu.isdigit() else {}
    record = {
        SPEC_ENV: json.dumps(plan.spec_record(), sort_keys=True),
        RUN_ENV: json.dumps(plan.run_record().payload(), sort_keys=True),
    }
    scratch = {} if placement(stage).artifact_claim else {SCRATCH_ENV: SCRATCH_MOUNT}
    return {"PYTHONUNBUFFERED": "1", **(HOROVOD_SHARED_CORES_ENV if horovod else {}), **threads, **scratch, **record}


def _metadata(k8s: KubernetesPlacement, name: str, labels: dict, annotations: dict) -> dict:
    return {
        "name": name,
        "namespace": k8s.following.namespace,
        "labels": dict(labels),
        "annotations": dict(annotations),
    }


def _entrypoint(plan: Plan, stage: StagePlan, command: list[str], **place) -> list[str]:
    """The pod's argv; a training stage's pods watch its heartbeats for hangs."""
    watch: dict[str, Any] = {"heartbeats": stage.heartbeat_dir, "hang_timeout": stage.hang_timeout_seconds}
    return pod_argv(
        PYTHON, plan.layout.run_dir, stage.result_file, command, **(watch if stage.heartbeat_dir else {}), **place
    )


def _job(plan: Plan, stage: StagePlan, name: str, labels: dict, annotations: dict, try_number: int) -> dict:
    """The stage's Indexed Job: a Horovod pod per worker (running its ranks), a pod per TF cluster member, or
    the stage's writers (prepare_data's pods, when several, meet in a directory of the try under the run's)."""
    k8s, command = placement(stage), stage.args.command(PYTHON)
    role, count, gpus = "worker", len(stage.members), stage.gpus_per_worker
    if stage.sync == "horovod":  # each pod runs its slots' ranks; pod 0 serves the rendezvous
        argv = _entrypoint(plan, stage, command, job=name, horovod_slots=stage.slots, pods=stage.workers)
        env = _env(plan, stage, "worker", stage.slots, horovod=True)
    elif stage.sync == "tf_cluster":
        # roles in completion-index order; one pod template for every member: chief and ps get the workers' settings
        argv = _entrypoint(plan, stage, command, job=name, cluster=Counter(m.role for m in stage.members))
        env = _env(plan, stage, "worker")
    else:
        role, count, gpus = stage.members[0].role, stage.writers or 1, 0
        env = _env(plan, stage, role)
        meeting = storage.join(plan.layout.run_dir, stage.task_id, f"pods-try-{try_number}")
        args = stage.args
        if count > 1 and isinstance(args, PrepareArgs):  # several writers: prepare_data's pods
            args = replace(args, pods=count, coordination=meeting)
        argv = _entrypoint(plan, stage, args.command(PYTHON))
    template = _pod_template(
        k8s,
        role,
        _container(k8s, role, "trainer", argv, env, gpus),
        labels,
        annotations,
        **({"subdomain": name} if stage.sync else {}),
    )
    job_spec = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]}},
            ]
        },
        "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
        "template": template,
    }
    if stage.servers:  # parameter servers and workers serve until the chief (index 0) is done
        job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(k8s, name, labels, annotations),
        "spec": job_spec,
    }


def native_objects(
    plan: Plan, stage: StagePlan, name: str, labels: dict, annotations: dict, try_number: int = 1
) -> list[dict]:
    """The stage's Job; a TF cluster or Horovod stage's also a headless Service naming its pods."""
    job = _job(plan, stage, name, labels, annotations, try_number)
    if not stage.sync:
        return [job]
    ports = [{"name": "tf", "port": TF_PORT}, {"name": "rendezvous", "port": RENDEZVOUS_PORT}]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(placement(stage), name, labels, annotations),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": name},
            "ports": ports,
        },
    }
    return [service, job]


def tfjob(plan: Plan, stage: StagePlan, metadata: dict, run_policy: dict, labels: dict, annotations: dict) -> dict:
    """The TF cluster as a TFJob: the operator sets each pod's TF_CONFIG."""
    k8s = placement(stage)
    replicas: dict[str, dict[str, Any]] = {}
    for m in stage.members:
        argv = _entrypoint(plan, stage, stage.args.command(PYTHON))
        container = _container(k8s, m.role, "tensorflow", argv, _env(plan, stage, m.role), m.gpus)
        container["ports"] = [{"name": "tfjob-port", "containerPort": TF_PORT}]
        replica = replicas.setdefault(
            TF_REPLICA_TYPES[m.role],
            {
                "replicas": 0,
                "restartPolicy": "Never",
                "template": _pod_template(k8s, m.role, container, labels, annotations),
            },
        )
        replica["replicas"] += 1
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": metadata,
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replicas},
    }


def mpijob(plan: Plan, stage: StagePlan, metadata: dict, run_policy: dict, labels: dict, annotations: dict) -> dict:
    """Horovod as an MPIJob: mpirun in the launcher pod reaching the worker pods over SSH, as the MPI operator
    sets up."""
    k8s = placement(stage)
    env = _env(plan, stage, "worker", stage.slots, horovod=True)  # the ranks': the launcher's pod passes its own on
    mpirun = mpirun_argv(
        stage.workers * stage.slots,
        stage.args.command(PYTHON),
        extra_args=stage.horovod.extra_args if stage.horovod else (),
    )
    launcher = _container(k8s, "worker", "launcher", _entrypoint(plan, stage, mpirun, hostfile=MPI_HOSTFILE), env, 0)
    launcher.pop("resources", None)  # mpirun only starts and relays the ranks
    worker = _container(
        k8s,
        "worker",
        "worker",
        ["/usr/sbin/sshd", "-De", "-f", f"{IMAGE_HOME}/.sshd_config"],
        {},
        stage.gpus_per_worker,
    )
    for container in (launcher, worker):
        container["securityContext"] = {"runAsUser": IMAGE_UID}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": stage.slots,
            "runPolicy": run_policy,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": f"{IMAGE_HOME}/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": _pod_template(k8s, "worker", launcher, labels, annotations),
                },
                "Worker": {
                    "replicas": stage.workers,
                    "restartPolicy": "Never",
                    "template": _pod_template(k8s, "worker", worker, labels, annotations),
                },
            },
        },
    }


def kubeflow_objects(plan: Plan, stage: StagePlan, name: str, labels: dict, annotations: dict) -> list[dict]:
    """The train stage as a TFJob or an MPIJob."""
    run_policy = {
        "cleanPodPolicy": "Running",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": placement(stage).ttl_seconds_after_finished,
    }
    make = tfjob if stage.sync == "tf_cluster" else mpijob
    metadata = _metadata(placement(stage), name, labels, annotations)
    return [make(plan, stage, metadata, run_policy, labels, annotations)]


def stage_objects(plan: Plan, stage: StagePlan, try_number: int = 1, *, kubeflow: bool = False) -> list[dict]:
    """Every object the stage creates, in the order to create them; ``kubeflow`` (train stage only):
    a TFJob or MPIJob instead of native Jobs."""
    pipeline, run_id = plan.context.pipeline_id, plan.context.run_id
    name = object_name(pipeline, run_id, stage.task_id)
    labels, annotations = identity(placement(stage), pipeline, run_id, stage.task_id, try_number)
    if kubeflow and stage.sync:
        return kubeflow_objects(plan, stage, name, labels, annotations)
    return native_objects(plan, stage, name, labels, annotations, try_number)
