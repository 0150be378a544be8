"""Following a started stage to its end: its objects' conditions and pods, read through the cncf provider's
async hook every POLL_SECONDS, every pod's log relayed as ``[member]`` lines (resumed after the last line seen,
by timestamp); the end is the stage's result record, or StageFailed naming the pod and why. It runs in the task
process (``KubernetesLauncher.run``) or in the triggerer (``StageTrigger``)."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import math
import time
from typing import Any, Callable

import aiohttp
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import TRANSIENT_STATUS_CODES
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from tfdist.operators.launchers.base import TAIL_LINES, StageFailed, StageStopped
from tfdist.operators.launchers.k8s_api import DONE, KINDS, Watch, delete_objects
from tfdist.operators.launchers.k8s_diagnosis import failure, result_record
from tfdist.trainer.contract import split_rank_tags

POLL_SECONDS = 2.0
API_OUTAGE_SECONDS = 300
"""How long ``follow`` keeps polling an API that does not answer (dropped connections, 429, 5xx) before it
gives up; the stage's objects are left running then, for the task's retry to follow."""
LOG_OVERLAP_SECONDS = 30
"""Each log poll asks for this much more than the time since the last line relayed, so that a clock skew
between Airflow and the nodes up to it loses no line (lines already relayed are skipped by timestamp)."""


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
            result = result_record(watch, pods, tails)
            await delete_objects(watch, log)
            return result
        if ended:
            await delete_objects(watch, log)
            raise failure(watch, ended, pods, tails)
        if late := _not_started(watch, pods):
            events = (await hook.get_pod_events(late.metadata.name, watch.namespace)).items
            await delete_objects(watch, log)
            waiting = [f"{s.state.waiting.reason}: {s.state.waiting.message}" for s in late.status.container_statuses
                       or [] if s.state and s.state.waiting and s.state.waiting.reason]
            warnings = [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"]
            reasons = "; ".join(dict.fromkeys(waiting + warnings))
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
