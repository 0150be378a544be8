"""The Kubernetes objects of one stage of a run, as plain dicts (what ``kubectl apply -f`` takes): pure
functions of the spec, the stage and the run's identity. No client, no cluster, no Airflow.

- native (any cluster >= 1.31, no CRD): one Indexed Job per stage; a TF cluster or Horovod stage adds a
  headless Service (``publishNotReadyAddresses``) giving each pod the stable name ``<job>-<index>.<service>``,
  and its pods start through ``tfdist.trainer.pod``. The parameter-server Job succeeds when the chief (index 0)
  does; any pod failing fails the Job at once, a disruption (eviction, preemption) by its own rule.
- kubeflow: the train stage as a TFJob (``kubeflow.org/v1``) or an MPIJob (``kubeflow.org/v2beta1``). An
  MPIJob's pods run as the worker image's user (IMAGE_UID): the workers' sshd with that user's config on
  port 2222 (docker/sshd_config), the job's SSH key pair mounted in that user's ~/.ssh, and ``mpirun``
  passing the ranks their environment (an ssh session gets none of its pod's)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from typing import Any

from tfdist.operators.plan import Plan, Stage
from tfdist.trainer.contract import (CORES_ENV, RENDEZVOUS_PORT, RUN_ENV, SPEC_ENV, TERMINATION_LOG, THREADS_ENV,
                                     TF_PORT, pod_argv)
from tfdist.trainer.spec import KubernetesSpec, Spec

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
MPI_FORWARDED_ENV = ("PATH",)
"""The image's variables mpirun passes on to the ranks (``-x``), besides the stage's own: sshd starts the
ranks' orted with its own minimal environment, not the pod's."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def object_name(dag_id: str, run_id: str, task_id: str) -> str:
    """The stage's objects' name: a DNS label of at most NAME_MAX characters, the same for every try of
    the task (a retry finds the running Job by it), distinct for every (dag, run, stage)."""
    readable = re.sub(r"[^a-z0-9]+", "-", f"{dag_id}-{task_id}".lower()).strip("-")
    return f"tfd-{readable[:NAME_MAX - 15].rstrip('-')}-{_digest(dag_id, run_id, task_id)}"


def label_value(value: str) -> str:
    """``value`` as a valid label value: kept when it is one, else made one and told apart by a digest."""
    if len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value):
        return value
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:51].strip("_.-")
    return f"{readable}-{_digest(value)}".lstrip("-")


def identity(spec: Spec, dag_id: str, run_id: str, task_id: str, try_number: int) -> tuple[dict, dict]:
    """(labels, annotations) of every object and pod of the stage: who made it, for which run."""
    k8s = _settings(spec)
    labels = {**k8s.labels, "app.kubernetes.io/managed-by": "tfdist", f"{LABEL_PREFIX}/dag-id": label_value(dag_id),
              f"{LABEL_PREFIX}/run-id": label_value(run_id), f"{LABEL_PREFIX}/task-id": task_id,
              f"{LABEL_PREFIX}/try-number": str(try_number)}
    annotations = {**k8s.annotations, f"{LABEL_PREFIX}/dag-id": dag_id, f"{LABEL_PREFIX}/run-id": run_id}
    return labels, annotations


def _settings(spec: Spec) -> KubernetesSpec:
    if spec.kubernetes is None:
        raise ValueError("kubernetes: the spec has no kubernetes section (pods.image, artifact_volume, ...)")
    return spec.kubernetes


def _container(spec: Spec, role: str, name: str, argv: list[str], env: dict[str, str], gpus: int) -> dict:
    pods = _settings(spec).for_role(role)
    amounts = {k: v for k, v in (("cpu", pods.cpu), ("memory", pods.memory)) if v}
    resources = {"requests": dict(amounts), "limits": {**amounts, **({"nvidia.com/gpu": gpus} if gpus else {})}}
    return {
        "name": name,
        "image": pods.image,
        "imagePullPolicy": _settings(spec).image_pull_policy,
        "command": argv,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {k: v for k, v in resources.items() if v},
        "volumeMounts": [{"name": "artifacts", "mountPath": spec.artifact_root}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod_template(spec: Spec, role: str, container: dict, labels: dict, annotations: dict, **extra: Any) -> dict:
    k8s, pods = _settings(spec), _settings(spec).for_role(role)
    pod = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{"name": "artifacts", "persistentVolumeClaim": {"claimName": k8s.artifact_volume.claim_name}}],
        "serviceAccountName": k8s.service_account,
        "priorityClassName": k8s.priority_class,
        "schedulerName": k8s.scheduler_name,
        "imagePullSecrets": [{"name": s} for s in k8s.image_pull_secrets] or None,
        "nodeSelector": pods.node_selector or None,
        "tolerations": pods.tolerations or None,
        "affinity": pods.affinity,
        # the artifact volume writable by the images' user, where the storage applies fsGroup
        "securityContext": {"fsGroup": IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch"},
        **extra,
    }
    return {"metadata": {"labels": dict(labels), "annotations": dict(annotations)},
            "spec": {k: v for k, v in pod.items() if v is not None}}


def _env(plan: Plan, role: str, env: dict[str, str], per_pod: int = 1) -> dict[str, str]:
    """The process's environment in a pod: threads from the role's whole CPUs (shared by the pod's
    ``per_pod`` processes), never this machine's core pinning; the run's spec and record for
    ``tfdist.trainer.pod`` to write in the run directory."""
    cpu = _settings(plan.spec).for_role(role).cpu
    threads = {THREADS_ENV: str(max(1, int(cpu) // per_pod))} if cpu and cpu.isdigit() else {}
    kept = {k: v for k, v in env.items() if k not in (CORES_ENV, THREADS_ENV, "CUDA_VISIBLE_DEVICES")}
    record = {SPEC_ENV: json.dumps(plan.spec.to_json_dict(), sort_keys=True),
              RUN_ENV: json.dumps(plan.run_record(), sort_keys=True)}
    return {"PYTHONUNBUFFERED": "1", **kept, **threads, **record}


def _metadata(spec: Spec, name: str, labels: dict, annotations: dict) -> dict:
    return {"name": name, "namespace": _settings(spec).namespace, "labels": dict(labels),
            "annotations": dict(annotations)}


def _entrypoint(plan: Plan, stage: Stage, python: str, command: tuple[str, ...], **place) -> list[str]:
    """The pod's argv; a training stage's pods watch its heartbeats for hangs."""
    watch = {"heartbeats": stage.heartbeat_dir, "hang_timeout": stage.hang_timeout_seconds}
    return pod_argv(python, plan.layout.run_dir, stage.result_file, command, **(watch if stage.heartbeat_dir else {}),
                    **place)


def native_objects(plan: Plan, stage: Stage, name: str, labels: dict, annotations: dict,
                   python: str = "python", try_number: int = 1) -> list[dict]:
    """A headless Service (TF cluster and Horovod stages) and one Indexed Job (prepare_data's pods, when
    several, meet in a directory of the try on the artifact volume)."""
    spec, first = plan.spec, stage.processes[0]
    t = spec.training
    if stage.rank_command:  # Horovod: each pod runs its slots' ranks; pod 0 serves the rendezvous
        slots = t.mpi_settings.slots_per_worker
        argv = _entrypoint(plan, stage, python, stage.rank_command, job=name, horovod_slots=slots, pods=stage.rank_pods)
        role, count, env = "worker", stage.rank_pods, _env(plan, "worker", first.env, slots)
        gpus = t.gpus_per_worker
    elif stage.tf_cluster:
        cluster = Counter(p.role for p in stage.processes)  # roles in completion-index order
        argv = _entrypoint(plan, stage, python, first.argv, job=name, cluster=cluster)
        # one pod template for every member (roles differ by index): chief and ps get the workers' settings
        role, count, env, gpus = "worker", len(stage.processes), _env(plan, "worker", first.env), t.gpus_per_worker
    else:
        role, count, env, gpus = first.role, len(stage.processes), _env(plan, first.role, first.env), 0
        meeting = os.path.join(plan.layout.run_dir, stage.task_id, f"pods-try-{try_number}")
        argv = _entrypoint(plan, stage, python, first.argv if count == 1 else
                           (*first.argv, "--pods", str(count), "--coordination", meeting))
    clustered = stage.tf_cluster or bool(stage.rank_command)
    template = _pod_template(spec, role, _container(spec, role, "trainer", argv, env, gpus), labels, annotations,
                             **({"subdomain": name} if clustered else {}))
    job_spec = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]}},
        ]},
        "ttlSecondsAfterFinished": _settings(spec).ttl_seconds_after_finished,
        "template": template,
    }
    if stage.servers:  # parameter servers and workers serve until the chief (index 0) is done
        job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(spec, name, labels, annotations),
           "spec": job_spec}
    if not clustered:
        return [job]
    ports = [{"name": "tf", "port": TF_PORT}, {"name": "rendezvous", "port": RENDEZVOUS_PORT}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(spec, name, labels, annotations),
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                        "selector": {"batch.kubernetes.io/job-name": name}, "ports": ports}}
    return [service, job]


def kubeflow_objects(plan: Plan, stage: Stage, name: str, labels: dict, annotations: dict,
                     python: str = "python") -> list[dict]:
    """The train stage as a TFJob (the operator sets each pod's TF_CONFIG) or an MPIJob (mpirun in the
    launcher pod reaching the worker pods over SSH, as the MPI operator sets up)."""
    spec = plan.spec
    k8s, t = _settings(spec), spec.training
    run_policy = {"cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished}
    metadata = _metadata(spec, name, labels, annotations)
    if stage.tf_cluster:
        replicas: dict[str, dict] = {}
        for p in stage.processes:
            gpus = p.gpus if p.role == "worker" else 0
            argv = _entrypoint(plan, stage, python, p.argv)
            container = _container(spec, p.role, "tensorflow", argv, _env(plan, p.role, p.env), gpus)
            container["ports"] = [{"name": "tfjob-port", "containerPort": TF_PORT}]
            replica = replicas.setdefault(TF_REPLICA_TYPES[p.role], {
                "replicas": 0, "restartPolicy": "Never",
                "template": _pod_template(spec, p.role, container, labels, annotations)})
            replica["replicas"] += 1
        return [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": metadata,
                 "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replicas}}]
    slots = t.mpi_settings.slots_per_worker
    ranks = stage.rank_pods * slots
    env = _env(plan, "worker", stage.processes[0].env, slots)  # the ranks', held by the launcher for mpirun
    forwarded = [k for k in env if k not in (SPEC_ENV, RUN_ENV) and not k.startswith("OMPI_")]  # mpirun passes OMPI_*
    forwarded += [*MPI_FORWARDED_ENV, *(["LD_LIBRARY_PATH"] if t.gpus_per_worker else [])]  # the GPU image's CUDA
    mpirun = ("mpirun", "-np", str(ranks), "--bind-to", "none", "--map-by", "slot", "--tag-output",
              *(arg for var in forwarded for arg in ("-x", var)), *t.mpi_settings.extra_args, *stage.rank_command)
    launcher = _container(spec, "worker", "launcher",
                          _entrypoint(plan, stage, python, mpirun, hostfile=MPI_HOSTFILE), env, 0)
    launcher.pop("resources", None)  # mpirun only starts and relays the ranks
    worker = _container(spec, "worker", "worker", ["/usr/sbin/sshd", "-De", "-f", f"{IMAGE_HOME}/.sshd_config"], {},
                        t.gpus_per_worker)
    for container in (launcher, worker):
        container["securityContext"] = {"runAsUser": IMAGE_UID}
    return [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": metadata, "spec": {
        "slotsPerWorker": slots, "runPolicy": run_policy, "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": f"{IMAGE_HOME}/.ssh",
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "Never",
                         "template": _pod_template(spec, "worker", launcher, labels, annotations)},
            "Worker": {"replicas": stage.rank_pods, "restartPolicy": "Never",
                       "template": _pod_template(spec, "worker", worker, labels, annotations)},
        }}}]


def stage_objects(plan: Plan, stage: Stage, try_number: int = 1, *, kubeflow: bool = False,
                  python: str = "python") -> list[dict]:
    """Every object the stage creates, in the order to create them; ``kubeflow`` (train stage only):
    a TFJob or MPIJob instead of native Jobs."""
    dag_id, run_id = plan.context.dag_id, plan.context.run_id
    name = object_name(dag_id, run_id, stage.task_id)
    labels, annotations = identity(plan.spec, dag_id, run_id, stage.task_id, try_number)
    if kubeflow and (stage.tf_cluster or stage.rank_command):
        return kubeflow_objects(plan, stage, name, labels, annotations, python)
    return native_objects(plan, stage, name, labels, annotations, python, try_number)
