"""A stand-in Kubernetes cluster for the tests: the Kubernetes REST API (JSON over HTTP, as the real
``kubernetes`` client speaks it) for Jobs, Services, ConfigMaps, Secrets, pods, pod logs, evictions, events,
API discovery and the Kubeflow custom resources its ``crds`` install; a Job controller (Indexed and NonIndexed
Jobs); a TFJob controller (as Kubeflow's training operator v1 reconciles TFJobs); an MPIJob controller (as
Kubeflow's MPI operator v2beta1, v0.6, reconciles MPIJobs); a garbage collector following owner references;
and a kubelet that runs each pod's container command as real processes. ``drop_connections`` makes the API
cut off its responses for a while (an API server restart, dropped log streams). Lists carry a resourceVersion,
and watches (``watch=true``, from a ``resourceVersion``, with bookmarks, by label or ``metadata.name`` field
selector) stream every change after it, or a 410 Expired ERROR event once the history (``history_limit``
changes) no longer reaches back to it; a log read with ``follow=true`` streams each new line and ends when the
container has ended. Needs root.

Each pod gets what a pod has: its own network namespace with an address on a bridge (so every TF server can
listen on port 2222, as in a cluster), interface ``eth0``, its own host name, a ``/dev`` of its own (a tmpfs
with the usual devices, as a container runtime makes it) where the pod's termination message file is
bind-mounted at the container's ``terminationMessagePath``, a memory cgroup with the container's memory limit
(the kernel OOM-kills past it; without a cgroup v1 memory controller the kubelet polls the processes' memory
and kills them instead), and an ``/etc/hosts`` standing in for cluster DNS: the A records of every headless
Service (``<service>.<namespace>.svc``, and ``<hostname>.<service>`` for pods whose subdomain is the Service)
naming its ready pods (not-ready ones too with ``publishNotReadyAddresses``; never terminated ones). The
kubelet pulls images from the cluster's registry (``images``: one it lacks leaves the pod Pending in
``ErrImagePull``, then ``ImagePullBackOff``), mounts Secret and ConfigMap volumes read-only (their files
written with the volume's modes, as the kubelet writes them; a pod whose object is missing waits), runs the
container as root or, with ``securityContext.runAsUser``, as that user (in a user namespace mapping the user
to this machine's root: it has no capabilities, and this machine's root-owned files look like its own, so the
artifact volume is writable as a volume given with a matching fsGroup would be), and reports the termination
message (``File`` or ``FallbackToLogsOnError``) and ``OOMKilled`` as the real one does. The artifact volume is
this machine's file system, at the same path. Deleting an object deletes its dependents unless the
propagation policy is Orphan (for a batch/v1 Job deleted through the API, the API server's default).

The image's files where they matter: each pod sees the worker image's (docker/Dockerfile.worker) user,
``tfdist`` (uid 1000, home /home/tfdist), in /etc/passwd and /etc/group (this machine's files otherwise), a
/home holding only that user's home with its sshd config (docker/sshd_config), and /etc/ssh/ssh_config.d
holding only the image's ssh client settings (docker/ssh_config): per-pod copies bind-mounted in the pod's
own mount namespace; every other file is this machine's. So an MPIJob runs as on a cluster: the operator's
Service, ConfigMap (``hostfile``, ``discover_hosts.sh``), Secret (a generated key pair as ``id_rsa``,
``id_rsa.pub``, ``authorized_keys`` at ``sshAuthMountPath``), worker pods ``<job>-worker-<i>`` running their
command (this machine's ``/usr/sbin/sshd``) and the launcher Job ``<job>-launcher`` whose pod gets OpenMPI's
environment and the hostfile at /etc/mpi; this machine's ``mpirun`` there reaches the workers' sshd with
this machine's ``ssh`` and starts ``orted`` and the ranks through it; the MPIJob's conditions (Created,
Running, Succeeded, Failed) and replicaStatuses follow the launcher Job and the workers, cleanPodPolicy
deletes the workers once it ended, runPolicy.backoffLimit is the launcher Job's (a failed launcher pod is
replaced until it is exceeded).

What it does not model: other image contents (``python`` is this interpreter, with tfdist installed as in
the worker image) and an image's USER (a container without runAsUser runs as root), volumes other than Secrets,
ConfigMaps and the artifact volume, updates of a mounted Secret or ConfigMap (its files are written when the
container starts: ``discover_hosts.sh`` in a running launcher stays as it was), env from them, the
scheduler beyond node selectors, and resources beyond memory limits (every other pod is scheduled at once on
one node), container restarts (a container runs once whatever its restartPolicy; the training operator
recreates a failed OnFailure or Always replica instead, with no back-off and no backoffLimit; the Job
controller replaces failed pods up to backoffLimit, with no back-off), PID and IPC namespaces (a container's
other processes are killed when its main process ends, as the runtime does), label selectors beyond
``key=value``, admission, defaulting and schema checks (tests validate objects offline; controllers apply
their defaults in memory), updates and patches, authentication, real DNS (so no ``dnsConfig``),
TTLs, deadlines, suspension, the training operator's webhooks, the MPI operator's Intel MPI and MPICH modes,
``runLauncherAsWorker``, scaling of workers and its elastic Horovod, gang scheduling and dynamic workers, and
kubelet restarts. How a real API server differs in what it serves: it records each write as one change,
where the stand-in compares its objects every RECORD_SECONDS (two changes within that time are one event); its
watches are served from a watch cache, its lists may be too; an object whose labels change out of a watch's
selector is a DELETED event there, unmodelled here; it sends bookmarks about once a minute (here every
BOOKMARK_SECONDS); ``pods/log`` is proxied through the node's kubelet (here read from the pod's log file);
long-running requests (watches, followed logs) are outside its max-inflight limits and capped by its
``--min-request-timeout``. Deleting is synchronous (the call returns once the object, its dependents and their
processes are gone; no other finalizers, no Terminating state) except for a Job's pod deleted or evicted by
itself: it carries the Job controller's job-tracking finalizer, so it is marked (deletionTimestamp), stopped
by the kubelet (SIGTERM, then SIGKILL after the grace period), given a terminal phase, counted by the Job
controller, and only then gone from the API, before the Job's conditions say what its failure did."""

from __future__ import annotations

import base64
import collections
import copy
import datetime as dt
import fractions
import http.server
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from collections.abc import Callable, Iterable

import psutil
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRACE_SECONDS = 5.0
NODE_LABELS = {"kubernetes.io/hostname": "standin", "kubernetes.io/os": "linux"}
"""The one node's labels: a pod whose nodeSelector asks for others stays Pending (FailedScheduling)."""
NODE = NODE_LABELS["kubernetes.io/hostname"]
POD_RESYNC_SECONDS = 1.0
"""The kubelet's next sync of a pod after a failed image pull (10 to 15 s on a node; shorter here)."""
IMAGE_BACKOFF_SECONDS = (10.0, 300.0)
"""The kubelet's image pull back-off: the first wait after a failed pull, doubling up to the second."""
MEMORY_POLL_SECONDS = 0.1
MESSAGE_MAX_BYTES, LOG_MESSAGE_LINES, LOG_MESSAGE_MAX_BYTES = 4096, 80, 2048
"""The kubelet's termination message: the file's last 4096 bytes, or the log's last 80 lines, 2048 bytes."""
CRDS = {"tfjobs": ("kubeflow.org", "v1", "TFJob"), "mpijobs": ("kubeflow.org", "v2beta1", "MPIJob")}
"""The custom resources a cluster may have installed: plural → (group, version, kind)."""
API_VERSIONS = {
    "Job": "batch/v1",
    "Service": "v1",
    "Pod": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    **{k: f"{g}/{v}" for g, v, k in CRDS.values()},
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
TF_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
TF_STATUS_ORDER = ("Chief", "Evaluator", "Master", "PS", "Worker")
"""The order in which the training operator derives a TFJob's conditions from its replica types."""
TF = "training.kubeflow.org/"
INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING = "batch.kubernetes.io/job-tracking"
"""The finalizer the Job controller puts on its pods until it has counted them."""
MPI_OPERATOR, MPI_CONFIG = "mpi-operator", "/etc/mpi"
IMAGE_USER = ("tfdist", 1000, 1000, "/home/tfdist")
"""The worker image's user (docker/Dockerfile.worker: ``useradd --uid 1000 --create-home tfdist``): name, uid,
gid, home."""
IMAGE_DIRS = {
    "/home": {"tfdist/.sshd_config": "docker/sshd_config"},
    "/etc/ssh/ssh_config.d": {"tfdist.conf": "docker/ssh_config"},
}
"""The worker image's directories that differ from this machine's, with the files the Dockerfile copies into
them from the repository: the user's home (with its sshd config) and the ssh client's settings."""
CONTAINER_SETUP = r"""set -e
mount -t tmpfs -o nosuid,mode=755,size=65536k tmpfs /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts; ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=65536k shm /dev/shm
hostname "$0"
while [ "$1" != -- ]; do
  if [ ! -e "$2" ]; then mkdir -p "$(dirname "$2")"; if [ -d "$1" ]; then mkdir "$2"; else : > "$2"; fi; fi
  mount --bind "$1" "$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi
  shift 3
done
shift
exec "$@"
"""
"""The container's setup in its own mount and UTS namespaces, before its command: a /dev of its own (so that
the default terminationMessagePath exists there, the host's /dev untouched), its host name ($0), then bind
mounts (source, target, rw or ro; up to ``--``): the pod's hosts file at /etc/hosts, its termination message
file at the container's terminationMessagePath, the image's files (IMAGE_USER, IMAGE_DIRS) and its Secret and
ConfigMap volumes. A target that does not exist is created first: within the pod's own /dev or /home, the
pod's; elsewhere on this machine's file system (the pods share its root, there being no image), where it is
left, empty: the least a bind mount needs."""
JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
"""Run in the pod's cgroup (joined before ``ip netns exec``, whose fresh /sys has no cgroup file systems)."""
_clusters = itertools.count()
RECORD_SECONDS = 0.02
"""How often the stand-in records its objects' changes for watches (a real API server records each write)."""
BOOKMARK_SECONDS = 1.0
"""How often a watch that asked for bookmarks gets one (a real API server: about once a minute)."""
LOG_FOLLOW_SECONDS = 0.05
"""How often a followed log is read for new lines."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _index(pod: Pod) -> int:
    """The completion index of an Indexed Job's pod."""
    return int(pod.obj["metadata"]["annotations"][INDEX])


def _matches(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",") if term))


def _flag(query: dict, name: str) -> bool:
    """A boolean query parameter: clients send true, True or 1."""
    return query.get(name, "").lower() in ("true", "1")


def _log_lines(lines: list[str], query: dict, first: bool) -> list[str]:
    """The log lines (as the kubelet stores them: '<RFC 3339 time> <text>') a pods/log query gets, each ending in a
    newline: those within sinceSeconds, then, in the first answer, the last tailLines of them; without their
    time unless timestamps=true."""
    if "sinceSeconds" in query:
        since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(query["sinceSeconds"]))
        lines = [
            line
            for line in lines
            if dt.datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC) >= since
        ]
    if first and "tailLines" in query:
        lines = lines[len(lines) - min(len(lines), int(query["tailLines"])) :]
    if not _flag(query, "timestamps"):
        lines = [line.split(" ", 1)[1] if " " in line else "" for line in lines]
    return [line + "\n" for line in lines]


def _selected(obj: dict, query: dict) -> bool:
    """Whether a list or watch with this query's labelSelector and fieldSelector (``metadata.name=``) has it."""
    fields = dict(term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if term)
    return (
        _matches(obj, query.get("labelSelector", ""))
        and fields.get("metadata.name", obj["metadata"]["name"]) == obj["metadata"]["name"]
    )


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes quantity (``512Mi``, ``1Gi``, ``500M``, ``1e9``, ``1073741824``) in bytes, rounded up."""
    m = re.fullmatch(r"([0-9.]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?", str(quantity).strip())
    if not m:
        raise ValueError(f"not a quantity: {quantity!r}")
    binary = {f"{p}i": 2 ** (10 * (n + 1)) for n, p in enumerate("KMGTPE")}
    decimal = {p: 10 ** (3 * (n + 1)) for n, p in enumerate("kMGTPE")}
    scale = (
        fractions.Fraction(10) ** int(m[2])
        if m[2]
        else {**binary, **decimal, "m": fractions.Fraction(1, 1000), None: 1}[m[3]]
    )
    return math.ceil(fractions.Fraction(m[1]) * scale)


def image_reference(image: str) -> str:
    """The image's fully qualified reference, as the container runtime names it (``python`` is
    ``docker.io/library/python:latest``)."""
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def _memory_cgroup() -> str | None:
    """This process's cgroup v1 memory cgroup, under which the pods' cgroups go (nested, so that every limit
    on this process still holds for them); None without one to write to (cgroup v2, a read-only /sys)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                own = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
                return own if os.path.isdir(own) and os.access(own, os.W_OK) else None
    return None


def _together(calls: Iterable[Callable[[], object]]) -> None:
    """Make the calls at once, each in a thread of its own (as a kubelet stops its pods), and wait for all."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _set_condition(
    conditions: list[dict], type_: str, status: str, reason: str | None = None, message: str | None = None
) -> None:
    """Set a pod's condition: its lastTransitionTime changes with its status only."""
    current = next((c for c in conditions if c["type"] == type_), None)
    condition = {
        "type": type_,
        "status": status,
        "lastTransitionTime": now(),
        **({"reason": reason} if reason else {}),
        **({"message": message} if message else {}),
    }
    if current is None:
        conditions.append(condition)
    else:
        if current["status"] == status:
            condition["lastTransitionTime"] = current["lastTransitionTime"]
        current.clear()
        current.update(condition)


def _true(status: dict, type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in status.get("conditions") or [])


def _set_job_condition(status: dict, type_: str, reason: str, message: str) -> None:
    """The training operator's setCondition: nothing changes once the job failed; Running and Restarting
    replace each other; Succeeded and Failed turn Running False."""
    conditions = status.setdefault("conditions", [])
    current = next((c for c in conditions if c["type"] == type_), None)
    if _true(status, "Failed") or (current and (current["status"], current["reason"]) == ("True", reason)):
        return
    stamp = now()
    kept = [
        {**c, "status": "False"} if type_ in ("Succeeded", "Failed") and c["type"] == "Running" else c
        for c in conditions
        if c["type"] != type_ and {c["type"], type_} != {"Running", "Restarting"}
    ]
    status["conditions"] = [
        *kept,
        {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": current["lastTransitionTime"] if current and current["status"] == "True" else stamp,
        },
    ]


class Pod:
    """One pod: its object, and what the kubelet gives it (network namespace, cgroup, processes, files)."""

    def __init__(self, cluster: Cluster, obj: dict, address: str):
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
        self.kubelet: threading.Thread | None = None

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
            and (publish_not_ready or _true(status, "Ready"))
        )

    def owned_by(self, owner: dict) -> bool:
        return any(r["uid"] == owner["metadata"]["uid"] for r in self.obj["metadata"].get("ownerReferences", []))

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
                _set_condition(status.setdefault("conditions", []), "PodScheduled", "False", "Unschedulable", message)
            self.cluster.event(self.obj, "FailedScheduling", message, "Warning")
            return
        with self.cluster.lock:
            self.obj["spec"]["nodeName"] = NODE
            _set_condition(status.setdefault("conditions", []), "PodScheduled", "True")
        self.cluster.event(
            self.obj, "Scheduled", f"Successfully assigned {self.namespace}/{self.obj['metadata']['name']} to {NODE}"
        )
        self.kubelet = threading.Thread(target=self._sync, daemon=True)
        self.kubelet.start()

    def _sync(self) -> None:
        """The kubelet's work for the pod: its sandbox (network namespace, address), its volumes, its image,
        its container; the sandbox is torn down once the container ended or the pod was stopped."""
        try:
            self._sandbox()
            if (volumes := self._mount()) is not None and self._pull():
                self._run(volumes)
        finally:
            self.release()
            self.cluster.write_hosts()
            self.cluster.changed.set()

    def _sandbox(self) -> None:
        octet = self.address.rsplit(".", 1)[1]
        veth, run = f"tfd{self.cluster.id}v{octet}", self.cluster.run
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        run("ip", "link", "set", veth, "master", self.cluster.bridge, "up")
        for argv in (
            ("ip", "addr", "add", f"{self.address}/24", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "lo", "up"),
        ):
            run("ip", "netns", "exec", self.netns, *argv)
        with self.cluster.lock:
            status = self.obj["status"]
            status.update(
                podIP=self.address, podIPs=[{"ip": self.address}], hostIP=f"{self.cluster.subnet}.1", startTime=now()
            )
            unready = f"containers with unready status: [{self.container['name']}]"
            for type_ in ("Initialized", "ContainersReady", "Ready"):
                _set_condition(
                    status["conditions"],
                    type_,
                    *(("True",) if type_ == "Initialized" else ("False", "ContainersNotReady", unready)),
                )
        self.cluster.write_hosts()

    def _mount(self) -> list[tuple[str, str, str]] | None:
        """The container's Secret and ConfigMap volumes, once every object they name exists (until then the
        pod waits, with FailedMount events); None when the pod was stopped meanwhile."""
        while not self.stopping.is_set():
            try:
                return self._volumes()
            except LookupError as missing:
                self.cluster.event(self.obj, "FailedMount", str(missing), "Warning")
                self.stopping.wait(POD_RESYNC_SECONDS)
        return None

    def _volumes(self) -> list[tuple[str, str, str]]:
        """(source, mountPath, "ro") of each Secret and ConfigMap volume the container mounts, written for the
        pod as the kubelet writes them: each item's key at its path (every key without items), with the
        item's mode, else the volume's defaultMode, else 0644; owned by root, which a container running as
        another user sees as nobody (its user namespace maps this machine's root to that user, so root's own
        files look like the user's). Written once: later changes of the objects do not reach a running pod.
        The other volumes (the artifact volume) are this machine's file system at the same path."""
        volumes, mounts = {v["name"]: v for v in self.obj["spec"].get("volumes", [])}, []
        owner = 0 if self.user[0] == 0 else 65534
        for mount in self.container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            source = volume.get("secret") or volume.get("configMap")
            if source is None:
                continue
            kind, name = ("Secret", source["secretName"]) if "secret" in volume else ("ConfigMap", source["name"])
            with self.cluster.lock:
                data = copy.deepcopy((self.cluster.objects.get((kind, self.namespace, name)) or {}).get("data"))
            if data is None:
                raise LookupError(
                    f'MountVolume.SetUp failed for volume "{mount["name"]}" : {kind.lower()} "{name}" not found'
                )
            data = {k: base64.b64decode(v) if kind == "Secret" else v.encode() for k, v in data.items()}
            directory = os.path.join(self.dir, "volumes", mount["name"])
            for item in source.get("items") or [{"key": key, "path": key} for key in data]:
                path = os.path.join(directory, item["path"])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data[item["key"]])
                os.chmod(path, item.get("mode", source.get("defaultMode", 0o644)))
                os.chown(path, owner, owner)
            mounts.append((directory, mount["mountPath"], "ro"))
        return mounts

    def _image(self) -> list[tuple[str, str, str]]:
        """Bind mounts of the worker image's files where they differ from this machine's, written for the pod:
        /etc/passwd and /etc/group (this machine's, the image's user in place of any with its name or ids)
        and IMAGE_DIRS."""
        name, uid, gid, home = IMAGE_USER
        image, mounts = os.path.join(self.dir, "image"), []
        os.makedirs(image, exist_ok=True)
        for path, entry in (
            ("/etc/passwd", [name, "x", uid, gid, "", home, "/bin/sh"]),
            ("/etc/group", [name, "x", gid, ""]),
        ):
            with open(path) as f:
                kept = [
                    line
                    for line in f.read().splitlines()
                    if line.split(":")[0] != name and line.split(":")[2:3] != [str(entry[2])]
                ]
            copied = os.path.join(image, os.path.basename(path))
            with open(copied, "w") as f:
                f.write("\n".join([*kept, ":".join(map(str, entry))]) + "\n")
            mounts.append((copied, path, "rw"))
        for directory, files in IMAGE_DIRS.items():
            root = os.path.join(image, directory.strip("/").replace("/", "_"))
            for relative, source in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, relative)), exist_ok=True)
                shutil.copyfile(os.path.join(REPO, source), os.path.join(root, relative))
            mounts.append((root, directory, "rw"))
        return mounts

    def _pull(self) -> bool:
        """The kubelet's image pull: the image is there when the cluster's registry has it; else the container
        waits (ErrImagePull, then ImagePullBackOff until the next try, the back-off doubling from 10 s to
        300 s; ErrImageNeverPull with imagePullPolicy Never). False when the pod was stopped meanwhile."""
        image, wait = self.container["image"], IMAGE_BACKOFF_SECONDS[0]
        policy = self.container["imagePullPolicy"]
        while not self.stopping.is_set():
            if self.cluster.has_image(image):
                if policy == "Always":
                    self.cluster.event(self.obj, "Pulling", f'Pulling image "{image}"')
                    self.cluster.event(
                        self.obj,
                        "Pulled",
                        f'Successfully pulled image "{image}" in 0s (0s including waiting). Image size: 0 bytes.',
                    )
                else:
                    self.cluster.event(self.obj, "Pulled", f'Container image "{image}" already present on machine')
                return True
            if policy == "Never":
                message = f'Container image "{image}" is not present with pull policy of Never'
                self._wait_for_image("ErrImageNeverPull", message, ("ErrImageNeverPull", message))
                self.stopping.wait(POD_RESYNC_SECONDS)
                continue
            ref = image_reference(image)
            error = (
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
                f'reference "{ref}": {ref}: not found'
            )
            self.cluster.event(self.obj, "Pulling", f'Pulling image "{image}"')
            self._wait_for_image("ErrImagePull", error, ("Failed", f'Failed to pull image "{image}": {error}'))
            if self.stopping.wait(POD_RESYNC_SECONDS):
                break
            self.cluster.event(self.obj, "BackOff", f'Back-off pulling image "{image}"')
            self._wait_for_image("ImagePullBackOff", f'Back-off pulling image "{image}"')
            self.stopping.wait(wait - POD_RESYNC_SECONDS)
            wait = min(2 * wait, IMAGE_BACKOFF_SECONDS[1])
        return False

    def _wait_for_image(self, reason: str, message: str, warning: tuple[str, str] | None = None) -> None:
        if warning:
            self.cluster.event(self.obj, *warning, "Warning")
        self.cluster.event(self.obj, "Failed", f"Error: {reason}", "Warning")
        with self.cluster.lock:
            self.obj["status"]["containerStatuses"] = [
                self._container_status({"waiting": {"reason": reason, "message": message}}, ready=False)
            ]

    def _container_status(self, state: dict, ready: bool, container_id: str | None = None) -> dict:
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

    def _environment(self) -> dict[str, str]:
        """The container's environment: its env (values, and fields of the pod the kubelet fills in), HOSTNAME,
        HOME, and, standing in for the image, this machine's PATH (its ``python`` has tfdist installed)."""
        env = {"HOSTNAME": self.hostname, "HOME": self.user[2]}  # HOME: the runtime's, from the user
        meta = self.obj["metadata"]
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": NODE,
            "status.podIP": self.address,
            "status.hostIP": f"{self.cluster.subnet}.1",
        }
        for var in self.container.get("env", []):
            path = (var.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            if m := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path or ""):
                env[var["name"]] = (meta.get(m[1]) or {}).get(m[2], "")
            elif path in fields:
                env[var["name"]] = fields[path]
            elif "valueFrom" not in var:
                env[var["name"]] = var.get("value", "")
        return {**env, "PATH": os.environ["PATH"]}

    def _run(self, volumes: list[tuple[str, str, str]]) -> None:
        """Start the container in the pod's namespaces and cgroup, as its user (not root: in a user namespace
        mapping that user to this machine's root), relay its output to the pod's log, and report how it ended
        once its main process did (its other processes are then killed)."""
        container = self.container
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        limit = memory_bytes(memory) if memory else None
        if self.cgroup:
            os.makedirs(self.cgroup, exist_ok=True)
            with open(os.path.join(self.cgroup, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit or -1))
        command = [sys.executable if a == "python" else a for a in [*container["command"], *container.get("args", [])]]
        mounts = [
            (self.hosts_path, "/etc/hosts", "rw"),
            (self.message_path, container["terminationMessagePath"], "rw"),
            *self._image(),
            *volumes,
        ]
        enter = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "-mu",
            "sh",
            "-c",
            CONTAINER_SETUP,
            self.hostname,
            *itertools.chain.from_iterable(mounts),
            "--",
        ]
        if (user := self.user)[0]:
            enter += ["unshare", "--user", f"--map-user={user[0]}", f"--map-group={user[1]}", "--"]
        if self.cgroup:
            enter = ["sh", "-c", JOIN_CGROUP, os.path.join(self.cgroup, "cgroup.procs"), *enter]
        with self.lock:
            if self.stopping.is_set():
                return
            self.proc = subprocess.Popen(
                [*enter, *command],
                env=self._environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        container_id, started = f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}", now()
        with self.cluster.lock:
            status = self.obj["status"]
            status["phase"] = "Running"
            status["containerStatuses"] = [
                self._container_status({"running": {"startedAt": started}}, True, container_id)
            ]
            for type_ in ("ContainersReady", "Ready"):
                _set_condition(status["conditions"], type_, "True")
        self.cluster.event(self.obj, "Created", f"Created container {container['name']}")
        self.cluster.event(self.obj, "Started", f"Started container {container['name']}")
        self.cluster.write_hosts()
        self.cluster.changed.set()
        if limit and not self.cgroup:
            threading.Thread(target=self._watch_memory, args=(limit,), daemon=True).start()
        log = threading.Thread(target=self._log, daemon=True)
        log.start()
        code = self.proc.wait()
        self._kill_all()
        log.join()
        code = code if code >= 0 else 128 - code
        oom = self.oom_killed or bool(self.cgroup and self._oom_kills())
        terminated = {
            "exitCode": code,
            "reason": "OOMKilled" if oom else "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
            "containerID": container_id,
        }
        if message := self._termination_message(code):
            terminated["message"] = message
        with self.cluster.lock:
            status = self.obj["status"]
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            status["containerStatuses"] = [self._container_status({"terminated": terminated}, False, container_id)]
            for type_ in ("ContainersReady", "Ready"):
                _set_condition(status["conditions"], type_, "False", "PodCompleted")

    def _log(self) -> None:
        with open(self.log_path, "a") as log:
            for raw in self.proc.stdout:
                log.write(f"{now()} {raw.decode(errors='replace').rstrip()}\n")
                log.flush()

    def _termination_message(self, code: int) -> str:
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

    def _oom_kills(self) -> int:
        with open(os.path.join(self.cgroup, "memory.oom_control")) as f:
            return next((int(v) for k, v in (line.split() for line in f) if k == "oom_kill"), 0)

    def _watch_memory(self, limit: int) -> None:
        """Without a memory cgroup the kubelet kills the container once its processes' resident memory together
        exceeds the limit (the kernel's OOM kill, polled)."""
        proc = self.proc
        while proc.poll() is None:
            used = 0
            try:
                main = psutil.Process(proc.pid)
                tree = [main, *main.children(recursive=True)]
            except psutil.Error:  # the container ended meanwhile
                tree = []
            for p in tree:
                try:
                    used += p.memory_info().rss
                except psutil.Error:
                    pass
            if used > limit:
                self.oom_killed = True
                self._kill_all()
                return
            time.sleep(MEMORY_POLL_SECONDS)

    def _kill_all(self) -> None:
        """SIGKILL every process of the container: those in its cgroup, else those of its process group."""
        if not self.cgroup:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        deadline = time.monotonic() + GRACE_SECONDS
        while (pids := self._cgroup_pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def _cgroup_pids(self) -> list[int]:
        try:
            with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                return [int(pid) for pid in f.read().split()]
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet does (a container not started yet never
        starts); returns once the kubelet is done with the pod."""
        with self.lock:
            self.stopping.set()
            proc = self.proc
        if proc and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self._kill_all()
                proc.wait()
        if self.kubelet and self.kubelet is not threading.current_thread():
            self.kubelet.join(GRACE_SECONDS + 5)

    def release(self) -> None:
        """Tear down the pod's network namespace and cgroup (killing what is left in it)."""
        self.cluster.run("ip", "netns", "delete", self.netns, check=False)
        if self.cgroup and os.path.isdir(self.cgroup):
            self._kill_all()
            for _ in range(50):
                try:
                    os.rmdir(self.cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy while its last processes exit
                    time.sleep(0.1)


class Cluster:
    """The stand-in: ``start()`` serves the API on 127.0.0.1; ``kubeconfig`` points a client at it.
    ``images``: the image names its registry has (None: every image pulls); ``crds``: the Kubeflow kinds
    installed, by plural (``tfjobs``, ``mpijobs``); ``history_limit``: how many changes a watch may resume
    from."""

    def __init__(
        self, workdir: str, images: Iterable[str] | None = None, crds: Iterable[str] = (), history_limit: int = 10000
    ):
        self.id = f"{os.getpid() % 1000}{next(_clusters)}"
        self.workdir, self.bridge = workdir, f"tfd{self.id}br"
        self.subnet = f"10.{200 + os.getpid() % 50}.{self.id[-1]}"
        self.images = None if images is None else set(images)
        """The registry's images; a test may add one while a pod backs off pulling it."""
        self.crds = tuple(crds)
        if unknown := set(self.crds) - CRDS.keys():
            raise ValueError(f"unknown CRDs {sorted(unknown)}: choose from {sorted(CRDS)}")
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.pods: dict[str, Pod] = {}
        self.counted: dict[str, list[Pod]] = {}
        """By Job uid: its pods the Job controller counted and let go (deleted ones, then gone from the API)."""
        self.events: list[dict] = []
        self.created: list[tuple[str, str]] = []
        """(kind, name) of every object created through the API, in order."""
        self.cgroup: str | None = None
        """The memory cgroup holding the pods' (None: the kubelet polls memory use instead)."""
        self.lock, self.changed = threading.RLock(), threading.Event()
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
        self.addresses = (f"{self.subnet}.{n}" for n in itertools.count(2))
        self._stopping = False
        self.revision = 0
        """The newest resourceVersion given out: one counter for every kind, as etcd's revision."""
        self.history: collections.deque[tuple[int, str, tuple[str, str, str], str]] = collections.deque(
            maxlen=history_limit
        )
        """The last ``history_limit`` changes (resourceVersion, event type, key, the object as JSON): what a watch
        from an older resourceVersion would need is gone (410 Gone)."""
        self.recorded = threading.Condition()
        self._last: dict[tuple[str, str, str], str] = {}

    def run(self, *argv: str, check: bool = True) -> None:
        subprocess.run(argv, check=check, capture_output=True)

    def start(self) -> Cluster:
        if parent := _memory_cgroup():
            try:
                os.makedirs(path := os.path.join(parent, f"tfd{self.id}"), exist_ok=True)
                self.cgroup = path
            except OSError:
                pass
        self.run("ip", "link", "add", self.bridge, "type", "bridge")
        self.run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        self.run("ip", "link", "set", self.bridge, "up")
        handler = type("Handler", (_Handler,), {"cluster": self})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self._controllers = threading.Thread(target=self._control, daemon=True)
        self._controllers.start()
        self._recorder = threading.Thread(target=self._record_changes, daemon=True)
        self._recorder.start()
        return self

    def _record_changes(self) -> None:
        """Give every changed object a new resourceVersion and record the change for watches: the objects are
        compared with their last recorded state every RECORD_SECONDS (the controllers change them in place)."""
        while not self._stopping:
            time.sleep(RECORD_SECONDS)
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

    def drop_connections(self, seconds: float) -> None:
        """For ``seconds``, cut every GET's response off mid-body and close the connection: an API server
        restarting, or a connection dropped while a log streams."""
        self.outage_until = time.monotonic() + seconds

    @property
    def kubeconfig(self) -> dict:
        server = f"http://127.0.0.1:{self.server.server_address[1]}"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": server}}],
            "users": [{"name": "standin", "user": {"token": "standin"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin"}}],
        }

    def close(self) -> None:
        self._stopping = True
        self.server.shutdown()
        self.server.server_close()
        self.changed.set()
        self._controllers.join()
        self._recorder.join()
        pods = list(self.pods.values())
        _together(pod.stop for pod in pods)
        for pod in pods:
            pod.release()
        self.run("ip", "link", "delete", self.bridge, check=False)
        if self.cgroup:
            try:
                os.rmdir(self.cgroup)
            except OSError:
                pass

    def has_image(self, image: str) -> bool:
        return self.images is None or image_reference(image) in {image_reference(i) for i in self.images}

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

    def write_hosts(self) -> None:
        """Rewrite in place (the pods bind-mount these files) every pod's hosts file: the kubelet's (localhost,
        the pod's own names) and, standing in for cluster DNS, the A records of the headless Services."""
        with self.lock:
            records = []  # (namespace, address, names relative to the namespace)
            for (kind, ns, name), svc in self.objects.items():
                spec = svc.get("spec") or {}
                if kind != "Service" or spec.get("clusterIP") != "None" or not spec.get("selector"):
                    continue
                for pod in self.pods.values():
                    if (
                        pod.namespace == ns
                        and spec["selector"].items() <= pod.labels.items()
                        and pod.serves(spec.get("publishNotReadyAddresses", False))
                    ):
                        records.append(
                            (ns, pod.address, [name] + ([f"{pod.hostname}.{name}"] if pod.subdomain == name else []))
                        )
            for pod in self.pods.values():
                own = [f"{pod.hostname}.{pod.subdomain}.{pod.namespace}.svc.cluster.local"] if pod.subdomain else []
                lines = ["127.0.0.1 localhost", " ".join([pod.address, *own, pod.hostname])]
                for ns, address, names in records:
                    qualified = [f"{n}.{ns}{suffix}" for n in names for suffix in (".svc.cluster.local", ".svc", "")]
                    lines.append(" ".join([address, *qualified, *(names if ns == pod.namespace else [])]))
                with open(pod.hosts_path, "w") as f:
                    f.write("\n".join(lines) + "\n")

    def create(self, obj: dict, namespace: str, owner: dict | None = None) -> dict | None:
        """Store a new object as the API server does (uid, creation time, empty status, a Job's defaults; a
        controller's owner reference to ``owner``), then start what acts on it: a Job's pods, a Service's
        names. None when one of its kind and name exists (or ``owner`` is gone, or the cluster closes)."""
        kind, meta = obj["kind"], obj["metadata"]
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            **({"ownerReferences": [_owner_reference(owner)]} if owner else {}),
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
                self._stopping
                or (kind, namespace, meta["name"]) in self.objects
                or (
                    owner is not None
                    and self.objects.get((owner["kind"], namespace, owner["metadata"]["name"])) is not owner
                )
            ):
                return None
            self.objects[kind, namespace, meta["name"]] = obj
        if kind == "Job":
            self.create_pods(obj)
        elif kind == "Service":
            self.write_hosts()
        self.changed.set()
        return obj

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
                "ownerReferences": [_owner_reference(owner)],
                **({"finalizers": [JOB_TRACKING]} if owner["kind"] == "Job" else {}),
            },
            "spec": spec,
            "status": {"phase": "Pending", "conditions": []},
        }
        with self.lock:
            if self._stopping or self.objects.get((owner["kind"], meta["namespace"], meta["name"])) is not owner:
                return None
            self.objects["Pod", meta["namespace"], name] = obj
            self.pods[name] = Pod(self, obj, next(self.addresses))
            return self.pods[name]

    def _owned(self, owner: dict) -> list[Pod]:
        with self.lock:
            return [p for p in self.pods.values() if p.owned_by(owner)]

    def _control(self) -> None:
        """The controllers: each reconciles its objects on every change (a failed reconcile is logged and
        tried again, as a controller's work queue does)."""
        controllers = {"Job": self._reconcile, "TFJob": self._reconcile_tfjob, "MPIJob": self._reconcile_mpijob}
        while not self._stopping:
            self.changed.wait(0.5)
            self.changed.clear()
            with self.lock:
                jobs = [(kind, o) for (kind, _, _), o in self.objects.items() if kind in controllers]
            for kind, job in jobs:
                try:
                    controllers[kind](job)
                except Exception:
                    traceback.print_exc()

    # the Job controller -------------------------------------------------------------------------------

    def create_pods(self, job: dict, indexes: Iterable[int] | None = None) -> None:
        """Create the Job's pods: an Indexed Job's for its completion indexes (``indexes``: those to replace),
        each named ``<job>-<index>-<random>`` with host name ``<job>-<index>`` and its index; a NonIndexed
        Job's as many as it still needs, named ``<job>-<random>``."""
        meta, spec = job["metadata"], job["spec"]
        template, indexed = spec["template"], spec["completionMode"] == "Indexed"
        if indexes is None:
            indexes = range(spec["completions"] if indexed else min(spec["parallelism"], spec["completions"]))
        pods = []
        for index in indexes:
            name = f"{meta['name']}-{f'{index}-' if indexed else ''}{uuid.uuid4().hex[:5]}"
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
                **({INDEX: str(index)} if indexed else {}),
            }
            annotations = {
                **(template.get("metadata") or {}).get("annotations", {}),
                **({INDEX: str(index)} if indexed else {}),
            }
            pod_spec = copy.deepcopy(template["spec"])
            if indexed:
                pod_spec["hostname"] = f"{meta['name']}-{index}"
                for c in pod_spec["containers"]:
                    c["env"] = [
                        *c.get("env", []),
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}},
                        },
                    ]
            if pod := self.add_pod(job, name, labels, annotations, pod_spec):
                pods.append(pod)
        for pod in pods:
            pod.schedule()
        with self.lock:
            job["status"].update(active=job["status"].get("active", 0) + len(pods))
            job["status"].setdefault("startTime", now())

    def _reconcile(self, job: dict) -> None:
        """The Job controller: a pod failure matching a FailJob rule of the pod failure policy, or more failed
        pods than backoffLimit, fails the Job; fewer are replaced; the Job completes by its success policy or
        its completions."""
        status, spec = job["status"], job["spec"]
        self._count_terminated(job)
        if any(c["type"] in ("Complete", "Failed") for c in status.get("conditions", [])):
            return
        pods, indexed = (
            self._owned(job) + self.counted.get(job["metadata"]["uid"], []),
            spec["completionMode"] == "Indexed",
        )
        failed = [p for p in pods if p.phase == "Failed"]
        running = [p for p in pods if p.phase not in ("Succeeded", "Failed")]
        succeeded = [p for p in pods if p.phase == "Succeeded"]
        done = sorted({_index(p) for p in succeeded}) if indexed else []  # the completed indexes
        with self.lock:
            status.update(
                succeeded=len(succeeded),
                failed=len(failed),
                active=len(running),
                **({"completedIndexes": ",".join(map(str, done))} if indexed else {}),
            )
        conditions = []
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        hit = next(
            ((k, pod, why) for pod in failed for k, rule in enumerate(rules) if (why := self._rule_matches(rule, pod))),
            None,
        )
        if hit or len(failed) > spec["backoffLimit"]:
            reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            if hit:
                k, _pod, why = hit
                reason, message = "PodFailurePolicy", f"{why} at index {k}"
            conditions = [
                {"type": "FailureTarget", "status": "True", "reason": reason, "message": message},
                {"type": "Failed", "status": "True", "reason": reason, "message": message},
            ]
        else:
            wanted = [r["succeededIndexes"] for r in spec.get("successPolicy", {}).get("rules", [])]
            if any(set(map(int, w.split(","))) <= set(done) for w in wanted):
                conditions = [
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"},
                    {"type": "Complete", "status": "True", "reason": "SuccessPolicy"},
                ]
            elif len(done if indexed else succeeded) >= spec["completions"]:
                conditions = [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]
            elif failed:  # within backoffLimit: the failed pods are replaced
                wanted = min(spec["parallelism"], spec["completions"] - len(succeeded)) - len(running)
                self.create_pods(
                    job,
                    sorted(set(range(spec["completions"])) - set(done) - {_index(p) for p in running})
                    if indexed
                    else range(wanted),
                )
        if conditions:
            _together(p.stop for p in pods)  # lingering pods are terminated once the Job is finished
            for c in conditions:
                c["lastTransitionTime"] = now()
            with self.lock:
                status.update(
                    conditions=conditions, completionTime=now() if conditions[-1]["type"] == "Complete" else None
                )
            self.event(
                job,
                conditions[-1]["reason"],
                conditions[-1].get("message", ""),
                "Warning" if conditions[-1]["type"] == "Failed" else "Normal",
            )

    def _count_terminated(self, job: dict) -> None:
        """The job-tracking finalizer: a terminated pod is counted and its finalizer removed; one being deleted
        is then gone from the API (the controller keeps counting it)."""
        with self.lock:
            for pod in self._owned(job):
                meta = pod.obj["metadata"]
                if pod.phase not in ("Succeeded", "Failed") or JOB_TRACKING not in meta.get("finalizers", []):
                    continue
                meta["finalizers"].remove(JOB_TRACKING)
                if meta.get("deletionTimestamp"):
                    self.counted.setdefault(job["metadata"]["uid"], []).append(pod)
                    self.objects.pop(("Pod", pod.namespace, meta["name"]), None)
                    self.pods.pop(meta["name"], None)

    @staticmethod
    def _rule_matches(rule: dict, pod: Pod) -> str | None:
        """The real Job controller's message for a FailJob rule the pod matches (FailJob is the only action
        modelled), or None."""
        rule_text = f"matching {rule['action']} rule"
        if "onPodConditions" in rule:
            patterns = {(c["type"], c.get("status", "True")) for c in rule["onPodConditions"]}
            condition = next(
                (c["type"] for c in pod.obj["status"].get("conditions", []) if (c["type"], c["status"]) in patterns),
                None,
            )
            return (
                condition and f"Pod {pod.namespace}/{pod.obj['metadata']['name']} has condition {condition} {rule_text}"
            )
        code = (pod.terminated or {}).get("exitCode", 0)  # a pod stopped before its container ran has none
        codes, op = rule["onExitCodes"]["values"], rule["onExitCodes"]["operator"]
        if code != 0 and (code in codes) == (op == "In"):
            return (
                f"Container {pod.container['name']} for pod {pod.namespace}/{pod.obj['metadata']['name']} "
                f"failed with exit code {code} {rule_text}"
            )
        return None

    # the TFJob controller (Kubeflow training operator v1) ------------------------------------------------

    def _reconcile_tfjob(self, job: dict) -> None:
        """The operator's ReconcileJobs: a finished job's pods are cleaned up by its cleanPodPolicy; a new
        pod failure past runPolicy.backoffLimit fails the job and deletes all its pods and Services; else each
        replica type's missing pods and Services are created and the job's status follows its pods."""
        meta, status, policy = job["metadata"], job["status"], job["spec"].get("runPolicy") or {}
        replicas, pods = _tf_replicas(job["spec"]), self._owned(job)
        if not status.get("conditions"):
            with self.lock:
                _set_job_condition(status, "Created", "TFJobCreated", f"TFJob {meta['name']} is created.")
        if _true(status, "Succeeded") or _true(status, "Failed"):
            clean = policy.get("cleanPodPolicy") or "None"
            self._delete_replicas(
                job, [p for p in pods if clean == "All" or (clean == "Running" and p.phase in ("Running", "Pending"))]
            )
            if _true(status, "Succeeded"):
                with self.lock:
                    for counts in status.get("replicaStatuses", {}).values():
                        if active := counts.pop("active", 0):
                            counts["succeeded"] = counts.get("succeeded", 0) + active
            return
        failed = sum(p.phase == "Failed" for p in pods)
        active = sum(p.phase not in ("Succeeded", "Failed") for p in pods)
        known = sum(r.get("failed", 0) for r in status.get("replicaStatuses", {}).values())
        limit = policy.get("backoffLimit")
        if (
            limit is not None
            and failed > known
            and active != sum(r["replicas"] for r in replicas.values())
            and limit < 1
        ):
            message = f"Job {meta['name']} has failed because it has reached the specified backoff limit"
            with self.lock:
                status.setdefault("completionTime", now())
            self._delete_replicas(job, pods)
            self.event(job, "TFJobFailed", message)
            with self.lock:
                _set_job_condition(status, "Failed", "TFJobFailed", message)
            self.changed.set()
            return
        for rtype, spec in replicas.items():
            self._reconcile_replicas(job, rtype, spec, replicas, pods)
        self._update_tfjob_status(job, replicas, self._owned(job))

    def _reconcile_replicas(self, job: dict, rtype: str, spec: dict, replicas: dict, pods: list[Pod]) -> None:
        """ReconcilePods and ReconcileServices for one replica type: create the missing pods (and headless
        Services, one per pod), restart failed ones as the replica's restartPolicy says, count the rest."""
        meta, status, rt = job["metadata"], job["status"], rtype.lower()
        mine = {int(p.labels[f"{TF}replica-index"]): p for p in pods if p.labels.get(f"{TF}replica-type") == rt}
        counts = {"active": 0, "succeeded": 0, "failed": 0}
        created = []
        for index in range(spec["replicas"]):
            pod = mine.get(index)
            if pod is None:
                if pod := self._tf_pod(job, rtype, index, spec, replicas):
                    self.event(job, "SuccessfulCreatePod", f"Created pod: {pod.obj['metadata']['name']}")
                    created.append(pod)
                continue
            code = (pod.terminated or {}).get("exitCode")
            restart = spec["restartPolicy"] in ("OnFailure", "Always") or (
                spec["restartPolicy"] == "ExitCode" and code is not None and code >= 128
            )
            if pod.phase == "Failed" and restart:
                self._delete_replicas(job, [pod], services=False)
                message = f"job {meta['name']} is restarting because {rtype} replica(s) failed."
                self.event(job, "TFJobRestarting", message, "Warning")
                with self.lock:
                    _set_job_condition(status, "Restarting", "TFJobRestarting", message)
            elif pod.phase == "Failed" and spec["restartPolicy"] == "ExitCode":
                message = f'job "{meta["name"]}" is failing because "{rtype}" replica(s) failed.'
                self.event(job, "TFJobFailed", message, "Warning")
                with self.lock:
                    _set_job_condition(status, "Failed", "TFJobFailed", message)
            key = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(pod.phase)
            if key:
                counts[key] += 1
        with self.lock:
            status.setdefault("replicaStatuses", {})[rtype] = {k: v for k, v in counts.items() if v}
        for index in range(spec["replicas"]):
            name, labels = f"{meta['name']}-{rt}-{index}", _tf_labels(meta["name"], rt, index)
            ports = [
                {"name": p["name"], "port": p["containerPort"]}
                for p in _tf_container(spec).get("ports", [])
                if p.get("name")
            ]
            service = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": labels},
                "spec": {"clusterIP": "None", "selector": labels, "ports": ports},
            }
            if self.create(service, meta["namespace"], job):  # None: it exists
                self.event(job, "SuccessfulCreateService", f"Created service: {name}")
        for pod in created:
            pod.schedule()
        self.write_hosts()

    def _tf_pod(self, job: dict, rtype: str, index: int, spec: dict, replicas: dict) -> Pod | None:
        """The replica's pod, as the operator makes it from the replica's template: named
        ``<job>-<type>-<index>``, labelled, its restartPolicy the replica's, TF_CONFIG added to the
        ``tensorflow`` container when the job has more than one replica."""
        meta, rt = job["metadata"], rtype.lower()
        template = copy.deepcopy(spec["template"])
        labels = {**(template.get("metadata") or {}).get("labels", {}), **_tf_labels(meta["name"], rt, index)}
        has_chief = bool({"Chief", "Master"} & replicas.keys())
        if rtype in ("Chief", "Master") if has_chief else (rtype, index) == ("Worker", 0):
            labels[f"{TF}job-role"] = "master"
        pod_spec = template["spec"]
        if pod_spec.get("restartPolicy"):
            self.event(
                job,
                "SetPodTemplateRestartPolicy",
                "Restart policy in pod template will be overwritten by restart policy in replica spec",
                "Warning",
            )
        pod_spec["restartPolicy"] = "Never" if spec["restartPolicy"] == "ExitCode" else spec["restartPolicy"]
        if sum(r["replicas"] for r in replicas.values()) != 1:
            cluster = {
                t.lower(): [
                    f"{meta['name']}-{t.lower()}-{i}.{meta['namespace']}.svc:{_tf_port(r)}"
                    for i in range(r["replicas"])
                ]
                for t, r in sorted(replicas.items(), key=lambda kv: kv[0].lower())
            }
            tf_config = json.dumps(
                {"cluster": cluster, "task": {"type": rt, "index": index}, "environment": "cloud"},
                separators=(",", ":"),
            )
            for c in pod_spec["containers"]:
                if c["name"] == "tensorflow":
                    c["env"] = [*c.get("env", []), {"name": "TF_CONFIG", "value": tf_config}]
        annotations = (template.get("metadata") or {}).get("annotations", {})
        return self.add_pod(job, f"{meta['name']}-{rt}-{index}", labels, annotations, pod_spec)

    def _update_tfjob_status(self, job: dict, replicas: dict, pods: list[Pod]) -> None:
        """UpdateJobStatus: Running while the chief (else a worker) runs; Succeeded once the chief did (else
        worker 0, or every worker with successPolicy AllWorkers); Failed once a replica failed, unless the job
        is restarting it."""
        meta, status = job["metadata"], job["status"]
        ref = f"{meta['namespace']}/{meta['name']}"
        restarting = next((c for c in status.get("conditions", []) if c["type"] == "Restarting"), None)
        worker0 = "Worker" not in replicas or any(
            p.labels.get(f"{TF}replica-type") == "worker"
            and p.labels.get(f"{TF}replica-index") == "0"
            and p.phase == "Succeeded"
            and p.terminated["exitCode"] == 0
            for p in pods
        )
        has_chief = bool({"Chief", "Master"} & replicas.keys())
        with self.lock:
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
            with self.lock:
                if is_running:
                    _set_job_condition(status, "Running", "TFJobRunning", f"TFJob {ref} is running.")
                if succeeded:
                    status.setdefault("completionTime", now())
                    _set_job_condition(status, "Succeeded", "TFJobSucceeded", f"TFJob {ref} successfully completed.")
            if succeeded:
                self.event(job, "TFJobSucceeded", f"TFJob {ref} successfully completed.")
            if failed and restarting:
                with self.lock:
                    _set_job_condition(status, "Restarting", restarting["reason"], restarting["message"])
            elif failed:
                message = f"TFJob {ref} has failed because {failed} {rtype} replica(s) failed."
                self.event(job, "TFJobFailed", message)
                with self.lock:
                    status.setdefault("completionTime", now())
                    _set_job_condition(status, "Failed", "TFJobFailed", message)
        if _true(status, "Succeeded") or _true(status, "Failed"):
            self.changed.set()  # the status update brings the next reconcile: the clean-up

    def _delete_replicas(self, job: dict, pods: list[Pod], services: bool = True) -> None:
        """DeletePodsAndServices: each pod, and its Service (same name)."""

        def delete(pod: Pod) -> None:
            name = pod.obj["metadata"]["name"]
            if self.delete("Pod", pod.namespace, name):
                self.event(job, "SuccessfulDeletePod", f"Deleted pod: {name}")
            if services and self.delete("Service", pod.namespace, name):
                self.event(job, "SuccessfulDeleteService", f"Deleted service: {name}")

        _together(lambda p=p: delete(p) for p in pods)

    # the MPIJob controller (Kubeflow's MPI operator v2beta1, v0.6) ---------------------------------------

    def _reconcile_mpijob(self, job: dict) -> None:
        """The operator's syncHandler: a finished job's workers are cleaned up by its cleanPodPolicy; until
        the launcher Job ended, the job's headless Service, ConfigMap (hostfile, discover_hosts.sh), SSH Secret
        and missing worker pods are created, and the launcher Job at once (launcherCreationPolicy AtStartup)
        or once every worker is ready (WaitForWorkersReady); the job's status follows the launcher Job and
        the workers (a failed worker does not fail the job: mpirun in the launcher does)."""
        meta, spec, status = job["metadata"], job["spec"], job["status"]
        name, ns = meta["name"], meta["namespace"]
        if not status.get("conditions"):
            with self.lock:
                _set_job_condition(status, "Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
            self.event(job, "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
        workers = self._owned(job)  # the launcher's pod is its Job's
        if (_true(status, "Succeeded") or _true(status, "Failed")) and status.get("completionTime"):
            clean = (spec.get("runPolicy") or {}).get("cleanPodPolicy") or "None"
            if clean in ("All", "Running"):
                _together(
                    lambda p=p: self.delete("Pod", ns, p.obj["metadata"]["name"])
                    for p in workers
                    if clean == "All" or p.phase in ("Running", "Pending")
                )
                with self.lock:
                    status.setdefault("replicaStatuses", {})["Worker"] = {}
            return
        with self.lock:
            status.setdefault("startTime", now())
            launcher = self.objects.get(("Job", ns, f"{name}-launcher"))
        if launcher is not None and (_true(launcher["status"], "Complete") or _true(launcher["status"], "Failed")):
            workers = []
        else:
            self._mpi_objects(job, workers)
            workers = self._mpi_workers(job, workers)
            ready = all(_true(p.obj["status"], "Ready") for p in workers)
            if launcher is None and (spec.get("launcherCreationPolicy", "AtStartup") == "AtStartup" or ready):
                launcher = self.create(self._mpi_launcher(job), ns, job)
        self._update_mpijob_status(job, launcher, workers)

    def _mpi_objects(self, job: dict, workers: list[Pod]) -> None:
        """The job's Service (named as the job, selecting its launcher and workers), ConfigMap (its
        discover_hosts.sh naming the running workers) and Secret (a new ECDSA P-521 key pair), created as
        missing."""
        meta, spec = job["metadata"], job["spec"]
        name, ns, slots = meta["name"], meta["namespace"], spec.get("slotsPerWorker", 1)
        hosts = [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(_mpi_worker_replicas(job))]
        running = sorted(p.obj["metadata"]["name"] for p in workers if p.phase == "Running")
        data = {
            "hostfile": "".join(f"{h} slots={slots}\n" for h in hosts),
            "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {p}.{name}.{ns}.svc\n" for p in running),
        }
        with self.lock:
            config = self.objects.get(("ConfigMap", ns, f"{name}-config"))
            if config is not None:
                config["data"] = data
        if config is None:
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"{name}-config", "labels": {"app": name}},
                    "data": data,
                },
                ns,
                job,
            )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"clusterIP": "None", "selector": _mpi_labels(name)},
            },
            ns,
            job,
        )  # unless it exists
        if ("Secret", ns, f"{name}-ssh") not in self.objects:
            key = ec.generate_private_key(ec.SECP521R1())
            private = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
            public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/ssh-auth",
                    "metadata": {"name": f"{name}-ssh", "labels": {"app": name}},
                    "data": {
                        "ssh-privatekey": base64.b64encode(private).decode(),
                        "ssh-publickey": base64.b64encode(public + b"\n").decode(),
                    },
                },
                ns,
                job,
            )

    def _mpi_workers(self, job: dict, pods: list[Pod]) -> list[Pod]:
        """The worker pods ``<job>-worker-<i>``, in index order, created as missing from the Worker template:
        host name under the job's Service, ``/usr/sbin/sshd -De`` when it has no command, the SSH Secret."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        replica = job["spec"]["mpiReplicaSpecs"].get("Worker")
        mine, created, count = {p.obj["metadata"]["name"]: p for p in pods}, [], _mpi_worker_replicas(job)
        for i in range(count):
            if f"{name}-worker-{i}" in mine:
                continue
            template = copy.deepcopy(replica["template"])
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                **_mpi_labels(name, "worker"),
                f"{TF}replica-index": str(i),
            }
            pod_spec = {**template["spec"], "hostname": f"{name}-worker-{i}", "subdomain": name}
            dns = pod_spec.setdefault("dnsConfig", {})
            dns["searches"] = [*dns.get("searches", []), f"{name}.{ns}.svc.cluster.local"]
            container = pod_spec["containers"][0]
            if not container.get("command") and not container.get("args"):
                container["command"] = ["/usr/sbin/sshd", "-De"]
            container["env"] = [*container.get("env", []), {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
            self._mpi_pod(job, replica, pod_spec)
            annotations = (template.get("metadata") or {}).get("annotations", {})
            if pod := self.add_pod(job, f"{name}-worker-{i}", labels, annotations, pod_spec):
                mine[pod.obj["metadata"]["name"]] = pod
                created.append(pod)
        for pod in created:
            pod.schedule()
        return [mine[f"{name}-worker-{i}"] for i in range(count) if f"{name}-worker-{i}" in mine]

    def _mpi_launcher(self, job: dict) -> dict:
        """The launcher Job ``<job>-launcher``: backoffLimit, activeDeadlineSeconds and ttlSecondsAfterFinished
        from runPolicy; its pod the Launcher template with host name ``<job>-launcher`` under the job's
        Service, OpenMPI's settings in its first container's env, the hostfile at /etc/mpi."""
        meta, spec = job["metadata"], job["spec"]
        name, replica = meta["name"], spec["mpiReplicaSpecs"]["Launcher"]
        template = copy.deepcopy(replica["template"])
        template["metadata"] = {
            **(template.get("metadata") or {}),
            "labels": {**(template.get("metadata") or {}).get("labels", {}), **_mpi_labels(name, "launcher")},
        }
        pod_spec = template["spec"]
        pod_spec.update(hostname=f"{name}-launcher", subdomain=name)
        container = pod_spec["containers"][0]
        container["env"] = [
            *container.get("env", []),
            *(
                {"name": k, "value": v}
                for k, v in (
                    ("K_MPI_JOB_ROLE", "launcher"),
                    ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                    ("OMPI_MCA_orte_default_hostfile", f"{MPI_CONFIG}/hostfile"),
                    ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                    ("OMPI_MCA_orte_set_default_slots", str(spec.get("slotsPerWorker", 1))),
                )
            ),
            {"name": "NVIDIA_VISIBLE_DEVICES"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES"},
        ]
        if pod_spec.get("restartPolicy"):
            self.event(
                job,
                "SetPodTemplateRestartPolicy",
                "Restart policy in pod template overridden by restart policy in replica spec",
                "Warning",
            )
        self._mpi_pod(job, {"restartPolicy": "OnFailure", **replica}, pod_spec)
        pod_spec["volumes"].append(
            {
                "name": "mpi-job-config",
                "configMap": {
                    "name": f"{name}-config",
                    "items": [
                        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                    ],
                },
            }
        )
        container["volumeMounts"].append({"name": "mpi-job-config", "mountPath": MPI_CONFIG})
        policy = spec.get("runPolicy") or {}
        keys = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-launcher", "labels": {"app": name}},
            "spec": {**{k: policy[k] for k in keys if policy.get(k) is not None}, "template": template},
        }

    @staticmethod
    def _mpi_pod(job: dict, replica: dict, pod_spec: dict) -> None:
        """What launcher and workers share: the replica's restartPolicy, and the job's SSH Secret (id_rsa,
        id_rsa.pub, authorized_keys; mode 0600 at /root/.ssh, else the default 0644) mounted at
        sshAuthMountPath in the first container."""
        name, path = job["metadata"]["name"], job["spec"].get("sshAuthMountPath", "/root/.ssh")
        policy = replica.get("restartPolicy", "Never")
        pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        secret = {
            "secretName": f"{name}-ssh",
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
        }
        if path == "/root/.ssh":
            secret["defaultMode"] = 0o600
        pod_spec["volumes"] = [*pod_spec.get("volumes", []), {"name": "ssh-auth", "secret": secret}]
        container = pod_spec["containers"][0]
        container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "ssh-auth", "mountPath": path}]

    def _update_mpijob_status(self, job: dict, launcher: dict | None, workers: list[Pod]) -> None:
        """updateMPIJobStatus: Succeeded or Failed with the launcher Job (a backoff limit reached names the last
        failed pod's reason and message), Failed when workers were evicted, Running while the launcher's pod
        and every worker run; replicaStatuses of Launcher and Worker."""
        meta, status = job["metadata"], job["status"]
        ref = f"{meta['namespace']}/{meta['name']}"
        running = 0
        if launcher is not None:
            pods, launched = self._owned(launcher), launcher["status"]
            running = sum(p.phase == "Running" for p in pods)
            counts = {"failed": launched.get("failed", 0)}
            if _true(launched, "Complete"):
                counts["succeeded"] = 1
                self.event(job, "MPIJobSucceeded", f"MPIJob {ref} successfully completed.")
                with self.lock:
                    status.setdefault("completionTime", launched.get("completionTime") or now())
                    _set_job_condition(status, "Succeeded", "MPIJobSucceeded", f"MPIJob {ref} successfully completed.")
            elif _true(launched, "Failed"):
                failed = next(c for c in launched["conditions"] if c["type"] == "Failed")
                reason = failed.get("reason") or "MPIJobFailed"
                message = failed.get("message") or f"MPIJob {ref} has failed"
                last = max(
                    (p for p in pods if p.phase == "Failed"),
                    default=None,
                    key=lambda p: p.obj["metadata"]["creationTimestamp"],
                )
                if reason == "BackoffLimitExceeded" and last:
                    reason += "/" + last.obj["status"].get("reason", "")
                    message += ": " + last.obj["status"].get("message", "")
                self.event(job, reason, message, "Warning")
                with self.lock:
                    status.setdefault("completionTime", now())
                    _set_job_condition(status, "Failed", reason, message)
            else:
                counts["active"] = running
            with self.lock:
                status.setdefault("replicaStatuses", {})["Launcher"] = {k: v for k, v in counts.items() if v}
        phases = [p.phase for p in workers]
        evicted = sum(p.phase == "Failed" and p.obj["status"].get("reason") == "Evicted" for p in workers)
        with self.lock:
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
                _set_job_condition(status, "Failed", "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted")
        if evicted:
            self.event(job, "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted", "Warning")
        if launcher is not None and running and phases.count("Running") == len(workers):
            with self.lock:
                _set_job_condition(status, "Running", "MPIJobRunning", f"MPIJob {ref} is running.")
            self.event(job, "MPIJobRunning", f"MPIJob {ref} is running")
        if _true(status, "Succeeded") or _true(status, "Failed"):
            self.changed.set()  # the next reconcile: the clean-up

    # the API server and the garbage collector ------------------------------------------------------------

    def delete(
        self, kind: str, namespace: str, name: str, propagation: str | None = None, collected: bool = False
    ) -> dict | None:
        """Delete the object, and, unless the propagation policy is Orphan (for batch/v1 Jobs the default,
        as the API server's), its dependents: the objects whose owner references name it (``collected``: as
        such a dependent). A pod with a finalizer is only marked (deletionTimestamp) and stopped; it stays
        until its finalizer is removed (see ``_count_terminated``), except when collected with its Job (the
        controller lets a deleted Job's pods go)."""
        with self.lock:
            obj = self.objects.get((kind, namespace, name))
            if obj and kind == "Pod" and obj["metadata"].get("finalizers") and not collected:
                first = not obj["metadata"].get("deletionTimestamp")
                obj["metadata"].setdefault("deletionTimestamp", now())
                obj["metadata"].setdefault("deletionGracePeriodSeconds", int(GRACE_SECONDS))
                if first:
                    threading.Thread(target=self._terminate, args=(self.pods[name],), daemon=True).start()
                return obj
            obj = self.objects.pop((kind, namespace, name), None)
            pod = self.pods.pop(name, None) if obj and kind == "Pod" else None
            if obj is None:
                return None
            uid = obj["metadata"]["uid"]
            dependents = [
                (key, o)
                for key, o in self.objects.items()
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))
            ]
            policy = propagation or ("Orphan" if kind == "Job" else "Background")
            if policy == "Orphan":
                for _, o in dependents:
                    o["metadata"]["ownerReferences"] = [r for r in o["metadata"]["ownerReferences"] if r["uid"] != uid]
                dependents = []
        _together(lambda k=k: self.delete(*k, policy, collected=True) for k, _ in dependents)  # as the owner's
        self.counted.pop(uid, None)
        if pod:
            pod.stop()
        if kind in ("Pod", "Service"):
            self.write_hosts()
        self.changed.set()
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
            _set_condition(
                pod.obj["status"].setdefault("conditions", []),
                "DisruptionTarget",
                "True",
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
            )
        threading.Thread(target=self.delete, args=("Pod", namespace, name), daemon=True).start()
        return True

    def served(self, group: str, version: str, plural: str) -> str | None:
        """The kind of an installed custom resource, or None."""
        return CRDS[plural][2] if plural in self.crds and CRDS[plural][:2] == (group, version) else None

    def api_groups(self) -> dict:
        """The APIGroupList: batch, and kubeflow.org with the versions of its installed CRDs (GA first)."""
        kubeflow = [v for v in ("v1", "v2beta1") if any(CRDS[p][1] == v for p in self.crds)]
        groups = [("batch", ["v1"])] + ([("kubeflow.org", kubeflow)] if kubeflow else [])
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]},
                }
                for g, versions in groups
            ],
        }

    def api_resources(self, group: str, version: str) -> dict | None:
        """The APIResourceList of a group version (None when none is served): each resource and its status."""
        served = (
            [("jobs", "Job")]
            if (group, version) == ("batch", "v1")
            else [(p, CRDS[p][2]) for p in self.crds if CRDS[p][:2] == (group, version)]
        )
        if not served:
            return None
        resources = []
        for plural, kind in served:
            resources += [
                {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind, "verbs": VERBS},
                {
                    "name": f"{plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": kind,
                    "verbs": ["get", "patch", "update"],
                },
            ]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}",
            "resources": resources,
        }


def _tf_replicas(spec: dict) -> dict[str, dict]:
    """spec.tfReplicaSpecs with the operator's defaults: type names in camel case, one replica, restartPolicy
    Never, and the ``tfjob-port`` (2222) on the ``tensorflow`` container."""
    replicas = {}
    for key, replica in spec["tfReplicaSpecs"].items():
        replica = {"replicas": 1, "restartPolicy": "Never", **copy.deepcopy(replica)}
        container = _tf_container(replica)
        if not any(p.get("name") == "tfjob-port" for p in container.get("ports", [])):
            container["ports"] = [*container.get("ports", []), {"name": "tfjob-port", "containerPort": 2222}]
        replicas[next((t for t in TF_TYPES if t.lower() == key.lower()), key)] = replica
    return replicas


def _tf_container(replica: dict) -> dict:
    """The replica's ``tensorflow`` container (else its first, as the operator's defaulting picks)."""
    containers = replica["template"]["spec"]["containers"]
    return next((c for c in containers if c["name"] == "tensorflow"), containers[0])


def _tf_port(replica: dict) -> int:
    container = next((c for c in replica["template"]["spec"]["containers"] if c["name"] == "tensorflow"), {})
    return next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "tfjob-port"), 2222)


def _tf_labels(job: str, rt: str, index: int) -> dict[str, str]:
    return {
        f"{TF}operator-name": "tfjob-controller",
        f"{TF}job-name": job,
        f"{TF}replica-type": rt,
        f"{TF}replica-index": str(index),
    }


def _mpi_worker_replicas(job: dict) -> int:
    """spec.mpiReplicaSpecs.Worker.replicas, defaulted as the operator does (no Worker, or none: 0)."""
    return (job["spec"]["mpiReplicaSpecs"].get("Worker") or {}).get("replicas", 0)


def _mpi_labels(job: str, role: str | None = None) -> dict[str, str]:
    """The MPI operator's labels of a job's pods (its Service selects them without the role)."""
    return {f"{TF}operator-name": MPI_OPERATOR, f"{TF}job-name": job, **({f"{TF}job-role": role} if role else {})}


def _owner_reference(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


ROUTES = [
    (re.compile(p), kind)
    for p, kind in (
        (r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?(?:/status)?$", "Job"),
        (r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$", "Service"),
        (r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/status)?$", "Pod"),
        (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log)$", "Log"),
        (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(eviction)$", "Eviction"),
        (r"^/api/v1/namespaces/([^/]+)/events$", "Event"),
        (r"^/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?$", "ConfigMap"),
        (r"^/api/v1/namespaces/([^/]+)/secrets(?:/([^/]+))?$", "Secret"),
    )
]
CUSTOM_ROUTE = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+)(?:/status)?)?$")
DISCOVERY_ROUTE = re.compile(r"^/apis(?:/([^/]+)/([^/]+))?/?$")


class _Handler(http.server.BaseHTTPRequestHandler):
    cluster: Cluster
    protocol_version = "HTTP/1.1"
    what = ""
    """The request being answered, as counted in ``Cluster.requests``."""

    def log_message(self, *args) -> None:
        pass

    def _route(self) -> tuple[str | None, str, str | None, dict]:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        for pattern, kind in ROUTES:
            if m := pattern.match(url.path):
                return kind, m.group(1), m.group(2) if m.lastindex and m.lastindex >= 2 else None, query
        if m := CUSTOM_ROUTE.match(url.path):
            return self.cluster.served(m[1], m[2], m[4]), m[3], m[5], query
        return None, "", None, query

    def _admitted(self, method: str, name: str | None, query: dict) -> bool:
        """Count the request by verb and resource; False (answered 403) when RBAC denies the verb."""
        parts = urllib.parse.urlsplit(self.path).path.split("/")
        at = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts) - 1
        resource = "/".join(parts[at : at + 1] + parts[at + 2 : at + 3])
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or (
            "get" if name else "watch" if _flag(query, "watch") else "list"
        )
        self.what = f"{verb} {resource}"
        self.cluster.requests[self.what] += 1
        if (verb, resource) in self.cluster.forbidden:
            self._status(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "system:serviceaccount:tfdist:airflow" '
                f'cannot {verb} resource "{resource}" in the namespace',
            )
            return False
        return True

    def _send(self, code: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.cluster.bytes_sent[self.what] += len(data)
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
        )

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else {}

    def do_GET(self) -> None:
        c, self.what = self.cluster, ""
        if time.monotonic() < c.outage_until:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(b'{"kind": ')
            self.close_connection = True
            return
        if m := DISCOVERY_ROUTE.match(urllib.parse.urlsplit(self.path).path):
            found = c.api_resources(m[1], m[2]) if m[1] else c.api_groups()
            return (
                self._send(200, found)
                if found
                else self._status(404, "NotFound", "the server could not find the requested resource")
            )
        kind, namespace, name, query = self._route()
        if not self._admitted("GET", name, query):
            return None
        if kind == "Log":
            return self._log(namespace, name, query)
        if kind not in (None, "Event") and not name and _flag(query, "watch"):
            return self._watch(kind, namespace, query)
        if kind == "Event":
            wanted = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
            with c.lock:
                items = copy.deepcopy(
                    [
                        e
                        for e in c.events
                        if e["metadata"]["namespace"] == namespace
                        and (not wanted or e["involvedObject"]["name"] == wanted)
                    ]
                )
            return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})
        if kind is None:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        with c.lock:  # a copy, as the controllers change objects meanwhile
            obj = copy.deepcopy(c.objects.get((kind, namespace, name))) if name else None
            items = (
                []
                if name
                else copy.deepcopy(
                    [o for (k, ns, _), o in c.objects.items() if k == kind and ns == namespace and _selected(o, query)]
                )
            )
            revision = c.revision
        if name:
            return self._send(200, obj) if obj else self._status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        self._send(
            200,
            {
                "kind": f"{kind}List",
                "apiVersion": API_VERSIONS[kind],
                "metadata": {"resourceVersion": str(revision)},
                "items": items,
            },
        )

    def _watch(self, kind: str, namespace: str, query: dict) -> None:
        """A watch: the changes after ``resourceVersion`` (without one: every object as ADDED first), as JSON
        lines of a chunked response, with bookmarks when asked; a resourceVersion older than the cluster's
        history gets a 410 Expired ERROR event, as from a real API server's watch cache."""
        c, cursor = self.cluster, int(query.get("resourceVersion") or 0)
        ends = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks, bookmarked = _flag(query, "allowWatchBookmarks"), time.monotonic()
        with c.lock:
            if cursor:
                events = c.changes_after(cursor)
            else:
                events = [
                    ("ADDED", copy.deepcopy(o)) for (k, ns, _), o in c.objects.items() if (k, ns) == (kind, namespace)
                ]
                cursor = c.revision
        self._start_stream()
        try:
            while events is not None and not c._stopping and time.monotonic() < ends:
                if time.monotonic() < c.outage_until:
                    self.close_connection = True  # cut off: no closing chunk
                    return
                for type_, obj in events:
                    if obj["kind"] == kind and obj["metadata"]["namespace"] == namespace and _selected(obj, query):
                        self._chunk({"type": type_, "object": obj})
                    cursor = max(cursor, int(obj["metadata"].get("resourceVersion") or cursor))
                if bookmarks and time.monotonic() - bookmarked > BOOKMARK_SECONDS:
                    self._chunk(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind,
                                "apiVersion": API_VERSIONS[kind],
                                "metadata": {"resourceVersion": str(cursor)},
                            },
                        }
                    )
                    bookmarked = time.monotonic()
                with c.recorded:
                    c.recorded.wait(0.2)
                with c.lock:
                    events = c.changes_after(cursor)
            if events is None:
                self._chunk(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "Expired",
                            "code": 410,
                            "message": f"too old resource version: {cursor} ({c.history[0][0] - 1})",
                        },
                    }
                )
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _start_stream(self, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, body: dict | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode() + b"\n"
        self.cluster.bytes_sent[self.what] += len(data)
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _log(self, namespace: str, name: str, query: dict) -> None:
        pod = self.cluster.pods.get(name)
        if pod is None or pod.namespace != namespace:
            return self._status(404, "NotFound", f'pods "{name}" not found')
        waiting = ((pod.obj["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting")
        if waiting:  # as the kubelet answers for a container that never started
            why = (
                "trying and failing to pull image"
                if waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")
                else waiting["reason"]
            )
            return self._status(
                400, "BadRequest", f'container "{pod.container["name"]}" in pod "{name}" is waiting to start: {why}'
            )
        if _flag(query, "follow"):
            return self._follow_log(pod, query)
        lines = open(pod.log_path).read().splitlines() if os.path.exists(pod.log_path) else []
        self._send(200, "".join(_log_lines(lines, query, first=True)))

    def _follow_log(self, pod: Pod, query: dict) -> None:
        """A followed log: its lines so far, then each new one, until the container ended and its last line was
        sent (the stream then ends, as the kubelet's)."""
        self._start_stream("text/plain")
        first, ended, pending, log = True, False, b"", None
        try:
            while not ended:
                ended = bool(pod.terminated) or pod.stopping.is_set() or self.cluster._stopping
                if time.monotonic() < self.cluster.outage_until:
                    self.close_connection = True  # cut off: no closing chunk
                    return
                if log is None and os.path.exists(pod.log_path):
                    log = open(pod.log_path, "rb")
                whole, _, pending = (pending + (log.read() if log else b"")).rpartition(b"\n")  # whole lines only
                if lines := _log_lines(whole.decode(errors="replace").splitlines(), query, first):
                    self._chunk("".join(lines).encode())
                first = False
                time.sleep(0 if ended else LOG_FOLLOW_SECONDS)
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if log:
                log.close()

    def do_POST(self) -> None:
        kind, namespace, name, query = self._route()
        obj = self._body()
        if not self._admitted("POST", name, query):
            return None
        if kind == "Eviction":
            if not self.cluster.evict(namespace, name):
                return self._status(404, "NotFound", f'pods "{name}" not found')
            return self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if kind is None:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        if kind in ("Pod", "Log", "Event") or name:
            return self._status(405, "MethodNotAllowed", f"cannot create at {self.path}")
        name, c = obj["metadata"]["name"], self.cluster
        if c.create(obj, namespace) is None:
            return self._status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        with c.lock:
            c.created.append((kind, name))
            created = copy.deepcopy(obj)
        time.sleep(c.create_delay)
        self._send(201, created)

    def do_DELETE(self) -> None:
        kind, namespace, name, query = self._route()
        options = self._body()
        if not self._admitted("DELETE", name, query):
            return None
        propagation = (
            query.get("propagationPolicy")
            or options.get("propagationPolicy")
            or ("Orphan" if options.get("orphanDependents") else None)
        )
        obj = self.cluster.delete(kind, namespace, name, propagation) if kind and name else None
        if obj is None:
            return self._status(404, "NotFound", f'{(kind or "object").lower()}s "{name}" not found')
        if kind == "Pod":  # the API server answers a pod's deletion with the pod
            with self.cluster.lock:
                body = copy.deepcopy(obj)
            return self._send(200, body)
        group = API_VERSIONS[kind].rpartition("/")[0]
        self._send(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Success",
                "details": {"name": name, "group": group, "kind": f"{kind.lower()}s", "uid": obj["metadata"]["uid"]},
            },
        )
