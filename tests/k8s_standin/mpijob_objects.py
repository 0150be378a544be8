"""The objects Kubeflow's MPI operator (v2beta1, v0.6) makes for an MPIJob, built as it builds them: the job's
headless Service, its ConfigMap (``hostfile``, ``discover_hosts.sh``), its SSH Secret, the worker pods'
spec and the launcher Job."""

from __future__ import annotations

import base64
import copy

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.k8s_standin.common import TF

MPI_OPERATOR, MPI_CONFIG = "mpi-operator", "/etc/mpi"


def worker_replicas(job: dict) -> int:
    """spec.mpiReplicaSpecs.Worker.replicas, defaulted as the operator does (no Worker, or none: 0)."""
    return (job["spec"]["mpiReplicaSpecs"].get("Worker") or {}).get("replicas", 0)


def mpi_labels(job: str, role: str | None = None) -> dict[str, str]:
    """The MPI operator's labels of a job's pods (its Service selects them without the role)."""
    return {f"{TF}operator-name": MPI_OPERATOR, f"{TF}job-name": job, **({f"{TF}job-role": role} if role else {})}


def config_data(job: dict, running: list[str]) -> dict[str, str]:
    """The ConfigMap's data: the hostfile naming every worker with its slots, and discover_hosts.sh naming the
    ``running`` worker pods."""
    meta, spec = job["metadata"], job["spec"]
    name, ns, slots = meta["name"], meta["namespace"], spec.get("slotsPerWorker", 1)
    hosts = [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(worker_replicas(job))]
    return {
        "hostfile": "".join(f"{h} slots={slots}\n" for h in hosts),
        "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {p}.{name}.{ns}.svc\n" for p in running),
    }


def config_map(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "labels": {"app": name}},
        "data": data,
    }


def service(name: str) -> dict:
    """The job's headless Service, selecting its launcher and workers."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"clusterIP": "None", "selector": mpi_labels(name)},
    }


def ssh_secret(name: str) -> dict:
    """The job's SSH Secret: a new ECDSA P-521 key pair."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": {"name": f"{name}-ssh", "labels": {"app": name}},
        "data": {
            "ssh-privatekey": base64.b64encode(private).decode(),
            "ssh-publickey": base64.b64encode(public + b"\n").decode(),
        },
    }


def worker_pod(job: dict, i: int) -> tuple[dict, dict, dict]:
    """(labels, annotations, spec) of worker ``i`` from the Worker template: host name under the job's
    Service, ``/usr/sbin/sshd -De`` when it has no command, the SSH Secret."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    replica = job["spec"]["mpiReplicaSpecs"].get("Worker")
    template = copy.deepcopy(replica["template"])
    labels = {
        **(template.get("metadata") or {}).get("labels", {}),
        **mpi_labels(name, "worker"),
        f"{TF}replica-index": str(i),
    }
    pod_spec = {**template["spec"], "hostname": f"{name}-worker-{i}", "subdomain": name}
    dns = pod_spec.setdefault("dnsConfig", {})
    dns["searches"] = [*dns.get("searches", []), f"{name}.{ns}.svc.cluster.local"]
    container = pod_spec["containers"][0]
    if not container.get("command") and not container.get("args"):
        container["command"] = ["/usr/sbin/sshd", "-De"]
    container["env"] = [*container.get("env", []), {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
    mpi_pod(job, replica, pod_spec)
    return labels, (template.get("metadata") or {}).get("annotations", {}), pod_spec


def launcher_env(job: dict) -> list[dict]:
    """OpenMPI's settings the operator adds to the launcher's first container."""
    settings = (
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", f"{MPI_CONFIG}/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", str(job["spec"].get("slotsPerWorker", 1))),
    )
    return [
        *({"name": k, "value": v} for k, v in settings),
        {"name": "NVIDIA_VISIBLE_DEVICES"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES"},
    ]


def launcher_job(job: dict) -> dict:
    """The launcher Job ``<job>-launcher``: backoffLimit, activeDeadlineSeconds and ttlSecondsAfterFinished
    from runPolicy; its pod the Launcher template with host name ``<job>-launcher`` under the job's
    Service, OpenMPI's settings in its first container's env, the hostfile at /etc/mpi."""
    meta, spec = job["metadata"], job["spec"]
    name, replica = meta["name"], spec["mpiReplicaSpecs"]["Launcher"]
    template = copy.deepcopy(replica["template"])
    template["metadata"] = {
        **(template.get("metadata") or {}),
        "labels": {**(template.get("metadata") or {}).get("labels", {}), **mpi_labels(name, "launcher")},
    }
    pod_spec = template["spec"]
    pod_spec.update(hostname=f"{name}-launcher", subdomain=name)
    container = pod_spec["containers"][0]
    container["env"] = [*container.get("env", []), *launcher_env(job)]
    mpi_pod(job, {"restartPolicy": "OnFailure", **replica}, pod_spec)
    items = [
        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
    ]
    pod_spec["volumes"].append({"name": "mpi-job-config", "configMap": {"name": f"{name}-config", "items": items}})
    container["volumeMounts"].append({"name": "mpi-job-config", "mountPath": MPI_CONFIG})
    policy = spec.get("runPolicy") or {}
    keys = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-launcher", "labels": {"app": name}},
        "spec": {**{k: policy[k] for k in keys if policy.get(k) is not None}, "template": template},
    }


def mpi_pod(job: dict, replica: dict, pod_spec: dict) -> None:
    """What launcher and workers share: the replica's restartPolicy, and the job's SSH Secret (id_rsa,
    id_rsa.pub, authorized_keys; mode 0600 at /root/.ssh, else the default 0644) mounted at
    sshAuthMountPath in the first container."""
    name, path = job["metadata"]["name"], job["spec"].get("sshAuthMountPath", "/root/.ssh")
    policy = replica.get("restartPolicy", "Never")
    pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    secret = {
        "secretName": f"{name}-ssh",
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    }
    if path == "/root/.ssh":
        secret["defaultMode"] = 0o600
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), {"name": "ssh-auth", "secret": secret}]
    container = pod_spec["containers"][0]
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "ssh-auth", "mountPath": path}]
