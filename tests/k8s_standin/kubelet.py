"""The process kubelet (needs root): the node's bridge and memory cgroup, and for each pod its sandbox (a network
namespace with an address on the bridge), its volumes, its image and its container run as real processes
(``container``); stopping a pod sends SIGTERM, then SIGKILL after the grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING

from tests.k8s_standin import container, dns, timing
from tests.k8s_standin.images import pull
from tests.k8s_standin.volumes import mount

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster
    from tests.k8s_standin.pods import Pod


NETNS_DIR = "/run/netns"
"""Where ``ip netns`` keeps the named network namespaces."""


def run(*argv: str, check: bool = True) -> None:
    subprocess.run(argv, check=check, capture_output=True)


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


class ProcessKubelet:
    """The kubelet that runs each pod's container command as real processes."""

    def start(self, cluster: StandInCluster) -> None:
        """The node: a memory cgroup for the pods (when this process has a cgroup v1 one to nest it in; else
        memory is polled) and the pods' bridge."""
        if parent := _memory_cgroup():
            try:
                os.makedirs(path := os.path.join(parent, f"tfd{cluster.id}"), exist_ok=True)
                cluster.cgroup = path
            except OSError:
                pass
        # a MAC of its own: a bridge without one takes a port's, and changes it as that pod's port goes, and the
        # other pods' ARP entries for the node's address point nowhere until they expire (about 30 s)
        mac = ":".join(["02", "42", *(f"{int(octet):02x}" for octet in cluster.subnet.split(".")), "01"])
        run("ip", "link", "add", cluster.bridge, "address", mac, "type", "bridge")
        run("ip", "addr", "add", f"{cluster.subnet}.1/24", "dev", cluster.bridge)
        run("ip", "link", "set", cluster.bridge, "up")

    def close(self, cluster: StandInCluster) -> None:
        """Remove the node's bridge and cgroup (the pods are stopped and released)."""
        run("ip", "link", "delete", cluster.bridge, check=False)
        if cluster.cgroup:
            try:
                os.rmdir(cluster.cgroup)
            except OSError:
                pass

    def write_hosts(self, cluster: StandInCluster) -> None:
        dns.write_hosts(cluster)

    def sync(self, pod: Pod) -> None:
        """The kubelet's work for the pod: its sandbox (network namespace, address), its volumes, its image,
        its container; the sandbox is torn down once the container ended or the pod was stopped."""
        try:
            if self._sandbox(pod) and (volumes := mount(pod)) is not None and pull(pod):
                container.run(pod, volumes)
        finally:
            self.release(pod)
            pod.cluster.write_hosts()
            pod.cluster.changed.set()

    def _sandbox(self, pod: Pod) -> bool:
        """The pod's network namespace and address; False where the pod was stopped first (it never gets one)."""
        cluster = pod.cluster
        octet = pod.address.rsplit(".", 1)[1]
        veth = f"tfd{cluster.id}v{octet}"
        with pod.lock:  # stop() sets stopping under it: no namespace is made after a stop
            if pod.stopping.is_set():
                return False
            run("ip", "netns", "add", pod.netns)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod.netns)
        run("ip", "link", "set", veth, "master", cluster.bridge, "up")
        for argv in (
            ("ip", "addr", "add", f"{pod.address}/24", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "lo", "up"),
        ):
            run("ip", "netns", "exec", pod.netns, *argv)
        pod.sandboxed()
        cluster.write_hosts()
        return True

    def stop(self, pod: Pod) -> None:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet does (a container not started yet never
        starts); returns once the kubelet is done with the pod."""
        with pod.lock:
            pod.stopping.set()
            proc = pod.proc
        if proc and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timing.GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                container.kill_all(pod)
                proc.wait()
        pod.wait_for_sync()

    def release(self, pod: Pod) -> None:
        """Tear down the pod's cgroup (killing what is left in it), then its network namespace: a process left in
        the namespace, or one that unshared its mounts there, keeps it busy (``ip netns delete`` fails meanwhile)."""
        if pod.cgroup and os.path.isdir(pod.cgroup):
            container.kill_all(pod)
            for _ in range(50):
                try:
                    os.rmdir(pod.cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy while its last processes exit
                    time.sleep(0.1)
        for _ in range(50):
            run("ip", "netns", "delete", pod.netns, check=False)
            if not os.path.exists(os.path.join(NETNS_DIR, pod.netns)):
                break
            time.sleep(0.1)
