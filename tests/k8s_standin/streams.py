"""The API's two long-running answers, as chunked HTTP responses: a watch (JSON lines of the changes after a
resourceVersion, bookmarks, a 410 Expired ERROR event once the history no longer reaches back) and a followed
pod log (its lines so far, then each new one, until the container ended). Both are cut off mid-stream while
the cluster drops connections."""

from __future__ import annotations

import copy
import os
import time
from typing import TYPE_CHECKING

from tests.k8s_standin import timing
from tests.k8s_standin.common import API_VERSIONS, flag, log_lines, selected

if TYPE_CHECKING:
    from tests.k8s_standin.pods import Pod
    from tests.k8s_standin.routes import Handler


def watch(handler: Handler, kind: str, namespace: str, query: dict) -> None:
    """A watch: the changes after ``resourceVersion`` (without one: every object as ADDED first), as JSON
    lines of a chunked response, with bookmarks when asked; a resourceVersion older than the cluster's
    history gets a 410 Expired ERROR event, as from a real API server's watch cache."""
    c, cursor = handler.cluster, int(query.get("resourceVersion") or 0)
    ends = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
    bookmarks, bookmarked = flag(query, "allowWatchBookmarks"), time.monotonic()
    with c.lock:
        if cursor:
            events = c.changes_after(cursor)
        else:
            events = [
                ("ADDED", copy.deepcopy(o)) for (k, ns, _), o in c.objects.items() if (k, ns) == (kind, namespace)
            ]
            cursor = c.revision
    handler.start_stream()
    try:
        while events is not None and not c.closing and time.monotonic() < ends:
            if time.monotonic() < c.outage_until:
                handler.close_connection = True  # cut off: no closing chunk
                return
            for type_, obj in events:
                if obj["kind"] == kind and obj["metadata"]["namespace"] == namespace and selected(obj, query):
                    handler.chunk({"type": type_, "object": obj})
                cursor = max(cursor, int(obj["metadata"].get("resourceVersion") or cursor))
            if bookmarks and time.monotonic() - bookmarked > timing.BOOKMARK_SECONDS:
                handler.chunk(_bookmark(kind, cursor))
                bookmarked = time.monotonic()
            with c.recorded:
                c.recorded.wait(0.2)
            with c.lock:
                events = c.changes_after(cursor)
        if events is None:
            handler.chunk(_expired(cursor, c.history[0][0] - 1))
        handler.end_stream()
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


def _bookmark(kind: str, cursor: int) -> dict:
    return {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": API_VERSIONS[kind], "metadata": {"resourceVersion": str(cursor)}},
    }


def _expired(cursor: int, oldest: int) -> dict:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Expired",
            "code": 410,
            "message": f"too old resource version: {cursor} ({oldest})",
        },
    }


def follow_log(handler: Handler, pod: Pod, query: dict) -> None:
    """A followed log: its lines so far, then each new one, until the container ended and its last line was
    sent (the stream then ends, as the kubelet's)."""
    handler.start_stream("text/plain")
    first, ended, pending, log = True, False, b"", None
    try:
        while not ended:
            ended = bool(pod.terminated) or pod.stopping.is_set() or handler.cluster.closing
            if time.monotonic() < handler.cluster.outage_until:
                handler.close_connection = True  # cut off: no closing chunk
                return
            if log is None and os.path.exists(pod.log_path):
                log = open(pod.log_path, "rb")
            whole, _, pending = (pending + (log.read() if log else b"")).rpartition(b"\n")  # whole lines only
            if lines := log_lines(whole.decode(errors="replace").splitlines(), query, first):
                handler.chunk("".join(lines).encode())
            first = False
            time.sleep(0 if ended else timing.LOG_FOLLOW_SECONDS)
        handler.end_stream()
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True
    finally:
        if log:
            log.close()
