"""The stand-in cluster: the API server (``apiserver``, served over HTTP by ``routes``), the controllers
(``jobs``, ``tfjob``, ``mpijob``) and a kubelet: by default ``kubelet.ProcessKubelet`` (real processes, needs
root), or ``scripted.ScriptedKubelet`` (a test's script, no processes, no root)."""

from __future__ import annotations

import http.server
import itertools
import os
import threading
import traceback
from collections.abc import Iterable
from typing import Protocol

from tests.k8s_standin import timing
from tests.k8s_standin.apiserver import ApiServer
from tests.k8s_standin.common import CRDS, together
from tests.k8s_standin.images import image_reference
from tests.k8s_standin.jobs import JobController
from tests.k8s_standin.kubelet import ProcessKubelet
from tests.k8s_standin.mpijob import MPIJobController
from tests.k8s_standin.pods import Pod
from tests.k8s_standin.routes import Handler
from tests.k8s_standin.tfjob import TFJobController

_clusters = itertools.count()


class Kubelet(Protocol):
    """What the cluster asks of its node's kubelet."""

    def start(self, cluster: StandInCluster) -> None: ...
    def close(self, cluster: StandInCluster) -> None: ...
    def sync(self, pod: Pod) -> None: ...
    def stop(self, pod: Pod) -> None: ...
    def release(self, pod: Pod) -> None: ...
    def write_hosts(self, cluster: StandInCluster) -> None: ...


class StandInCluster(ApiServer):
    """The stand-in: ``start()`` serves the API on 127.0.0.1; ``kubeconfig`` points a client at it.
    ``images``: the image names its registry has (None: every image pulls); ``crds``: the Kubeflow kinds
    installed, by plural (``tfjobs``, ``mpijobs``); ``history_limit``: how many changes a watch may resume
    from; ``kubelet``: the node's kubelet (default: a ``ProcessKubelet``, which needs root)."""

    def __init__(
        self,
        workdir: str,
        images: Iterable[str] | None = None,
        crds: Iterable[str] = (),
        history_limit: int = 10000,
        kubelet: Kubelet | None = None,
    ):
        super().__init__(history_limit)
        self.kubelet = ProcessKubelet() if kubelet is None else kubelet
        self.id = f"{os.getpid() % 1000}{next(_clusters)}"
        self.workdir, self.bridge = workdir, f"tfd{self.id}br"
        self.subnet = f"10.{200 + os.getpid() % 50}.{self.id[-1]}"
        self.images = None if images is None else set(images)
        """The registry's images; a test may add one while a pod backs off pulling it."""
        self.crds = tuple(crds)
        if unknown := set(self.crds) - CRDS.keys():
            raise ValueError(f"unknown CRDs {sorted(unknown)}: choose from {sorted(CRDS)}")
        self.cgroup: str | None = None
        """The memory cgroup holding the pods' (None: the kubelet polls memory use instead, or runs none)."""
        self.addresses = (f"{self.subnet}.{n}" for n in itertools.count(2))
        self.jobs, self.tfjobs, self.mpijobs = JobController(self), TFJobController(self), MPIJobController(self)

    def start(self) -> StandInCluster:
        self.kubelet.start(self)
        handler = type("Handler", (Handler,), {"cluster": self})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self._controllers = threading.Thread(target=self._control, daemon=True)
        self._controllers.start()
        self._recorder = threading.Thread(target=self.record_changes, daemon=True)
        self._recorder.start()
        return self

    def close(self) -> None:
        self.closing = True
        self.server.shutdown()
        self.server.server_close()
        self.changed.set()
        self._controllers.join()
        self._recorder.join()
        pods = list(self.pods.values())
        together(pod.stop for pod in pods)
        for pod in pods:
            pod.release()
        self.kubelet.close(self)

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

    def has_image(self, image: str) -> bool:
        return self.images is None or image_reference(image) in {image_reference(i) for i in self.images}

    # the API server's hooks --------------------------------------------------------------------------------

    def next_address(self) -> str:
        return next(self.addresses)

    def created_object(self, obj: dict) -> None:
        """A Job's pods are created at once; a Service's names reach the pods' DNS."""
        if obj["kind"] == "Job":
            self.jobs.create_pods(obj)
        elif obj["kind"] == "Service":
            self.write_hosts()

    def write_hosts(self) -> None:
        self.kubelet.write_hosts(self)

    def _control(self) -> None:
        """The controllers: each reconciles its objects on every change (a failed reconcile is logged and
        tried again, as a controller's work queue does)."""
        controllers = {"Job": self.jobs.reconcile, "TFJob": self.tfjobs.reconcile, "MPIJob": self.mpijobs.reconcile}
        while not self.closing:
            self.changed.wait(timing.CONTROL_SECONDS)
            self.changed.clear()
            with self.lock:
                jobs = [(kind, o) for (kind, _, _), o in self.objects.items() if kind in controllers]
            for kind, job in jobs:
                try:
                    controllers[kind](job)
                except Exception:
                    traceback.print_exc()
