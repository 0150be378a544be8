"""The rootless layer: a kubelet that runs no processes. Each pod's container plays a ``Script`` the test gives
(its log lines, pauses and actions in order, its termination message, how it ends), through the same steps and
status writes as the process kubelet (``pods.Pod``): scheduling by node selector, the sandbox's address and
conditions, waiting for its Secret and ConfigMap volumes, the image pull from the cluster's registry
(ErrImagePull, ImagePullBackOff), Running, then terminated with its exit code, reason (Completed, Error,
OOMKilled) and the termination message by the container's policy (File, FallbackToLogsOnError). A pod stopped
(deleted, evicted, its Job finished) ends at once with ``stopped_exit_code``. So the API server, its watches
and log streams, and the Job and Kubeflow controllers run as with the process kubelet, without root and fast.

What it does not model beyond the process kubelet's limits: processes (no ``proc``: nothing to signal or
suspend), network namespaces and DNS (pods get an address; no hosts files are written), memory use (a script
says when it was OOM-killed), volumes' files (only that their objects exist), the container's environment, and
the grace period's length (a stopped script ends at once, whatever it does with SIGTERM)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.k8s_standin.common import now
from tests.k8s_standin.images import pull
from tests.k8s_standin.volumes import mount

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster
    from tests.k8s_standin.pods import Pod

Step = str | float | Callable[["Pod"], object]
"""A line the container prints; a pause of that many seconds; or an action, called with the pod at that point
(the test's hand: evict the pod, drop the API's connections, wait for an event)."""


@dataclass(frozen=True)
class Script:
    """What one pod's container does."""

    output: Sequence[Step] = ()
    exit_code: int | None = 0
    """How it ends once its output is done; None: it runs until stopped."""
    message: str = ""
    """What it writes to its terminationMessagePath (before it ends)."""
    oom_killed: bool = False
    """It ends killed past its memory limit (OOMKilled; give exit_code 137, as the kernel's SIGKILL)."""
    stopped_exit_code: int = 143
    """Its exit code when stopped: 143 (SIGTERM), 137 for one killed after the grace period."""


class ScriptedKubelet:
    """A kubelet that plays each pod's script instead of running its container. ``scripts``: one Script for
    every pod, or a function of the pod's object giving its Script."""

    def __init__(self, scripts: Script | Callable[[dict], Script] = Script()) -> None:
        self.scripts = scripts
        self.played: list[str] = []
        """The names of the pods whose container started, in order."""
        self.errors: list[BaseException] = []
        """What a script's action raised (its container then ended with exit code 1, the error its message)."""

    def script(self, pod: Pod) -> Script:
        return self.scripts if isinstance(self.scripts, Script) else self.scripts(pod.obj)

    def start(self, cluster: StandInCluster) -> None:
        pass

    def close(self, cluster: StandInCluster) -> None:
        pass

    def write_hosts(self, cluster: StandInCluster) -> None:
        pass

    def sync(self, pod: Pod) -> None:
        """The process kubelet's steps, a script in place of the container."""
        try:
            pod.sandboxed()
            if mount(pod, write=False) is not None and pull(pod):
                self._play(pod, self.script(pod))
        finally:
            pod.cluster.changed.set()

    def _play(self, pod: Pod, script: Script) -> None:
        with pod.lock:
            if pod.stopping.is_set():
                return
            self.played.append(pod.name)
        container_id, started = f"containerd://scripted-{uuid.uuid4().hex}", now()
        pod.running(started, container_id)
        pod.cluster.changed.set()
        try:
            self._output(pod, script)
        except Exception as error:  # the test's action failed: the container fails, saying why
            self.errors.append(error)
            script = Script(exit_code=1, message=f"the script's action raised {error!r}")
        with open(pod.message_path, "w") as f:
            f.write(script.message)
        stopped = pod.stopping.is_set()
        code = script.stopped_exit_code if stopped else script.exit_code
        pod.ended(code, script.oom_killed and not stopped, started, container_id)

    def _output(self, pod: Pod, script: Script) -> None:
        """Play the script's steps, then run on until stopped when it does not end by itself."""
        with open(pod.log_path, "a") as log:
            for step in script.output:
                if pod.stopping.is_set():
                    return
                if isinstance(step, str):
                    pod.log_line(log, step)
                elif callable(step):
                    step(pod)
                else:
                    pod.stopping.wait(step)
        if script.exit_code is None:
            pod.stopping.wait()

    def stop(self, pod: Pod) -> None:
        """The script ends at its next step (a container not started yet never starts); returns once it did."""
        with pod.lock:
            pod.stopping.set()
        pod.wait_for_sync()

    def release(self, pod: Pod) -> None:
        pass
