"""The TFJob controller, as Kubeflow's training operator v1 reconciles TFJobs: a pod and a headless Service
per replica, TF_CONFIG, restart policies (a failed OnFailure or Always replica is recreated, with no back-off),
runPolicy.backoffLimit and cleanPodPolicy, and the job's conditions and replicaStatuses."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING

from tests.k8s_standin.common import TF, now, set_job_condition, together, true

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster
    from tests.k8s_standin.pods import Pod

TF_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
TF_STATUS_ORDER = ("Chief", "Evaluator", "Master", "PS", "Worker")
"""The order in which the training operator derives a TFJob's conditions from its replica types."""


def tf_replicas(spec: dict) -> dict[str, dict]:
    """spec.tfReplicaSpecs with the operator's defaults: type names in camel case, one replica, restartPolicy
    Never, and the ``tfjob-port`` (2222) on the ``tensorflow`` container."""
    replicas = {}
    for key, replica in spec["tfReplicaSpecs"].items():
        replica = {"replicas": 1, "restartPolicy": "Never", **copy.deepcopy(replica)}
        container = tf_container(replica)
        if not any(p.get("name") == "tfjob-port" for p in container.get("ports", [])):
            container["ports"] = [*container.get("ports", []), {"name": "tfjob-port", "containerPort": 2222}]
        replicas[next((t for t in TF_TYPES if t.lower() == key.lower()), key)] = replica
    return replicas


def tf_container(replica: dict) -> dict:
    """The replica's ``tensorflow`` container (else its first, as the operator's defaulting picks)."""
    containers = replica["template"]["spec"]["containers"]
    return next((c for c in containers if c["name"] == "tensorflow"), containers[0])


def tf_port(replica: dict) -> int:
    container = next((c for c in replica["template"]["spec"]["containers"] if c["name"] == "tensorflow"), {})
    return next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "tfjob-port"), 2222)


def tf_labels(job: str, rt: str, index: int) -> dict[str, str]:
    return {
        f"{TF}operator-name": "tfjob-controller",
        f"{TF}job-name": job,
        f"{TF}replica-type": rt,
        f"{TF}replica-index": str(index),
    }


def tf_config(job: dict, replicas: dict, rt: str, index: int) -> str:
    """TF_CONFIG of the replica: every replica's address by its Service's name, and its own task."""
    meta = job["metadata"]
    cluster = {
        t.lower(): [
            f"{meta['name']}-{t.lower()}-{i}.{meta['namespace']}.svc:{tf_port(r)}" for i in range(r["replicas"])
        ]
        for t, r in sorted(replicas.items(), key=lambda kv: kv[0].lower())
    }
    return json.dumps(
        {"cluster": cluster, "task": {"type": rt, "index": index}, "environment": "cloud"}, separators=(",", ":")
    )


def replica_service(job: dict, spec: dict, rt: str, index: int) -> dict:
    """The headless Service of one replica (named as its pod), with the tensorflow container's named ports."""
    name, labels = f"{job['metadata']['name']}-{rt}-{index}", tf_labels(job["metadata"]["name"], rt, index)
    ports = [
        {"name": p["name"], "port": p["containerPort"]} for p in tf_container(spec).get("ports", []) if p.get("name")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterIP": "None", "selector": labels, "ports": ports},
    }


class TFJobController:
    def __init__(self, cluster: StandInCluster) -> None:
        self.cluster = cluster

    def reconcile(self, job: dict) -> None:
        """The operator's ReconcileJobs: a finished job's pods are cleaned up by its cleanPodPolicy; a new
        pod failure past runPolicy.backoffLimit fails the job and deletes all its pods and Services; else each
        replica type's missing pods and Services are created and the job's status follows its pods."""
        c, meta, status = self.cluster, job["metadata"], job["status"]
        replicas, pods = tf_replicas(job["spec"]), c.owned(job)
        if not status.get("conditions"):
            with c.lock:
                set_job_condition(status, "Created", "TFJobCreated", f"TFJob {meta['name']} is created.")
        if true(status, "Succeeded") or true(status, "Failed"):
            return self._clean_up(job, pods)
        if self._past_backoff_limit(job, replicas, pods):
            message = f"Job {meta['name']} has failed because it has reached the specified backoff limit"
            with c.lock:
                status.setdefault("completionTime", now())
            self.delete_replicas(job, pods)
            c.event(job, "TFJobFailed", message)
            with c.lock:
                set_job_condition(status, "Failed", "TFJobFailed", message)
            c.changed.set()
            return None
        for rtype, spec in replicas.items():
            self._reconcile_replicas(job, rtype, spec, replicas, pods)
        self._update_status(job, replicas, c.owned(job))
        return None

    def _clean_up(self, job: dict, pods: list[Pod]) -> None:
        """A finished job: its pods deleted by cleanPodPolicy; a succeeded one's active replicas count as
        succeeded."""
        clean = (job["spec"].get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        self.delete_replicas(
            job, [p for p in pods if clean == "All" or (clean == "Running" and p.phase in ("Running", "Pending"))]
        )
        if true(job["status"], "Succeeded"):
            with self.cluster.lock:
                for counts in job["status"].get("replicaStatuses", {}).values():
                    if active := counts.pop("active", 0):
                        counts["succeeded"] = counts.get("succeeded", 0) + active

    @staticmethod
    def _past_backoff_limit(job: dict, replicas: dict, pods: list[Pod]) -> bool:
        status, limit = job["status"], (job["spec"].get("runPolicy") or {}).get("backoffLimit")
        failed = sum(p.phase == "Failed" for p in pods)
        active = sum(p.phase not in ("Succeeded", "Failed") for p in pods)
        known = sum(r.get("failed", 0) for r in status.get("replicaStatuses", {}).values())
        return (
            limit is not None
            and failed > known
            and active != sum(r["replicas"] for r in replicas.values())
            and limit < 1
        )

    def _reconcile_replicas(self, job: dict, rtype: str, spec: dict, replicas: dict, pods: list[Pod]) -> None:
        """ReconcilePods and ReconcileServices for one replica type: create the missing pods (and headless
        Services, one per pod), restart failed ones as the replica's restartPolicy says, count the rest."""
        c, meta, rt = self.cluster, job["metadata"], rtype.lower()
        mine = {int(p.labels[f"{TF}replica-index"]): p for p in pods if p.labels.get(f"{TF}replica-type") == rt}
        counts, created = {"active": 0, "succeeded": 0, "failed": 0}, []
        for index in range(spec["replicas"]):
            pod = mine.get(index)
            if pod is None:
                if pod := self._pod(job, rtype, index, spec, replicas):
                    c.event(job, "SuccessfulCreatePod", f"Created pod: {pod.obj['metadata']['name']}")
                    created.append(pod)
                continue
            self._restart_or_fail(job, rtype, spec, pod)
            key = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(pod.phase)
            if key:
                counts[key] += 1
        with c.lock:
            job["status"].setdefault("replicaStatuses", {})[rtype] = {k: v for k, v in counts.items() if v}
        for index in range(spec["replicas"]):
            service = replica_service(job, spec, rt, index)
            if c.create(service, meta["namespace"], job):  # None: it exists
                c.event(job, "SuccessfulCreateService", f"Created service: {service['metadata']['name']}")
        for pod in created:
            pod.schedule()
        c.write_hosts()

    def _restart_or_fail(self, job: dict, rtype: str, spec: dict, pod: Pod) -> None:
        """A failed replica: deleted to be recreated when its restartPolicy says so (OnFailure, Always, or
        ExitCode with a retryable code, 128 and up), else an ExitCode replica fails the job."""
        c, name, status = self.cluster, job["metadata"]["name"], job["status"]
        code = (pod.terminated or {}).get("exitCode")
        restart = spec["restartPolicy"] in ("OnFailure", "Always") or (
            spec["restartPolicy"] == "ExitCode" and code is not None and code >= 128
        )
        if pod.phase == "Failed" and restart:
            self.delete_replicas(job, [pod], services=False)
            message = f"job {name} is restarting because {rtype} replica(s) failed."
            c.event(job, "TFJobRestarting", message, "Warning")
            with c.lock:
                set_job_condition(status, "Restarting", "TFJobRestarting", message)
        elif pod.phase == "Failed" and spec["restartPolicy"] == "ExitCode":
            message = f'job "{name}" is failing because "{rtype}" replica(s) failed.'
            c.event(job, "TFJobFailed", message, "Warning")
            with c.lock:
                set_job_condition(status, "Failed", "TFJobFailed", message)

    def _pod(self, job: dict, rtype: str, index: int, spec: dict, replicas: dict) -> Pod | None:
        """The replica's pod, as the operator makes it from the replica's template: named
        ``<job>-<type>-<index>``, labelled, its restartPolicy the replica's, TF_CONFIG added to the
        ``tensorflow`` container when the job has more than one replica."""
        meta, rt = job["metadata"], rtype.lower()
        template = copy.deepcopy(spec["template"])
        labels = {**(template.get("metadata") or {}).get("labels", {}), **tf_labels(meta["name"], rt, index)}
        has_chief = bool({"Chief", "Master"} & replicas.keys())
        if rtype in ("Chief", "Master") if has_chief else (rtype, index) == ("Worker", 0):
            labels[f"{TF}job-role"] = "master"
        pod_spec = template["spec"]
        if pod_spec.get("restartPolicy"):
            self.cluster.event(
                job,
                "SetPodTemplateRestartPolicy",
                "Restart policy in pod template will be overwritten by restart policy in replica spec",
                "Warning",
            )
        pod_spec["restartPolicy"] = "Never" if spec["restartPolicy"] == "ExitCode" else spec["restartPolicy"]
        if sum(r["replicas"] for r in replicas.values()) != 1:
            for c in pod_spec["containers"]:
                if c["name"] == "tensorflow":
                    c["env"] = [*c.get("env", []), {"name": "TF_CONFIG", "value": tf_config(job, replicas, rt, index)}]
        annotations = (template.get("metadata") or {}).get("annotations", {})
        return self.cluster.add_pod(job, f"{meta['name']}-{rt}-{index}", labels, annotations, pod_spec)

    def _update_status(self, job: dict, replicas: dict, pods: list[Pod]) -> None:
        """UpdateJobStatus: Running while the chief (else a worker) runs; Succeeded once the chief did (else
        worker 0, or every worker with successPolicy AllWorkers); Failed once a replica failed, unless the job
        is restarting it."""
        c, meta, status = self.cluster, job["metadata"], job["status"]
        ref = f"{meta['namespace']}/{meta['name']}"
        restarting = next((cond for cond in status.get("conditions", []) if cond["type"] == "Restarting"), None)
        worker0 = "Worker" not in replicas or any(
            p.labels.get(f"{TF}replica-type") == "worker"
            and p.labels.get(f"{TF}replica-index") == "0"
            and p.phase == "Succeeded"
            and p.terminated["exitCode"] == 0
            for p in pods
        )
        has_chief = bool({"Chief", "Master"} & replicas.keys())
        with c.lock:
            status.setdefault("startTime", now())
        for rtype in (t for t in TF_STATUS_ORDER if t in replicas):
            counts = status["replicaStatuses"][rtype]
            expected = replicas[rtype]["replicas"] - counts.get("succeeded", 0)
            running, failed = counts.get("active", 0), counts.get("failed", 0)
            succeeded = is_running = False
            if has_chief and rtype in ("Chief", "Master"):
                succeeded, is_running = expected == 0, running > 0
            elif not has_chief and rtype == "Worker":
                succeeded = expected == 0 or (worker0 and job["spec"].get("successPolicy") != "AllWorkers")
                is_running = not succeeded and running > 0
            self._set_status(job, ref, rtype, is_running, succeeded, failed, restarting)
        if true(status, "Succeeded") or true(status, "Failed"):
            c.changed.set()  # the status update brings the next reconcile: the clean-up

    def _set_status(
        self, job: dict, ref: str, rtype: str, is_running: bool, succeeded: bool, failed: int, restarting: dict | None
    ) -> None:
        """One replica type's say in the job's conditions."""
        c, status = self.cluster, job["status"]
        with c.lock:
            if is_running:
                set_job_condition(status, "Running", "TFJobRunning", f"TFJob {ref} is running.")
            if succeeded:
                status.setdefault("completionTime", now())
                set_job_condition(status, "Succeeded", "TFJobSucceeded", f"TFJob {ref} successfully completed.")
        if succeeded:
            c.event(job, "TFJobSucceeded", f"TFJob {ref} successfully completed.")
        if failed and restarting:
            with c.lock:
                set_job_condition(status, "Restarting", restarting["reason"], restarting["message"])
        elif failed:
            message = f"TFJob {ref} has failed because {failed} {rtype} replica(s) failed."
            c.event(job, "TFJobFailed", message)
            with c.lock:
                status.setdefault("completionTime", now())
                set_job_condition(status, "Failed", "TFJobFailed", message)

    def delete_replicas(self, job: dict, pods: list[Pod], services: bool = True) -> None:
        """DeletePodsAndServices: each pod, and its Service (same name)."""
        c = self.cluster

        def delete(pod: Pod) -> None:
            name = pod.obj["metadata"]["name"]
            if c.delete("Pod", pod.namespace, name):
                c.event(job, "SuccessfulDeletePod", f"Deleted pod: {name}")
            if services and c.delete("Service", pod.namespace, name):
                c.event(job, "SuccessfulDeleteService", f"Deleted service: {name}")

        together(lambda p=p: delete(p) for p in pods)
