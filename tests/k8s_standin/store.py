"""The API server's storage, standing in for etcd: the objects by (kind, namespace, name), one revision counter
for every kind, the history of changes a watch resumes from, and the events."""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
import uuid
from typing import TYPE_CHECKING

from tests.k8s_standin import timing
from tests.k8s_standin.common import now

if TYPE_CHECKING:
    from tests.k8s_standin.pods import Pod

Key = tuple[str, str, str]
"""(kind, namespace, name) of an object."""


class Store:
    """The objects, their resourceVersions and the history of their changes; the controllers and the kubelet
    change the objects in place (holding ``lock``), and a recorder thread turns each change into a new
    resourceVersion and a watch event."""

    def __init__(self, history_limit: int) -> None:
        self.objects: dict[Key, dict] = {}
        self.pods: dict[str, Pod] = {}
        self.events: list[dict] = []
        self.lock, self.changed = threading.RLock(), threading.Event()
        self.closing = False
        """Set when the cluster closes: every loop ends, nothing more is created."""
        self.revision = 0
        """The newest resourceVersion given out: one counter for every kind, as etcd's revision."""
        self.history: collections.deque[tuple[int, str, Key, str]] = collections.deque(maxlen=history_limit)
        """The last ``history_limit`` changes (resourceVersion, event type, key, the object as JSON): what a watch
        from an older resourceVersion would need is gone (410 Gone)."""
        self.recorded = threading.Condition()
        self._last: dict[Key, str] = {}

    def record_changes(self) -> None:
        """Give every changed object a new resourceVersion and record the change for watches: the objects are
        compared with their last recorded state every RECORD_SECONDS (the controllers change them in place)."""
        while not self.closing:
            time.sleep(timing.RECORD_SECONDS)
            try:
                with self.lock:
                    self._record()
            except RuntimeError:  # an object changed size while read outside the lock: next round
                continue
            with self.recorded:
                self.recorded.notify_all()

    def changes_after(self, revision: int) -> list[tuple[str, dict]] | None:
        """(event type, object) of every change after ``revision``, oldest first; None when the history no longer
        reaches back to it. Call with the lock held."""
        if self.history and revision < self.history[0][0] - 1:
            return None
        newer = itertools.takewhile(lambda change: change[0] > revision, reversed(self.history))
        return [(type_, json.loads(text)) for _, type_, _, text in reversed(list(newer))]

    def recorded_changes(self) -> list[tuple[int, str, Key, str]]:
        """A copy of ``history``, taken while the recorder cannot append to it."""
        with self.lock:
            return list(self.history)

    def _record(self) -> None:
        for key, obj in self.objects.items():
            text = json.dumps(obj, sort_keys=True)
            if self._last.get(key) != text:
                self.revision += 1
                obj["metadata"]["resourceVersion"] = str(self.revision)
                self._last[key], kind = json.dumps(obj, sort_keys=True), "MODIFIED" if key in self._last else "ADDED"
                self.history.append((self.revision, kind, key, self._last[key]))
        for key in [k for k in self._last if k not in self.objects]:
            self.revision += 1
            last = json.loads(self._last.pop(key))
            last["metadata"]["resourceVersion"] = str(self.revision)
            self.history.append((self.revision, "DELETED", key, json.dumps(last)))

    def owned(self, owner: dict) -> list[Pod]:
        """The pods whose owner references name ``owner``."""
        with self.lock:
            return [p for p in self.pods.values() if p.owned_by(owner)]

    def event(self, obj: dict, reason: str, message: str, type_: str = "Normal") -> None:
        """Record an event about ``obj``; a repeat of one counts up, as the event recorder aggregates them."""
        meta, stamp = obj["metadata"], now()
        with self.lock:
            for e in self.events:
                if (e["involvedObject"]["uid"], e["reason"], e["message"], e["type"]) == (
                    meta["uid"],
                    reason,
                    message,
                    type_,
                ):
                    e.update(count=e["count"] + 1, lastTimestamp=stamp)
                    return
            self.events.append(
                {
                    "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
                    "involvedObject": {
                        "apiVersion": obj["apiVersion"],
                        "kind": obj["kind"],
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta["uid"],
                    },
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "count": 1,
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                }
            )
