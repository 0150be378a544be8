"""Kubernetes launcher: a stage runs as the objects of ``k8s_objects`` (native Indexed Jobs), named from
the run's identity so that a retry of the task finds the Job of an earlier try and follows it instead of
starting a second one. Clients come from the cncf provider's ``KubernetesHook`` (the spec's
``kubernetes.connection_id``). Every pod's log reaches the task log as ``[member]`` lines, resumed from
the last line seen after each poll; ``stop`` (the task's on_kill) deletes everything the stage created."""

from __future__ import annotations

import collections
import datetime as dt
import functools
import logging
import math
import time
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operators.launchers.base import Launcher, StageFailed, StageStopped
from operators.launchers.k8s_objects import object_name, stage_objects
from operators.launchers.local import TAIL_LINES, split_rank_tags
from operators.plan import RunContext, Stage
from operators.spec import Spec

POLL_SECONDS = 2.0


def _finished(job: Any) -> str | None:
    """'Complete' or 'Failed' once the Job has that condition, else None."""
    return next((c.type for c in job.status.conditions or [] if c.type in ("Complete", "Failed") and c.status == "True"),
                None)


class KubernetesLauncher(Launcher):
    def __init__(self, spec: Spec, ctx: RunContext, try_number: int = 1) -> None:
        self.spec, self.ctx, self.try_number = spec, ctx, try_number
        self.namespace = spec.kubernetes.namespace
        self._created: list[tuple[str, str]] = []
        self._stop_requested = False

    @functools.cached_property
    def api_client(self) -> client.ApiClient:
        return KubernetesHook(conn_id=self.spec.kubernetes.connection_id).api_client

    @functools.cached_property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client)

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def find(self, name: str) -> Any | None:
        """The Job of this run's stage left by an earlier try, or None."""
        try:
            return self.batch.read_namespaced_job_status(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def submit(self, objects: list[dict], log: logging.Logger) -> None:
        """Create the stage's objects, in order."""
        for obj in objects:
            create = self.core.create_namespaced_service if obj["kind"] == "Service" else self.batch.create_namespaced_job
            create(self.namespace, obj)
            log.info("created %s %s/%s", obj["kind"], self.namespace, obj["metadata"]["name"])

    def run(self, stage: Stage, log: logging.Logger) -> None:
        name = object_name(self.ctx.dag_id, self.ctx.run_id, stage.task_id)
        objects = stage_objects(self.spec, stage, self.ctx.dag_id, self.ctx.run_id, self.try_number)
        self._created = [(o["kind"], o["metadata"]["name"]) for o in objects]
        earlier = self.find(name)
        if earlier is not None and _finished(earlier) != "Complete":
            if _finished(earlier) == "Failed":
                log.warning("Job %s of an earlier try failed: deleting it and starting again", name)
                self.delete(log)
                earlier = None
            else:
                log.info("following Job %s started by an earlier try", name)
        if self._stop_requested:
            raise StageStopped(f"{stage.task_id} stopped before its Kubernetes objects were created")
        if earlier is None:
            self.submit(objects, log)
        self._follow(stage, name, log)

    def _follow(self, stage: Stage, name: str, log: logging.Logger) -> None:
        seen: dict[str, str] = {}  # pod → timestamp of the last log line relayed
        tails: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=TAIL_LINES))
        started = time.monotonic()
        while True:
            if self._stop_requested:
                raise StageStopped(f"{stage.task_id} stopped: its Kubernetes objects were deleted")
            job = self.batch.read_namespaced_job_status(name, self.namespace)
            pods = self.core.list_namespaced_pod(self.namespace,
                                                 label_selector=f"batch.kubernetes.io/job-name={name}").items
            for pod in pods:
                self._relay(stage, pod, seen, tails, log)
            outcome = _finished(job)
            if outcome == "Complete":
                self.delete(log)
                return
            if outcome == "Failed":
                self.delete(log)
                raise self._failure(stage, job, pods, tails)
            pending = [p.metadata.name for p in pods if p.status.phase == "Pending"]
            if pending and time.monotonic() - started > self.spec.kubernetes.startup_timeout_seconds:
                reasons = self._events(pending[0])
                self.delete(log)
                raise StageFailed(f"pod {pending[0]}", None, dict(tails), how=f"was not running after "
                                  f"{self.spec.kubernetes.startup_timeout_seconds} s (kubernetes.startup_timeout_seconds)",
                                  detail=reasons or "no warning event")
            time.sleep(POLL_SECONDS)

    @staticmethod
    def _member(stage: Stage, pod: Any) -> str:
        """Which process of the stage the pod is: TF cluster members are in completion-index order."""
        index = int(pod.metadata.annotations["batch.kubernetes.io/job-completion-index"])
        return f"pod-{index}" if stage.rank_command else stage.processes[index].name

    def _relay(self, stage: Stage, pod: Any, seen: dict, tails: dict, log: logging.Logger) -> None:
        """Relay the pod's log lines after the last one seen (by their timestamps: a dropped connection or
        a new poll neither loses nor repeats a line)."""
        name, last = pod.metadata.name, seen.get(pod.metadata.name)
        if pod.status.phase == "Pending":
            return
        since = None
        if last:
            age = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(last.replace("Z", "+00:00"))
            since = max(1, math.ceil(age.total_seconds()) + 1)
        try:
            response = self.core.read_namespaced_pod_log(name, self.namespace, timestamps=True, since_seconds=since,
                                                         _preload_content=False)  # kubernetes#2596: never preload
        except ApiException as exc:
            if exc.status == 400:  # the container is not started yet
                return
            raise
        member = self._member(stage, pod)
        for line in response.data.decode(errors="replace").splitlines():
            stamp, _, text = line.partition(" ")
            if last and stamp <= last:
                continue
            seen[name] = stamp
            for source, piece in split_rank_tags(member, text) if stage.rank_command else [(member, text)]:
                tails[source].append(piece)
                log.info("[%s] %s", source, piece)

    def _events(self, pod_name: str) -> str:
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={pod_name}").items
        return "; ".join(f"{e.reason}: {e.message}" for e in events if e.type == "Warning")

    def _failure(self, stage: Stage, job: Any, pods: list, tails: dict) -> StageFailed:
        """The failed pod, how it ended (exit code, OOMKilled, eviction) and the Job's reason."""
        condition = next(c for c in job.status.conditions if c.type == "Failed")
        failed = [p for p in pods if p.status.phase == "Failed" and p.status.container_statuses]
        if not failed:
            return StageFailed(f"Job {job.metadata.name}", None, dict(tails), how="failed",
                               detail=f"{condition.reason}: {condition.message}")
        pod = min(failed, key=lambda p: p.status.container_statuses[0].state.terminated.finished_at or "")
        terminated = pod.status.container_statuses[0].state.terminated
        member = self._member(stage, pod)
        ordered = {member: list(tails.pop(member, []))} | dict(tails)
        why = f", {terminated.reason}" if terminated.reason not in (None, "Error", "Completed") else ""
        disrupted = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget" and c.status == "True"),
                         None)
        how = f"was disrupted ({disrupted.reason}: {disrupted.message})" if disrupted else None
        return StageFailed(f"{member} (pod {pod.metadata.name}{why})", terminated.exit_code, ordered, how=how,
                           detail=f"Job {job.metadata.name} failed: {condition.reason}: {condition.message}")

    def delete(self, log: logging.Logger | None = None) -> None:
        for kind, name in reversed(self._created):
            delete = self.core.delete_namespaced_service if kind == "Service" else self.batch.delete_namespaced_job
            try:
                delete(name, self.namespace, propagation_policy="Foreground")
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            if log:
                log.info("deleted %s %s/%s", kind, self.namespace, name)

    def stop(self) -> None:
        self._stop_requested = True
        self.delete()
