"""Kubernetes launcher: a stage runs as the objects of ``k8s_objects`` (native Indexed Jobs, or for the train
stage a Kubeflow TFJob / MPIJob when ``kubernetes.operator`` and the cluster's CRDs say so), named from the
run's identity. ``start`` creates them, or finds those of an earlier try (by the identity kept in the
task's state store, else by labels) and follows them instead of starting a second set. ``follow`` polls
them through the cncf provider's async hook, relays every pod's log as ``[member]`` lines (resumed after
the last line seen, by timestamp), and returns the stage's result record from the result pod's
termination message; it runs in the task process (``run``) or in the triggerer (``StageTrigger``), so a
multi-hour stage holds no worker slot. The stage's objects are deleted when it ends, fails, or is killed
(the task's ``on_kill``, or the trigger's ``on_kill`` when a user kills the deferred task)."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import functools
import json
import logging
import math
import re
import signal
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import aiohttp
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import TRANSIENT_STATUS_CODES, generic_api_retry
from airflow.triggers.base import BaseTrigger, TriggerEvent
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from tfdist.operators.launchers.base import TAIL_LINES, Launcher, StageFailed, StageStopped, restart_record, shrunk
from tfdist.operators.launchers.k8s_objects import identity, label_value, stage_objects
from tfdist.operators.plan import Plan, Stage
from tfdist.trainer.contract import EXIT_HUNG, EXIT_REFUSED, split_rank_tags

POLL_SECONDS = 2.0
API_OUTAGE_SECONDS = 300
"""How long ``follow`` keeps polling an API that does not answer (dropped connections, 429, 5xx) before it
gives up; the stage's objects are left running then, for the task's retry to follow."""
LOG_OVERLAP_SECONDS = 30
"""Each log poll asks for this much more than the time since the last line relayed, so that a clock skew
between Airflow and the nodes up to it loses no line (lines already relayed are skipped by timestamp)."""
STORE_KEY = "kubernetes_objects"
"""The task's state-store key naming the objects a try created: every later try of the task reads it."""


@dataclass(frozen=True)
class Kind:
    """A kind of object whose conditions end a stage, reached through the API's custom-objects calls (which serve
    any group's resources, batch/v1 Jobs included)."""

    group: str
    version: str
    plural: str
    job_label: str
    """The label naming the job on its pods."""

    def path(self, namespace: str) -> tuple[str, str, str, str]:
        """(group, version, namespace, plural): the leading arguments of every custom-objects call."""
        return self.group, self.version, namespace, self.plural


KINDS = {"Job": Kind("batch", "v1", "jobs", "batch.kubernetes.io/job-name"),
         "TFJob": Kind("kubeflow.org", "v1", "tfjobs", "training.kubeflow.org/job-name"),
         "MPIJob": Kind("kubeflow.org", "v2beta1", "mpijobs", "training.kubeflow.org/job-name")}
DONE = {"Complete": "success", "Succeeded": "success", "Failed": "failed"}
"""The conditions ending a Job (Complete, Failed) or a Kubeflow job (Succeeded, Failed)."""
FAIL_JOB_POD = re.compile(r"(?:Container \S+ for pod|Pod) [^/\s]+/(?P<pod>\S+) "
                          r"(?:failed with exit code (?P<code>-?\d+)|has condition \w+) matching FailJob rule")
"""The pod a Job's pod failure policy failed it for, as the Job controller's condition message names it."""


@dataclass(frozen=True)
class Watch:
    """What following a started stage needs; plain data, so that a trigger carries it."""

    connection_id: str
    namespace: str
    task_id: str
    kind: str
    """Job, TFJob or MPIJob: the object whose conditions end the stage."""
    name: str
    objects: tuple[tuple[str, str], ...]
    """(kind, name) of every object of the stage, in creation order."""
    members: tuple[str, ...]
    """Job: the stage's member at each completion index."""
    rank_tagged: bool
    """Horovod pods (and an MPIJob's launcher) print rank-tagged lines."""
    result_member: str
    """The member whose termination message is the stage's result record."""
    startup_timeout_seconds: int

    def to_dict(self) -> dict[str, Any]:
        """As JSON values (what the task state store and a trigger's kwargs hold)."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Watch:
        return cls(**{**data, "objects": tuple(map(tuple, data["objects"])), "members": tuple(data["members"])})

    @property
    def selector(self) -> str:
        return f"{KINDS[self.kind].job_label}={self.name}"

    def member(self, pod: Any) -> str:
        """Which member of the stage the pod is."""
        if self.kind == "Job":
            return self.members[int(pod.metadata.annotations["batch.kubernetes.io/job-completion-index"])]
        labels = pod.metadata.labels
        if self.kind == "MPIJob":  # the MPI operator labels a role, and an index on workers only
            return f"{labels['training.kubeflow.org/job-role']}-{labels.get('training.kubeflow.org/replica-index', 0)}"
        return f"{labels['training.kubeflow.org/replica-type'].lower()}-{labels['training.kubeflow.org/replica-index']}"

    def named_member(self, pod_name: str) -> str:
        """The Job's member whose pod had this name (``<job>-<index>-<suffix>``, as Indexed Jobs name pods)."""
        return self.members[int(pod_name.removeprefix(f"{self.name}-").split("-", 1)[0])]

    def tagged(self, member: str) -> bool:
        return self.rank_tagged and (self.kind == "Job" or member.startswith("launcher"))


class KubernetesLauncher(Launcher):
    def __init__(self, plan: Plan, try_number: int = 1) -> None:
        super().__init__(plan, try_number)
        self.settings = plan.spec.kubernetes
        self.watch: Watch | None = None
        self._stop_requested = False

    @functools.cached_property
    def api_client(self) -> client.ApiClient:
        return KubernetesHook(conn_id=self.settings.connection_id).api_client

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @functools.cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def installed(self, kind: str) -> bool:
        """Whether the cluster serves the Kubeflow kind (API discovery: its CRD is installed)."""
        found = KINDS[kind]
        try:
            resources = self.custom.get_api_resources(found.group, found.version).resources
            return any(r.name == found.plural for r in resources)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def kubeflow_kind(self, stage: Stage) -> str | None:
        """TFJob or MPIJob when the train stage runs as one (``kubernetes.operator``), else None."""
        if self.settings.operator == "native" or not stage.sync:
            return None
        kind = "TFJob" if stage.sync == "tf_cluster" else "MPIJob"
        if self.installed(kind):
            return kind
        if self.settings.operator == "kubeflow":
            missing = KINDS[kind]
            raise StageFailed(f"{stage.task_id}", EXIT_REFUSED, {}, how=f"cannot run as a {kind}", detail=(
                f"kubernetes.operator is 'kubeflow' but the cluster does not serve "
                f"{missing.plural}.{missing.group}/{missing.version} "
                "(install Kubeflow's training operator, or use operator 'auto' or 'native')"))
        return None

    def watch_for(self, stage: Stage, kind: str, objects: list[dict]) -> Watch:
        members = tuple(m.name for m in stage.members)
        if not stage.sync:  # a stage's writers, one pod each (k8s_objects)
            role = stage.members[0].role
            members = tuple(f"{role}-{index}" for index in range(objects[-1]["spec"]["completions"]))
        result = "launcher-0" if kind == "MPIJob" else members[0]  # the chief, worker 0, or pod 0
        return Watch(self.settings.connection_id, self.settings.namespace, stage.task_id, kind,
                     objects[-1]["metadata"]["name"], tuple((o["kind"], o["metadata"]["name"]) for o in objects),
                     members, stage.sync == "horovod", result, self.settings.startup_timeout_seconds)

    @generic_api_retry
    def read(self, kind: str, name: str) -> Any | None:
        """The object's status as the cluster has it, or None when there is no such object."""
        try:
            path = KINDS[kind].path(self.settings.namespace)
            return self.custom.get_namespaced_custom_object(*path, name).get("status") or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def find(self, stage: Stage, watch: Watch, store: Any) -> Watch | None:
        """The stage's objects made by an earlier try: those named in the task's state store, else the
        ones carrying this run's and stage's labels."""
        known = store.get(STORE_KEY) if store is not None else None
        if known:
            earlier = Watch.from_dict(known)
            return earlier if self.read(earlier.kind, earlier.name) is not None else None
        ctx = self.plan.context
        labels, _ = identity(self.plan.spec, ctx.dag_id, ctx.run_id, stage.task_id, self.try_number)
        selector = ",".join(f"{k}={label_value(labels[k])}" for k in ("tfdist/dag-id", "tfdist/run-id", "tfdist/task-id"))
        listed = generic_api_retry(self.custom.list_namespaced_custom_object)(
            *KINDS[watch.kind].path(watch.namespace), label_selector=selector)
        return watch if watch.name in [o["metadata"]["name"] for o in listed["items"]] else None

    def submit(self, objects: list[dict], log: logging.Logger) -> None:
        """Create the stage's objects, in order."""
        ns = self.settings.namespace
        for obj in objects:
            if obj["kind"] == "Service":
                generic_api_retry(self.core.create_namespaced_service)(ns, obj)
            else:
                generic_api_retry(self.custom.create_namespaced_custom_object)(*KINDS[obj["kind"]].path(ns), obj)
            log.info("created %s %s/%s", obj["kind"], ns, obj["metadata"]["name"])

    def wait_gone(self, watch: Watch, timeout: float = 120) -> None:
        """Return once the deleted object is gone (a foreground deletion waits for its pods), so that its
        name is free again."""
        deadline = time.monotonic() + timeout
        while self.read(watch.kind, watch.name) is not None:
            if time.monotonic() > deadline:
                raise StageFailed(f"{watch.kind} {watch.name}", None, {}, how=f"was not deleted within {timeout:.0f} s")
            time.sleep(1)

    def start(self, stage: Stage, log: logging.Logger, store: Any = None) -> Watch:
        """Create the stage's objects, or find those of an earlier try still running (a failed or finished
        one is deleted and the stage starts again: training resumes from the run's latest checkpoint)."""
        kind = self.kubeflow_kind(stage) or "Job"
        objects = stage_objects(self.plan, stage, self.try_number, kubeflow=kind != "Job")
        watch = self.watch_for(stage, kind, objects)
        earlier = self.find(stage, watch, store)
        if earlier is not None:
            status = self.read(earlier.kind, earlier.name) or {}
            ended = [c["type"] for c in status.get("conditions") or [] if c["type"] in DONE and c["status"] == "True"]
            if not ended:
                log.info("following %s %s started by an earlier try", earlier.kind, earlier.name)
                self.watch = earlier
                return earlier
            log.warning("%s %s of an earlier try is %s: deleting it and starting again", earlier.kind, earlier.name,
                        ended[0])
            run_in_thread(delete_objects(earlier, log))
            self.wait_gone(earlier)
        if self._stop_requested:
            raise StageStopped(f"{stage.task_id} stopped before its Kubernetes objects were created")
        self.watch = watch
        self.submit(objects, log)
        if store is not None:
            store.set(STORE_KEY, watch.to_dict())
        return watch

    def start_deferred(self, stage: Stage, log: logging.Logger, store: Any) -> StageTrigger:
        return StageTrigger(self.start(stage, log, store).to_dict())

    def continue_deferred(self, stage: Stage, event: dict[str, Any], log: logging.Logger,
                          store: Any) -> StageTrigger | None:
        restarts = list(event.get("restarts", []))
        current = stage.with_workers(restarts[-1]["workers_after"]) if restarts else stage
        lost = tuple(event.get("lost", ()))
        smaller = shrunk(current, lost, restarts, stage.elastic)
        if smaller is None:
            return None
        restart_record(current, smaller, lost, event["summary"], restarts, log)
        return StageTrigger(self.start(smaller, log, store).to_dict(), restarts)

    def run_once(self, stage: Stage, log: logging.Logger, restarts: list[dict]) -> dict[str, Any]:
        return asyncio.run(follow(self.start(stage, log), log, lambda: self._stop_requested))

    def stop(self) -> None:
        self._stop_requested = True
        if self.watch is not None:
            run_in_thread(delete_objects(self.watch))


def run_in_thread(coroutine: Any) -> None:
    """Run a coroutine to its end from synchronous code, even code called inside a running event loop."""
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: failure.extend(_outcome(coroutine)))
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _outcome(coroutine: Any) -> list[BaseException]:
    try:
        asyncio.run(coroutine)
    except Exception as exc:  # noqa: BLE001 - handed back to the calling thread
        return [exc]
    return []


async def follow(watch: Watch, log: logging.Logger, stopped: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Relay the stage's pod logs until it ends; its result record, or StageFailed naming the pod and why.
    The stage's objects are deleted when it ends either way. An API that stops answering for a while is
    polled again, up to API_OUTAGE_SECONDS."""
    hook = AsyncKubernetesHook(conn_id=watch.connection_id)
    seen: dict[str, tuple[tuple[str, str], int]] = {}  # pod → (last timestamp relayed, lines relayed at it)
    tails: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=TAIL_LINES))
    outage: float | None = None  # when the API stopped answering
    while True:
        if stopped():
            raise StageStopped(f"{watch.task_id} stopped: its Kubernetes objects were deleted")
        try:
            async with hook.get_conn() as api:
                conditions = await _conditions(api, watch)
                pods = (await async_client.CoreV1Api(api).list_namespaced_pod(watch.namespace,
                                                                             label_selector=watch.selector)).items
            for pod in pods:
                await _relay(hook, watch, pod, seen, tails, log)
        except (aiohttp.ClientError, asyncio.TimeoutError, AsyncApiException) as exc:
            if isinstance(exc, AsyncApiException) and exc.status not in TRANSIENT_STATUS_CODES:
                raise
            if outage is None:
                outage = time.monotonic()
                log.warning("the Kubernetes API did not answer (%s): polling again every %.0f s", exc, POLL_SECONDS)
            elif time.monotonic() - outage > API_OUTAGE_SECONDS:
                raise StageFailed(f"{watch.kind} {watch.name}", None, dict(tails), how="could not be followed",
                                  detail=f"the Kubernetes API did not answer for {API_OUTAGE_SECONDS} s ({exc}); "
                                         "its objects were left running for the task's retry to follow") from exc
            await asyncio.sleep(POLL_SECONDS)
            continue
        if outage is not None:
            log.info("the Kubernetes API answers again after %.0f s", time.monotonic() - outage)
            outage = None
        ended = next((c for c in conditions if c["type"] in DONE and c["status"] == "True"), None)
        if ended and DONE[ended["type"]] == "success":
            result = _result(watch, pods, tails)
            await delete_objects(watch, log)
            return result
        if ended:
            await delete_objects(watch, log)
            raise _failure(watch, ended, pods, tails)
        if late := _not_started(watch, pods):
            events = (await hook.get_pod_events(late.metadata.name, watch.namespace)).items
            await delete_objects(watch, log)
            waiting = [f"{s.state.waiting.reason}: {s.state.waiting.message}" for s in late.status.container_statuses or []
                       if s.state and s.state.waiting and s.state.waiting.reason]
            reasons = "; ".join(dict.fromkeys(waiting + [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"]))
            raise StageFailed(f"{watch.member(late)} (pod {late.metadata.name})", None, dict(tails),
                              how=f"was not running after {watch.startup_timeout_seconds} s "
                                  "(kubernetes.startup_timeout_seconds)", detail=reasons or "no warning event")
        await asyncio.sleep(POLL_SECONDS)


async def _conditions(api: Any, watch: Watch) -> list[dict[str, Any]]:
    obj = await async_client.CustomObjectsApi(api).get_namespaced_custom_object(*KINDS[watch.kind].path(
        watch.namespace), watch.name)
    return (obj.get("status") or {}).get("conditions") or []


def _not_started(watch: Watch, pods: list) -> Any | None:
    """A pod still Pending startup_timeout_seconds after it was created, if any."""
    now = dt.datetime.now(dt.timezone.utc)
    return next((p for p in pods if p.status.phase == "Pending" and
                 (now - p.metadata.creation_timestamp).total_seconds() > watch.startup_timeout_seconds), None)


def _stamp(text: str) -> tuple[str, str]:
    """A log line's timestamp as a sortable key (the fraction padded to nanoseconds: RFC 3339 trims zeros)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    return whole, fraction.ljust(9, "0")


async def _relay(hook: AsyncKubernetesHook, watch: Watch, pod: Any, seen: dict, tails: dict,
                 log: logging.Logger) -> None:
    """Relay the pod's log lines after the last one seen, by their timestamps (and, for lines sharing the
    last timestamp, how many of them were relayed), so that a dropped connection or a new poll neither loses
    nor repeats a line."""
    name = pod.metadata.name
    if pod.status.phase == "Pending":
        return
    last, relayed_at_last = seen.get(name, (None, 0))
    since = None
    if last:
        age = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(last[0]).replace(tzinfo=dt.timezone.utc)
        since = max(1, math.ceil(age.total_seconds())) + LOG_OVERLAP_SECONDS
    try:
        lines = await hook.read_logs(name, watch.namespace, since_seconds=since)
    except AsyncApiException as exc:
        if exc.status == 400:  # the container is not started yet
            return
        raise
    member, skip = watch.member(pod), relayed_at_last
    for line in lines:
        stamp, _, text = line.partition(" ")
        key = _stamp(stamp)
        if last and (key < last or (key == last and skip > 0)):
            skip -= key == last
            continue
        previous, count = seen.get(name, (None, 0))
        seen[name] = (key, count + 1 if previous == key else 1)
        for source, piece in split_rank_tags(member, text) if watch.tagged(member) else [(member, text)]:
            tails[source].append(piece)
            log.info("[%s] %s", source, piece)


def _terminated(pod: Any) -> Any | None:
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses and statuses[0].state else None


def _result(watch: Watch, pods: list, tails: dict) -> dict[str, Any]:
    """The result record the result pod handed back as its termination message."""
    pod = next((p for p in pods if watch.member(p) == watch.result_member and _terminated(p)), None)
    message = _terminated(pod).message if pod else None
    try:
        return json.loads(message)
    except (TypeError, ValueError):
        raise StageFailed(f"{watch.result_member}" + (f" (pod {pod.metadata.name})" if pod else ""), None, dict(tails),
                          how="ended without handing back the stage's result record",
                          detail=f"termination message {message!r}") from None


def _failure(watch: Watch, ended: dict, pods: list, tails: dict) -> StageFailed:
    """The pod the Job's failure names (else the first that failed), how it ended (exit code, OOMKilled,
    eviction, the hang it found, deleted) and the job's reason; a pod disrupted (evicted, preempted, its node
    gone), deleted, stopped by a signal other than for memory, or hung counts as lost (an elastic stage may
    continue without it)."""
    job = f"{watch.kind} {watch.name} failed: {ended.get('reason')}: {ended.get('message')}"
    failed = [p for p in pods if p.status.phase == "Failed" and _terminated(p)]
    named = FAIL_JOB_POD.search(ended.get("message") or "") if watch.kind == "Job" else None
    if named and not any(p.metadata.name == named["pod"] for p in failed):
        # the pod was deleted (by a user, a drain, the pod garbage collector for a lost node), then counted and
        # let go by the Job controller: the Job's message is what is left of it
        member = watch.named_member(named["pod"])
        return StageFailed(f"{member} (pod {named['pod']})", int(named["code"]) if named["code"] else None,
                           {member: list(tails.pop(member, []))} | dict(tails), how="was deleted (it is gone)",
                           detail=job, lost=(member,))
    if not failed:
        return StageFailed(f"{watch.kind} {watch.name}", None, dict(tails), how="failed",
                           detail=f"{ended.get('reason')}: {ended.get('message')}")
    pod = next((p for p in failed if named and p.metadata.name == named["pod"]), None) or min(
        failed, key=lambda p: _terminated(p).finished_at or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    terminated, member = _terminated(pod), watch.member(pod)
    ordered = {member: list(tails.pop(member, []))} | dict(tails)
    why = f", {terminated.reason}" if terminated.reason not in (None, "Error", "Completed") else ""
    if terminated.reason == "OOMKilled":
        limit = (pod.spec.containers[0].resources.limits or {}).get("memory")
        why += f": it used more than its memory limit {limit} (kubernetes.pods.memory or roles.<role>.memory)"
    disrupted = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget" and c.status == "True"),
                     None)
    how = f"was disrupted ({disrupted.reason}: {disrupted.message})" if disrupted else None
    if terminated.exit_code == EXIT_HUNG:
        how = f"stopped the hung stage: {terminated.message.strip()}"
    killed = terminated.exit_code in (128 + signal.SIGKILL, 128 + signal.SIGTERM) and terminated.reason != "OOMKilled"
    return StageFailed(f"{member} (pod {pod.metadata.name}{why})", terminated.exit_code, ordered, how=how, detail=job,
                       lost=(member,) if disrupted or killed or terminated.exit_code == EXIT_HUNG else ())


async def delete_objects(watch: Watch, log: logging.Logger | None = None) -> None:
    """Delete the stage's objects (their pods with them), newest first; those already gone are skipped."""
    async with AsyncKubernetesHook(conn_id=watch.connection_id).get_conn() as api:
        for kind, name in reversed(watch.objects):
            try:
                if kind == "Service":
                    await async_client.CoreV1Api(api).delete_namespaced_service(name, watch.namespace)
                else:
                    await async_client.CustomObjectsApi(api).delete_namespaced_custom_object(
                        *KINDS[kind].path(watch.namespace), name, propagation_policy="Foreground")
            except AsyncApiException as exc:
                if exc.status != 404:
                    raise
                continue
            if log:
                log.info("deleted %s %s/%s", kind, watch.namespace, name)


class StageTrigger(BaseTrigger):
    """Follows a stage's Kubernetes objects from the triggerer (``follow``): one event with the result
    record or the failure (with what was lost, for an elastic restart). ``restarts``: the elastic restarts
    before these objects. A user killing the deferred task deletes the objects (``on_kill``); a triggerer
    restart does not (the next triggerer follows on)."""

    def __init__(self, watch: dict[str, Any], restarts: list[dict] = ()) -> None:
        super().__init__()
        self.watch, self.restarts = watch, list(restarts)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"watch": self.watch, "restarts": self.restarts}

    async def run(self):
        try:
            result = await follow(Watch.from_dict(self.watch), self.log)
        except StageFailed as exc:
            yield TriggerEvent({"status": "failed", "returncode": exc.returncode, "message": str(exc),
                                "summary": exc.summary, "lost": list(exc.lost), "restarts": self.restarts})
            return
        yield TriggerEvent({"status": "success",
                            "result": {**result, "elastic_restarts": self.restarts} if self.restarts else result})

    async def on_kill(self) -> None:
        await delete_objects(Watch.from_dict(self.watch), self.log)
