"""The MPIJob controller, as Kubeflow's MPI operator v2beta1 (v0.6) reconciles MPIJobs: its Service,
ConfigMap and SSH Secret, worker pods ``<job>-worker-<i>`` (``mpijob_objects``), the launcher Job
``<job>-launcher`` (at once, or once every worker is ready), the conditions (Created, Running, Succeeded,
Failed) and replicaStatuses following the launcher Job and the workers, and cleanPodPolicy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.k8s_standin import mpijob_objects as objects
from tests.k8s_standin.common import now, set_job_condition, together, true

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster
    from tests.k8s_standin.pods import Pod


class MPIJobController:
    def __init__(self, cluster: StandInCluster) -> None:
        self.cluster = cluster

    def reconcile(self, job: dict) -> None:
        """The operator's syncHandler: a finished job's workers are cleaned up by its cleanPodPolicy; until
        the launcher Job ended, the job's headless Service, ConfigMap (hostfile, discover_hosts.sh), SSH Secret
        and missing worker pods are created, and the launcher Job at once (launcherCreationPolicy AtStartup)
        or once every worker is ready (WaitForWorkersReady); the job's status follows the launcher Job and
        the workers (a failed worker does not fail the job: mpirun in the launcher does)."""
        c, meta, spec, status = self.cluster, job["metadata"], job["spec"], job["status"]
        name, ns = meta["name"], meta["namespace"]
        if not status.get("conditions"):
            with c.lock:
                set_job_condition(status, "Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
            c.event(job, "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
        workers = c.owned(job)  # the launcher's pod is its Job's
        if (true(status, "Succeeded") or true(status, "Failed")) and status.get("completionTime"):
            return self._clean_up(job, workers)
        with c.lock:
            status.setdefault("startTime", now())
            launcher = c.objects.get(("Job", ns, f"{name}-launcher"))
        if launcher is not None and (true(launcher["status"], "Complete") or true(launcher["status"], "Failed")):
            workers = []
        else:
            self._objects(job, workers)
            workers = self._workers(job, workers)
            ready = all(true(p.obj["status"], "Ready") for p in workers)
            if launcher is None and (spec.get("launcherCreationPolicy", "AtStartup") == "AtStartup" or ready):
                launcher = self._create_launcher(job)
        self._update_status(job, launcher, workers)
        return None

    def _clean_up(self, job: dict, workers: list[Pod]) -> None:
        clean = (job["spec"].get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        if clean in ("All", "Running"):
            together(
                lambda p=p: self.cluster.delete("Pod", job["metadata"]["namespace"], p.obj["metadata"]["name"])
                for p in workers
                if clean == "All" or p.phase in ("Running", "Pending")
            )
            with self.cluster.lock:
                job["status"].setdefault("replicaStatuses", {})["Worker"] = {}

    def _objects(self, job: dict, workers: list[Pod]) -> None:
        """The job's Service, ConfigMap (its discover_hosts.sh naming the running workers) and Secret, created
        as missing."""
        c, name, ns = self.cluster, job["metadata"]["name"], job["metadata"]["namespace"]
        data = objects.config_data(job, sorted(p.obj["metadata"]["name"] for p in workers if p.phase == "Running"))
        with c.lock:
            config = c.objects.get(("ConfigMap", ns, f"{name}-config"))
            if config is not None:
                config["data"] = data
        if config is None:
            c.create(objects.config_map(name, data), ns, job)
        c.create(objects.service(name), ns, job)  # unless it exists
        if ("Secret", ns, f"{name}-ssh") not in c.objects:
            c.create(objects.ssh_secret(name), ns, job)

    def _workers(self, job: dict, pods: list[Pod]) -> list[Pod]:
        """The worker pods ``<job>-worker-<i>``, in index order, created as missing."""
        name = job["metadata"]["name"]
        mine, created, count = {p.obj["metadata"]["name"]: p for p in pods}, [], objects.worker_replicas(job)
        for i in range(count):
            if f"{name}-worker-{i}" in mine:
                continue
            if pod := self.cluster.add_pod(job, f"{name}-worker-{i}", *objects.worker_pod(job, i)):
                mine[pod.obj["metadata"]["name"]] = pod
                created.append(pod)
        for pod in created:
            pod.schedule()
        return [mine[f"{name}-worker-{i}"] for i in range(count) if f"{name}-worker-{i}" in mine]

    def _create_launcher(self, job: dict) -> dict | None:
        if job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"].get("restartPolicy"):
            self.cluster.event(
                job,
                "SetPodTemplateRestartPolicy",
                "Restart policy in pod template overridden by restart policy in replica spec",
                "Warning",
            )
        return self.cluster.create(objects.launcher_job(job), job["metadata"]["namespace"], job)

    def _update_status(self, job: dict, launcher: dict | None, workers: list[Pod]) -> None:
        """updateMPIJobStatus: Succeeded or Failed with the launcher Job, Failed when workers were evicted,
        Running while the launcher's pod and every worker run; replicaStatuses of Launcher and Worker."""
        c, status, meta = self.cluster, job["status"], job["metadata"]
        ref = f"{meta['namespace']}/{meta['name']}"
        running = self._launcher_status(job, launcher) if launcher is not None else 0
        phases = [p.phase for p in workers]
        evicted = sum(p.phase == "Failed" and p.obj["status"].get("reason") == "Evicted" for p in workers)
        with c.lock:
            status.setdefault("replicaStatuses", {})["Worker"] = {
                k: v
                for k, v in (
                    ("active", phases.count("Running")),
                    ("succeeded", phases.count("Succeeded")),
                    ("failed", phases.count("Failed")),
                )
                if v
            }
            if evicted:
                set_job_condition(status, "Failed", "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted")
        if evicted:
            c.event(job, "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted", "Warning")
        if launcher is not None and running and phases.count("Running") == len(workers):
            with c.lock:
                set_job_condition(status, "Running", "MPIJobRunning", f"MPIJob {ref} is running.")
            c.event(job, "MPIJobRunning", f"MPIJob {ref} is running")
        if true(status, "Succeeded") or true(status, "Failed"):
            c.changed.set()  # the next reconcile: the clean-up

    def _launcher_status(self, job: dict, launcher: dict) -> int:
        """The job's say from its launcher Job (a backoff limit reached names the last failed pod's reason and
        message) and the Launcher's replicaStatus; how many of the launcher's pods run."""
        c, status, meta = self.cluster, job["status"], job["metadata"]
        ref = f"{meta['namespace']}/{meta['name']}"
        pods, launched = c.owned(launcher), launcher["status"]
        running = sum(p.phase == "Running" for p in pods)
        counts = {"failed": launched.get("failed", 0)}
        if true(launched, "Complete"):
            counts["succeeded"] = 1
            c.event(job, "MPIJobSucceeded", f"MPIJob {ref} successfully completed.")
            with c.lock:
                status.setdefault("completionTime", launched.get("completionTime") or now())
                set_job_condition(status, "Succeeded", "MPIJobSucceeded", f"MPIJob {ref} successfully completed.")
        elif true(launched, "Failed"):
            self._launcher_failed(job, ref, launched, pods)
        else:
            counts["active"] = running
        with c.lock:
            status.setdefault("replicaStatuses", {})["Launcher"] = {k: v for k, v in counts.items() if v}
        return running

    def _launcher_failed(self, job: dict, ref: str, launched: dict, pods: list[Pod]) -> None:
        failed = next(cond for cond in launched["conditions"] if cond["type"] == "Failed")
        reason = failed.get("reason") or "MPIJobFailed"
        message = failed.get("message") or f"MPIJob {ref} has failed"
        last = max(
            (p for p in pods if p.phase == "Failed"), default=None, key=lambda p: p.obj["metadata"]["creationTimestamp"]
        )
        if reason == "BackoffLimitExceeded" and last:
            reason += "/" + last.obj["status"].get("reason", "")
            message += ": " + last.obj["status"].get("message", "")
        self.cluster.event(job, reason, message, "Warning")
        with self.cluster.lock:
            job["status"].setdefault("completionTime", now())
            set_job_condition(job["status"], "Failed", reason, message)
