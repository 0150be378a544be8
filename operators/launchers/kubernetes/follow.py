"""Following a started stage to its end, at a cost that does not grow with its pods: one client for the whole
follow, two watches (the object whose conditions end the stage, and its pods), and one streamed log per relayed
member. The end and any failure come from the watch events, never from reading logs; a relayed log line reaches
the task log exactly once, also across a dropped stream (resumed after the last line's timestamp). It runs in
the task process (``KubernetesLauncher.run``) or in the triggerer (``StageTrigger``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import json
import math
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import TRANSIENT_STATUS_CODES
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from tfdist.contract.launch import split_rank_tags
from tfdist.operators.launchers.base import TAIL_LINES, StageFailed, StageLog, StageStopped
from tfdist.operators.launchers.kubernetes.api import DONE, KINDS, Watch, delete_objects
from tfdist.operators.launchers.kubernetes.diagnosis import (
    culprit,
    failure,
    name_of,
    not_started,
    result_record,
    start_failure,
    termination,
)

WATCH_SECONDS = 300
"""Each watch request asks the API server to end it after this long; it is then resumed from its last version."""
POLL_SECONDS = 2.0
"""Where a watch cannot be had (the API refuses it), the objects are listed this often instead."""
RETRY_SECONDS = 1.0
API_OUTAGE_SECONDS = 300
"""How long a follow keeps trying an API that does not answer (dropped connections, 429, 5xx) before it gives
up; the stage's objects are left running then, for the task's retry to follow."""
MAX_STREAMS = 32
"""At most this many logs stream at once (``kubernetes.log_members: all`` on a large stage)."""
DRAIN_SECONDS = 10.0
"""Once the stage ended, how long its relayed logs may take to deliver their last lines."""
LOG_OVERLAP_SECONDS = 30
"""A log stream resumed after a drop asks for this much more than the time since its last line, so that a clock
skew between Airflow and the nodes up to it loses no line (lines already relayed are skipped by timestamp)."""


def _stamp(text: str) -> tuple[str, str]:
    """A log line's timestamp as a sortable key (the fraction padded to nanoseconds: RFC 3339 trims zeros)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    return whole, fraction.ljust(9, "0")


async def _opened(request: Any) -> aiohttp.ClientResponse:
    """The raw response of a request made with ``_preload_content=False`` (which the client hands back whatever
    its status), or the API's error with its Status message."""
    response = await request
    if not 200 <= response.status <= 299:
        body = (await response.read()).decode(errors="replace")
        response.release()
        with contextlib.suppress(ValueError, AttributeError):
            body = json.loads(body)["message"]  # a Status object's
        raise AsyncApiException(status=response.status, reason=body[:300])
    return response


class Follower:
    """The state of one follow: the ending object's conditions and the pods (by name) as the watches last
    delivered them, each pod's last relayed timestamp, the last lines of every source."""

    def __init__(self, watch: Watch, api: Any, log: StageLog) -> None:
        self.watch, self.api, self.log = watch, api, log
        self.core, self.custom = async_client.CoreV1Api(api), async_client.CustomObjectsApi(api)
        self.conditions: list[dict] = []
        self.gone = False
        self.pods: dict[str, dict] = {}
        self.changed = asyncio.Event()
        self.seen: dict[str, tuple[tuple[str, str], int]] = {}  # pod → (last timestamp relayed, lines at it)
        self.tails: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=TAIL_LINES))
        self.streams: dict[str, asyncio.Task] = {}
        self.limit = asyncio.Semaphore(MAX_STREAMS)
        self.answered = time.monotonic()
        self.outage: BaseException | None = None

    # watches -----------------------------------------------------------------------------------------

    def watch_object(self) -> Any:
        kind, ns = KINDS[self.watch.kind], self.watch.following.namespace
        return self._follow_list(
            lambda **kw: self.custom.list_namespaced_custom_object(
                *kind.path(ns), field_selector=f"metadata.name={self.watch.name}", **kw
            ),
            self._object_listed,
            self._on_object,
        )

    def watch_pods(self) -> Any:
        return self._follow_list(self._list_pods, self._pods_listed, self._on_pod)

    def _list_pods(self, **kw: Any) -> Any:
        return self.core.list_namespaced_pod(self.watch.following.namespace, label_selector=self.watch.selector, **kw)

    def _object_listed(self, items: list[dict]) -> None:
        self._on_object("ADDED", items[0]) if items else self._on_object("DELETED", {})

    def _on_object(self, kind: str, obj: dict) -> None:
        """The object's conditions; a deleted object keeps its last ones (it may have ended first)."""
        self.gone = kind == "DELETED"
        self.conditions = (obj.get("status") or {}).get("conditions") or self.conditions

    def _pods_listed(self, items: list[dict]) -> None:
        self.pods = {name_of(pod): pod for pod in items}
        self._start_streams()

    def _pods_relisted(self, items: list[dict]) -> None:
        self.pods.update({name_of(pod): pod for pod in items})
        self._start_streams()

    def _on_pod(self, kind: str, pod: dict) -> None:
        if kind == "DELETED":
            self.pods.pop(name_of(pod), None)
        else:
            self.pods[name_of(pod)] = pod
        self._start_streams()

    async def _follow_list(
        self, call: Callable[..., Any], on_list: Callable[[list[dict]], None], on_change: Callable[[str, dict], None]
    ) -> None:
        """List, then watch from the list's version, forever: a watch that ends is resumed from its last
        version, one whose version is gone (410) lists again, one the API refuses (403, 405) becomes a poll."""
        version, polling = None, False
        while True:
            try:
                if version is None or polling:
                    version = await self._list(call, on_list)
                if polling:
                    await asyncio.sleep(POLL_SECONDS)
                    continue
                version = await self._watch(call, on_change, version)
            except AsyncApiException as exc:
                if exc.status == 410:
                    version = None
                elif exc.status in (403, 405) and not polling:
                    polling = True
                    self.log.warning(
                        "the Kubernetes API refuses to watch (%s %s): listing every %.0f s instead",
                        exc.status,
                        exc.reason,
                        POLL_SECONDS,
                    )
                elif exc.status in TRANSIENT_STATUS_CODES:
                    await self._unanswered(exc)
                else:
                    raise
            except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                await self._unanswered(exc)

    async def _list(self, call: Callable[..., Any], on_list: Callable[[list[dict]], None]) -> str:
        response = await _opened(call(_preload_content=False))
        try:
            listed = json.loads(await response.read())
        finally:
            response.release()
        self._answered()
        on_list(listed["items"])
        self.changed.set()
        return listed["metadata"]["resourceVersion"]

    async def _watch(self, call: Callable[..., Any], on_change: Callable[[str, dict], None], version: str) -> str:
        response = await _opened(
            call(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=(aiohttp.ClientTimeout(sock_connect=30, sock_read=WATCH_SECONDS + 60)),
            )
        )
        try:
            async for line in response.content:
                self._answered()
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise AsyncApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    on_change(event["type"], obj)
                    self.changed.set()
        finally:
            response.release()
        return version

    def _answered(self) -> None:
        if self.outage is not None:
            self.log.info("the Kubernetes API answers again after %.0f s", time.monotonic() - self.answered)
            self.outage = None
        self.answered = time.monotonic()

    async def _unanswered(self, exc: BaseException) -> None:
        if self.outage is None:
            self.log.warning("the Kubernetes API did not answer (%s): trying again", exc)
        self.outage = exc
        self.changed.set()
        await asyncio.sleep(RETRY_SECONDS)

    # logs --------------------------------------------------------------------------------------------

    def _start_streams(self) -> None:
        for name, pod in self.pods.items():
            member = self.watch.member(pod)
            if name in self.streams or pod["status"].get("phase") == "Pending":
                continue
            if self.watch.relayed(member):
                self.streams[name] = asyncio.ensure_future(self._stream(name, member))

    async def _stream(self, name: str, member: str) -> None:
        """Relay the pod's log as it is written, to its end (the container's); a dropped stream resumes after the
        last line relayed."""
        async with self.limit:
            while True:
                since, resume = self._since(name), list(self.seen.get(name, (None, 0)))
                after: dict[str, Any] = {"since_seconds": since} if since else {}
                try:
                    response = await _opened(
                        self.core.read_namespaced_pod_log(
                            name,
                            self.watch.following.namespace,
                            follow=True,
                            timestamps=True,
                            _preload_content=False,
                            **after,
                        )
                    )
                    try:
                        async for raw in response.content:
                            self._take(name, member, raw.decode(errors="replace").rstrip("\n"), resume)
                    finally:
                        response.release()
                except AsyncApiException as exc:
                    if exc.status == 404:
                        return
                    if exc.status != 400:  # 400: the container is not running yet
                        self.log.debug("the log of %s was cut off (%s): resuming", name, exc)
                except (TimeoutError, aiohttp.ClientError) as exc:
                    self.log.debug("the log of %s was cut off (%s): resuming", name, exc)
                else:
                    if termination(self.pods.get(name, {})) or await self._ends(name):
                        return
                await asyncio.sleep(RETRY_SECONDS)

    async def _ends(self, name: str, within: float = 2.0) -> bool:
        """Whether the watch reports the pod's container ended within ``within`` seconds (a log stream ends
        with its container, and the watch tells of it a moment later)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if termination(self.pods.get(name, {})):
                return True
            await asyncio.sleep(0.1)
        return False

    def _since(self, name: str) -> int | None:
        last = self.seen.get(name)
        if last is None:
            return None
        stamp = dt.datetime.fromisoformat(last[0][0]).replace(tzinfo=dt.UTC)
        return max(1, math.ceil((dt.datetime.now(dt.UTC) - stamp).total_seconds())) + LOG_OVERLAP_SECONDS

    def _take(self, name: str, member: str, line: str, resume: list) -> None:
        """Relay one timestamped line unless already relayed: a resumed stream starts before the drop, so lines
        before the last relayed timestamp, and as many at it as were relayed, are skipped. ``resume``: (the last
        timestamp relayed, lines at it still to skip) when this stream started."""
        stamp, _, text = line.partition(" ")
        key = _stamp(stamp)
        start, skip = resume
        if start and (key < start or (key == start and skip > 0)):
            resume[1] -= key == start
            return
        previous, count = self.seen.get(name, (None, 0))
        self.seen[name] = (key, count + 1 if previous == key else 1)
        self._relay(member, text)

    def _relay(self, member: str, text: str) -> None:
        for source, piece in self._pieces(member, text):
            self.tails[source].append(piece)
            self.log.info("[%s] %s", source, piece)

    def _pieces(self, member: str, text: str) -> list[tuple[str, str]]:
        """(source, text) of a member's log line: a Horovod pod's by the rank each piece is tagged with."""
        return split_rank_tags(member, text) if self.watch.tagged(member) else [(member, text)]

    async def tail(self, name: str, member: str) -> None:
        """Keep the last lines of a pod not relayed, for the failure to show."""
        with contextlib.suppress(AsyncApiException, aiohttp.ClientError, asyncio.TimeoutError):
            response = await _opened(
                self.core.read_namespaced_pod_log(
                    name, self.watch.following.namespace, tail_lines=TAIL_LINES, _preload_content=False
                )
            )
            try:
                text = (await response.read()).decode(errors="replace")
            finally:
                response.release()
            for line in text.splitlines():
                for source, piece in self._pieces(member, line):
                    self.tails[source].append(piece)

    # the end -----------------------------------------------------------------------------------------

    async def until_ended(self, watches: list[asyncio.Task], stopped: Callable[[], bool]) -> dict:
        """The condition that ended the stage, once a watch delivered it; StageFailed for a pod that did not
        start in time or an API that stopped answering, StageStopped when asked to stop."""
        while True:
            if stopped():
                raise StageStopped(f"{self.watch.task_id} stopped: its Kubernetes objects were deleted")
            for task in watches:
                if task.done():
                    task.result()  # an error of the API that no retry mends
            if self.outage is not None and time.monotonic() - self.answered > API_OUTAGE_SECONDS:
                raise StageFailed(
                    f"{self.watch.kind} {self.watch.name}",
                    None,
                    dict(self.tails),
                    how="could not be followed",
                    detail=(
                        f"the Kubernetes API did not answer for {API_OUTAGE_SECONDS} s ({self.outage}); "
                        "its objects were left running for the task's retry to follow"
                    ),
                )
            if ended := next((c for c in self.conditions if c["type"] in DONE and c["status"] == "True"), None):
                return ended
            if self.gone:
                raise StageFailed(
                    f"{self.watch.kind} {self.watch.name}",
                    None,
                    dict(self.tails),
                    how="was deleted before it ended",
                    detail=("not by this task: by a user, a namespace's cleanup or another controller"),
                )
            if late := not_started(self.watch, list(self.pods.values())):
                raise start_failure(self.watch, late, await self._events(name_of(late)), self.tails)
            self.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)

    async def _events(self, name: str) -> list[dict]:
        response = await _opened(
            self.core.list_namespaced_event(
                self.watch.following.namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
            )
        )
        try:
            return json.loads(await response.read())["items"]
        finally:
            response.release()

    async def outcome(self, ended: dict) -> dict[str, Any] | StageFailed:
        """The stage's result record, or StageFailed naming the pod and why, once its relayed logs delivered
        their last lines (at most DRAIN_SECONDS) and the other failed pods' last lines were read. The pods are
        listed once more (their watch may lag the object's), those already gone kept as last seen; a pod that
        ran its whole course before its watch told of it has its log relayed now."""
        await self._list(self._list_pods, self._pods_relisted)
        failed = DONE[ended["type"]] == "failed"
        if failed and (pod := culprit(self.watch, ended, list(self.pods.values()))):
            if not self.watch.relayed(member := self.watch.member(pod)):
                await self.tail(name_of(pod), member)
        draining = [t for name, t in self.streams.items() if not failed or termination(self.pods.get(name, {}))]
        if draining:
            await asyncio.wait(draining, timeout=DRAIN_SECONDS)
        for task in self.streams.values():
            task.cancel()
        await asyncio.gather(*self.streams.values(), return_exceptions=True)
        if failed:
            return failure(self.watch, ended, list(self.pods.values()), self.tails)
        try:
            return result_record(self.watch, list(self.pods.values()), self.tails)
        except StageFailed as missing:  # returned, not raised: the stage's objects are deleted all the same
            return missing


async def follow(watch: Watch, log: StageLog, stopped: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Follow the stage until it ends; its result record, or StageFailed naming the pod and why. The stage's
    objects are deleted when it ends either way (not when the API stopped answering, nor when stopped)."""
    async with AsyncKubernetesHook(conn_id=watch.following.connection_id).get_conn() as api:
        follower = Follower(watch, api, log)
        watches = [asyncio.ensure_future(follower.watch_object()), asyncio.ensure_future(follower.watch_pods())]
        try:
            ended = await follower.until_ended(watches, stopped)
        except StageFailed:
            if follower.outage is None:  # a pod that never started
                await delete_objects(watch, log, api)
            raise
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
        outcome = await follower.outcome(ended)
        log.info(
            "%s %s ended (%s, %s): deleting its objects", watch.kind, watch.name, ended["type"], ended.get("reason")
        )
        await delete_objects(watch, log, api)
    if isinstance(outcome, StageFailed):
        raise outcome
    return outcome
