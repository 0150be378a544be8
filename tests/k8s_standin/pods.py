"""A pod as the API server and both kubelets see it: its object, where its files are (log, termination message,
hosts file), the scheduler's decision, and the status the kubelet reports at each step of its life (sandbox,
waiting, running, terminated). What runs in it is the kubelet's (``kubelet.ProcessKubelet`` runs processes,
``scripted.ScriptedKubelet`` plays a test's script)."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import TYPE_CHECKING

from tests.k8s_standin import timing
from tests.k8s_standin.common import (
    IMAGE_USER,
    LOG_MESSAGE_LINES,
    LOG_MESSAGE_MAX_BYTES,
    MESSAGE_MAX_BYTES,
    NODE,
    NODE_LABELS,
    now,
    set_condition,
    true,
)

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster


class Pod:
    """One pod: its object, and what its kubelet gives it (files here; network namespace, cgroup and processes
    with the process kubelet)."""

    def __init__(self, cluster: StandInCluster, obj: dict, address: str):
        self.cluster, self.obj, self.address = cluster, obj, address
        meta = obj["metadata"]
        self.dir = os.path.join(cluster.workdir, "pods", f"{meta['namespace']}_{meta['name']}_{meta['uid']}")
        os.makedirs(self.dir)
        self.log_path, self.hosts_path, self.message_path = (
            os.path.join(self.dir, f) for f in ("log", "hosts", "termination-log")
        )
        open(self.message_path, "w").close()
        octet = address.rsplit(".", 1)[1]
        self.netns = f"tfd{cluster.id}p{octet}"
        self.cgroup = os.path.join(cluster.cgroup, f"p{octet}") if cluster.cgroup else None
        self.proc: subprocess.Popen | None = None
        self.oom_killed = False
        """Set by the kubelet's memory watch (no cgroup): it killed the container past its limit."""
        self.stopping = threading.Event()
        """Set when the pod is stopped or deleted: no container starts any more."""
        self.lock = threading.Lock()
        self.sync: threading.Thread | None = None
        """The kubelet's thread working for the pod, once it is scheduled."""

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def labels(self) -> dict:
        return self.obj["metadata"].get("labels") or {}

    @property
    def phase(self) -> str:
        return self.obj["status"]["phase"]

    @property
    def hostname(self) -> str:
        return self.obj["spec"].get("hostname") or self.obj["metadata"]["name"][:63]

    @property
    def subdomain(self) -> str | None:
        return self.obj["spec"].get("subdomain")

    @property
    def container(self) -> dict:
        return self.obj["spec"]["containers"][0]

    @property
    def terminated(self) -> dict | None:
        statuses = self.obj["status"].get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("terminated")

    @property
    def user(self) -> tuple[int, int, str]:
        """(uid, gid, home) the container runs as: its securityContext's runAsUser and runAsGroup (the
        container's, else the pod's), else root (an image's USER is not modelled); the gid, when not given,
        and the home from the image's /etc/passwd (IMAGE_USER), else 0 and /."""
        contexts = [self.container.get("securityContext") or {}, self.obj["spec"].get("securityContext") or {}]
        uid = next((c["runAsUser"] for c in contexts if c.get("runAsUser") is not None), 0)
        _, image_uid, image_gid, image_home = IMAGE_USER
        known = {0: (0, "/root"), image_uid: (image_gid, image_home)}.get(uid, (0, "/"))
        return uid, next((c["runAsGroup"] for c in contexts if c.get("runAsGroup") is not None), known[0]), known[1]

    def serves(self, publish_not_ready: bool) -> bool:
        """Whether a headless Service's DNS names this pod: it has an address, has not terminated, and is
        ready (or the Service publishes not-ready addresses)."""
        status = self.obj["status"]
        return (
            bool(status.get("podIP"))
            and self.phase not in ("Succeeded", "Failed")
            and (publish_not_ready or true(status, "Ready"))
        )

    def owned_by(self, owner: dict) -> bool:
        return any(r["uid"] == owner["metadata"]["uid"] for r in self.obj["metadata"].get("ownerReferences", []))

    # the scheduler, and the kubelet's part of the pod's life -------------------------------------------------

    def schedule(self) -> None:
        """The scheduler binds the pod to the node when its nodeSelector matches the node's labels (else it
        stays Pending: FailedScheduling); the kubelet then runs it."""
        status = self.obj["status"]
        if not (self.obj["spec"].get("nodeSelector") or {}).items() <= NODE_LABELS.items():
            message = (
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: "
                "0/1 nodes are available."
            )
            with self.cluster.lock:
                set_condition(status.setdefault("conditions", []), "PodScheduled", "False", "Unschedulable", message)
            self.cluster.event(self.obj, "FailedScheduling", message, "Warning")
            return
        with self.cluster.lock:
            self.obj["spec"]["nodeName"] = NODE
            set_condition(status.setdefault("conditions", []), "PodScheduled", "True")
        self.cluster.event(
            self.obj, "Scheduled", f"Successfully assigned {self.namespace}/{self.obj['metadata']['name']} to {NODE}"
        )
        with self.lock:  # started before anyone sees it: a stop joins it at once
            self.sync = threading.Thread(target=self.cluster.kubelet.sync, args=(self,), daemon=True)
            self.sync.start()

    def stop(self) -> None:
        """Stop the pod as its kubelet does (a container not started yet never starts); returns once the kubelet
        is done with it."""
        self.cluster.kubelet.stop(self)

    def wait_for_sync(self) -> None:
        """Wait (bounded) until the kubelet's sync of this pod, if started, has ended; not from that sync itself."""
        with self.lock:
            sync = self.sync
        if sync and sync is not threading.current_thread():
            sync.join(timing.GRACE_SECONDS + 5)

    def release(self) -> None:
        """Free what the kubelet gave the pod (network namespace, cgroup)."""
        self.cluster.kubelet.release(self)

    # the status the kubelet reports --------------------------------------------------------------------------

    def sandboxed(self) -> None:
        """The pod's sandbox exists: it has its address, and its container is not ready yet."""
        with self.cluster.lock:
            status = self.obj["status"]
            status.update(
                podIP=self.address, podIPs=[{"ip": self.address}], hostIP=f"{self.cluster.subnet}.1", startTime=now()
            )
            unready = f"containers with unready status: [{self.container['name']}]"
            for type_ in ("Initialized", "ContainersReady", "Ready"):
                set_condition(
                    status["conditions"],
                    type_,
                    *(("True",) if type_ == "Initialized" else ("False", "ContainersNotReady", unready)),
                )

    def container_status(self, state: dict, ready: bool, container_id: str | None = None) -> dict:
        c = self.container
        return {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "ready": ready,
            "started": "running" in state,
            "restartCount": 0,
            "state": state,
            "lastState": {},
            **({"containerID": container_id} if container_id else {}),
        }

    def waiting(self, reason: str, message: str, warning: tuple[str, str] | None = None) -> None:
        """The container waits to start (an image it cannot pull): its state, and the kubelet's warnings."""
        if warning:
            self.cluster.event(self.obj, *warning, "Warning")
        self.cluster.event(self.obj, "Failed", f"Error: {reason}", "Warning")
        with self.cluster.lock:
            self.obj["status"]["containerStatuses"] = [
                self.container_status({"waiting": {"reason": reason, "message": message}}, ready=False)
            ]

    def running(self, started: str, container_id: str) -> None:
        """The container started: Running, ready, and the kubelet's events."""
        with self.cluster.lock:
            status = self.obj["status"]
            status["phase"] = "Running"
            status["containerStatuses"] = [
                self.container_status({"running": {"startedAt": started}}, True, container_id)
            ]
            for type_ in ("ContainersReady", "Ready"):
                set_condition(status["conditions"], type_, "True")
        self.cluster.event(self.obj, "Created", f"Created container {self.container['name']}")
        self.cluster.event(self.obj, "Started", f"Started container {self.container['name']}")

    def ended(self, code: int, oom: bool, started: str, container_id: str) -> None:
        """The container ended with ``code`` (``oom``: killed past its memory limit): its terminated state with
        the termination message, and the pod's terminal phase."""
        terminated = {
            "exitCode": code,
            "reason": "OOMKilled" if oom else "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
            "containerID": container_id,
        }
        if message := self.termination_message(code):
            terminated["message"] = message
        with self.cluster.lock:
            status = self.obj["status"]
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            status["containerStatuses"] = [self.container_status({"terminated": terminated}, False, container_id)]
            for type_ in ("ContainersReady", "Ready"):
                set_condition(status["conditions"], type_, "False", "PodCompleted")

    # its files ----------------------------------------------------------------------------------------------

    def log_line(self, log, text: str) -> None:
        """Store one line of the container's output as the kubelet does: '<RFC 3339 time> <text>'."""
        log.write(f"{now()} {text}\n")
        log.flush()

    def termination_message(self, code: int) -> str:
        """The kubelet's: the last 4096 bytes of the terminationMessagePath; with FallbackToLogsOnError, when
        that is empty and the container failed, the last 80 lines of its log (at most their last 2048 bytes)."""
        with open(self.message_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - MESSAGE_MAX_BYTES))
            data = f.read()
        if not data and code != 0 and self.container["terminationMessagePolicy"] == "FallbackToLogsOnError":
            with open(self.log_path, "rb") as f:
                lines = f.read().splitlines()[-LOG_MESSAGE_LINES:]
            data = b"".join(line.partition(b" ")[2] + b"\n" for line in lines)[-LOG_MESSAGE_MAX_BYTES:]
        return data.decode(errors="replace")
