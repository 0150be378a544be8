"""The API server's semantics on top of its storage: creating an object (uid, creation time, defaults, owner
reference) and a controller's pod, deleting with the garbage collector's propagation (Orphan by default for a
batch/v1 Job), the job-tracking finalizer, the Eviction API; and the faults a test may inject (dropped
connections, RBAC refusals, slow creates), with the requests counted."""

from __future__ import annotations

import collections
import threading
import time
import uuid

from tests.k8s_standin import timing
from tests.k8s_standin.common import JOB_TRACKING, now, owner_reference, set_condition, together
from tests.k8s_standin.images import image_reference
from tests.k8s_standin.pods import Pod
from tests.k8s_standin.store import Store


class ApiServer(Store):
    """What the REST routes (``routes``) and the controllers write through."""

    def __init__(self, history_limit: int) -> None:
        super().__init__(history_limit)
        self.counted: dict[str, list[Pod]] = {}
        """By Job uid: its pods the Job controller counted and let go (deleted ones, then gone from the API)."""
        self.created: list[tuple[str, str]] = []
        """(kind, name) of every object created through the API, in order."""
        self.outage_until = 0.0
        """Until this time.monotonic(), every GET is answered with a response cut off mid-body (see
        ``drop_connections``)."""
        self.forbidden: set[tuple[str, str]] = set()
        """(verb, resource) pairs that RBAC denies the client, e.g. ``("watch", "pods")``: answered 403 Forbidden,
        as a real API server answers a service account whose Role lacks the verb."""
        self.create_delay = 0.0
        """A create is answered this many seconds after the object exists (a slow admission webhook, a loaded
        API server)."""
        self.requests: collections.Counter[str] = collections.Counter()
        """Requests served, by ``"<verb> <resource>"`` (``watch pods``, ``get pods/log``, ``list jobs``, ...)."""
        self.bytes_sent: collections.Counter[str] = collections.Counter()
        """Response body bytes sent, by the same key."""

    def drop_connections(self, seconds: float) -> None:
        """For ``seconds``, cut every GET's response off mid-body and close the connection: an API server
        restarting, or a connection dropped while a log streams."""
        self.outage_until = time.monotonic() + seconds

    def create(self, obj: dict, namespace: str, owner: dict | None = None) -> dict | None:
        """Store a new object as the API server does (uid, creation time, empty status, a Job's defaults; a
        controller's owner reference to ``owner``), then start what acts on it: a Job's pods, a Service's
        names. None when one of its kind and name exists (or ``owner`` is gone, or the cluster closes)."""
        kind, meta = obj["kind"], obj["metadata"]
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            **({"ownerReferences": [owner_reference(owner)]} if owner else {}),
        )
        if kind not in ("ConfigMap", "Secret"):
            obj["status"] = {"loadBalancer": {}} if kind == "Service" else {}
        if kind == "Job":  # work-queue Jobs (parallelism without completions) are not modelled
            obj["spec"] = {
                "completions": 1,
                "parallelism": 1,
                "backoffLimit": 6,
                "completionMode": "NonIndexed",
                **obj["spec"],
            }
        with self.lock:
            if (
                self.closing
                or (kind, namespace, meta["name"]) in self.objects
                or (
                    owner is not None
                    and self.objects.get((owner["kind"], namespace, owner["metadata"]["name"])) is not owner
                )
            ):
                return None
            self.objects[kind, namespace, meta["name"]] = obj
        self.created_object(obj)
        self.changed.set()
        return obj

    def created_object(self, obj: dict) -> None:
        """What acts at once on a new object (the cluster's Job controller, its DNS)."""

    def add_pod(self, owner: dict, name: str, labels: dict, annotations: dict, spec: dict) -> Pod | None:
        """Create a pod controlled by ``owner`` (None once the owner is deleted or the cluster closes), with the
        API server's defaults for its containers."""
        meta = owner["metadata"]
        for c in spec["containers"]:
            tag = image_reference(c["image"]).rsplit(":", 1)[1]
            c.setdefault("imagePullPolicy", "Always" if tag == "latest" and "@" not in c["image"] else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now(),
                "ownerReferences": [owner_reference(owner)],
                **({"finalizers": [JOB_TRACKING]} if owner["kind"] == "Job" else {}),
            },
            "spec": spec,
            "status": {"phase": "Pending", "conditions": []},
        }
        with self.lock:
            if self.closing or self.objects.get((owner["kind"], meta["namespace"], meta["name"])) is not owner:
                return None
            self.objects["Pod", meta["namespace"], name] = obj
            self.pods[name] = Pod(self, obj, self.next_address())
            return self.pods[name]

    def next_address(self) -> str:
        raise NotImplementedError

    def write_hosts(self) -> None:
        """Tell the cluster's DNS that pods or Services changed."""

    def delete(
        self, kind: str, namespace: str, name: str, propagation: str | None = None, collected: bool = False
    ) -> dict | None:
        """Delete the object, and, unless the propagation policy is Orphan (for batch/v1 Jobs the default,
        as the API server's), its dependents: the objects whose owner references name it (``collected``: as
        such a dependent). A pod with a finalizer is only marked (deletionTimestamp) and stopped; it stays
        until its finalizer is removed (see ``jobs.JobController.count_terminated``), except when collected with
        its Job (the controller lets a deleted Job's pods go)."""
        with self.lock:
            obj = self.objects.get((kind, namespace, name))
            if obj and kind == "Pod" and obj["metadata"].get("finalizers") and not collected:
                return self._mark_deleted(obj, name)
            obj = self.objects.pop((kind, namespace, name), None)
            pod = self.pods.pop(name, None) if obj and kind == "Pod" else None
            if obj is None:
                return None
            uid, policy = obj["metadata"]["uid"], propagation or ("Orphan" if kind == "Job" else "Background")
            dependents = self._dependents(uid, orphan=policy == "Orphan")
        together(lambda k=k: self.delete(*k, policy, collected=True) for k in dependents)  # as the owner's
        self.counted.pop(uid, None)
        if pod:
            pod.stop()
        if kind in ("Pod", "Service"):
            self.write_hosts()
        self.changed.set()
        return obj

    def _dependents(self, uid: str, orphan: bool) -> list[tuple[str, str, str]]:
        """The keys of the objects owned by ``uid``; ``orphan``: none, their owner references to it removed
        instead. Call with the lock held."""
        dependents = [
            (key, o)
            for key, o in self.objects.items()
            if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))
        ]
        if orphan:
            for _, o in dependents:
                o["metadata"]["ownerReferences"] = [r for r in o["metadata"]["ownerReferences"] if r["uid"] != uid]
            return []
        return [key for key, _ in dependents]

    def _mark_deleted(self, obj: dict, name: str) -> dict:
        """A pod with a finalizer: marked (deletionTimestamp) and, the first time, terminated by its kubelet."""
        first = not obj["metadata"].get("deletionTimestamp")
        obj["metadata"].setdefault("deletionTimestamp", now())
        obj["metadata"].setdefault("deletionGracePeriodSeconds", int(timing.GRACE_SECONDS))
        if first:
            threading.Thread(target=self._terminate, args=(self.pods[name],), daemon=True).start()
        return obj

    def _terminate(self, pod: Pod) -> None:
        """The kubelet's part of a pod's deletion: stop it and give it a terminal phase (Failed, when its
        container had not succeeded), so that the Job controller counts it."""
        pod.stop()
        with self.lock:
            if pod.phase not in ("Succeeded", "Failed"):
                pod.obj["status"]["phase"] = "Failed"
        self.write_hosts()
        self.changed.set()

    def evict(self, namespace: str, name: str) -> bool:
        """The Eviction API: the pod gets a DisruptionTarget condition and is deleted."""
        pod = self.pods.get(name)
        if pod is None or pod.namespace != namespace:
            return False
        with self.lock:
            set_condition(
                pod.obj["status"].setdefault("conditions", []),
                "DisruptionTarget",
                "True",
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
            )
        threading.Thread(target=self.delete, args=("Pod", namespace, name), daemon=True).start()
        return True
