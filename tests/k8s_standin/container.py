"""The process kubelet's container: its command run as real processes in the pod's network namespace, its own
mount and UTS namespaces (and a user namespace when it runs as another user), its memory cgroup; its output
relayed to the pod's log; how it ended (exit code, OOM kill). Needs root."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING

import psutil

from tests.k8s_standin import timing
from tests.k8s_standin.common import NODE, memory_bytes, now
from tests.k8s_standin.volumes import Mount, image_files, secret_env

if TYPE_CHECKING:
    from tests.k8s_standin.pods import Pod

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
  if [ ! -e "$2" ]; then mkdir -p "$(dirname "$2")"; if [ -d "$1" ]; then mkdir -p "$2"; else : > "$2"; fi; fi
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
left, empty: the least a bind mount needs (pods starting together may both create it: ``mkdir -p``)."""
JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
"""Run in the pod's cgroup (joined before ``ip netns exec``, whose fresh /sys has no cgroup file systems)."""


def environment(pod: Pod) -> dict[str, str]:
    """The container's environment: its Secrets' variables (envFrom), its env (values, and fields of the pod the
    kubelet fills in), HOSTNAME, HOME, and, standing in for the image, this machine's PATH (its ``python`` has
    tfdist installed)."""
    env = {"HOSTNAME": pod.hostname, "HOME": pod.user[2], **secret_env(pod)}  # HOME: the runtime's, from the user
    meta = pod.obj["metadata"]
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": NODE,
        "status.podIP": pod.address,
        "status.hostIP": f"{pod.cluster.subnet}.1",
    }
    for var in pod.container.get("env", []):
        path = (var.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        if m := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path or ""):
            env[var["name"]] = (meta.get(m[1]) or {}).get(m[2], "")
        elif path in fields:
            env[var["name"]] = fields[path]
        elif "valueFrom" not in var:
            env[var["name"]] = var.get("value", "")
    return {**env, "PATH": os.environ["PATH"]}


def memory_limit(pod: Pod) -> int | None:
    """The container's memory limit in bytes, written to its cgroup when it has one."""
    memory = ((pod.container.get("resources") or {}).get("limits") or {}).get("memory")
    limit = memory_bytes(memory) if memory else None
    if pod.cgroup:
        os.makedirs(pod.cgroup, exist_ok=True)
        with open(os.path.join(pod.cgroup, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit or -1))
    return limit


def command_line(pod: Pod, volumes: list[Mount]) -> list[str]:
    """Enter the pod's cgroup, network namespace, own mount and UTS namespaces (set up by CONTAINER_SETUP with
    the container's bind mounts) and user namespace (not root), then run the container's command."""
    container = pod.container
    command = [sys.executable if a == "python" else a for a in [*container["command"], *container.get("args", [])]]
    mounts = [
        (pod.hosts_path, "/etc/hosts", "rw"),
        (pod.message_path, container["terminationMessagePath"], "rw"),
        *image_files(pod),
        *volumes,
    ]
    enter = ["ip", "netns", "exec", pod.netns, "unshare", "-mu", "sh", "-c", CONTAINER_SETUP, pod.hostname]
    enter += [*itertools.chain.from_iterable(mounts), "--"]
    if (user := pod.user)[0]:
        enter += ["unshare", "--user", f"--map-user={user[0]}", f"--map-group={user[1]}", "--"]
    if pod.cgroup:
        enter = ["sh", "-c", JOIN_CGROUP, os.path.join(pod.cgroup, "cgroup.procs"), *enter]
    return [*enter, *command]


def run(pod: Pod, volumes: list[Mount]) -> None:
    """Start the container in the pod's namespaces and cgroup, as its user (not root: in a user namespace
    mapping that user to this machine's root), relay its output to the pod's log, and report how it ended
    once its main process did (its other processes are then killed)."""
    limit = memory_limit(pod)
    argv = command_line(pod, volumes)
    with pod.lock:
        if pod.stopping.is_set():
            return
        pod.proc = subprocess.Popen(
            argv,
            env=environment(pod),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    container_id, started = f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}", now()
    pod.running(started, container_id)
    pod.cluster.write_hosts()
    pod.cluster.changed.set()
    if limit and not pod.cgroup:
        threading.Thread(target=watch_memory, args=(pod, limit), daemon=True).start()
    log = threading.Thread(target=relay_output, args=(pod,), daemon=True)
    log.start()
    code = pod.proc.wait()
    kill_all(pod)
    log.join()
    code = code if code >= 0 else 128 - code
    pod.ended(code, pod.oom_killed or bool(pod.cgroup and oom_kills(pod)), started, container_id)


def relay_output(pod: Pod) -> None:
    with open(pod.log_path, "a") as log:
        for raw in pod.proc.stdout:
            pod.log_line(log, raw.decode(errors="replace").rstrip())


def oom_kills(pod: Pod) -> int:
    with open(os.path.join(pod.cgroup, "memory.oom_control")) as f:
        return next((int(v) for k, v in (line.split() for line in f) if k == "oom_kill"), 0)


def watch_memory(pod: Pod, limit: int) -> None:
    """Without a memory cgroup the kubelet kills the container once its processes' resident memory together
    exceeds the limit (the kernel's OOM kill, polled)."""
    proc = pod.proc
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
            pod.oom_killed = True
            kill_all(pod)
            return
        time.sleep(timing.MEMORY_POLL_SECONDS)


def kill_all(pod: Pod) -> None:
    """SIGKILL every process of the container: those in its cgroup, else those of its process group."""
    if not pod.cgroup:
        try:
            os.killpg(pod.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
    deadline = time.monotonic() + timing.GRACE_SECONDS
    while (pids := cgroup_pids(pod)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def cgroup_pids(pod: Pod) -> list[int]:
    try:
        with open(os.path.join(pod.cgroup, "cgroup.procs")) as f:
            return [int(pid) for pid in f.read().split()]
    except FileNotFoundError:
        return []
