"""Kubernetes launcher: a stage runs as the objects of ``k8s_objects`` (native Indexed Jobs, or for the train
stage a Kubeflow TFJob / MPIJob when ``kubernetes.operator`` and the cluster's CRDs say so), named from the
run's identity. ``start`` creates them, or finds those of an earlier try (by the identity kept in the
task's state store, else by labels) and follows them instead of starting a second set. They are followed
(``k8s_follow``) in the task process (``run``) or in the triggerer (``StageTrigger``), so a multi-hour stage
holds no worker slot. The stage's objects are deleted when it ends, fails, or is killed (the task's
``on_kill``, or the trigger's ``on_kill`` when a user kills the deferred task).

The modules: ``k8s_objects`` builds the objects, ``k8s_api`` holds the kinds and the API calls,
``k8s_follow`` follows a stage, ``k8s_diagnosis`` tells how its pods ended, ``k8s_trigger`` defers."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from tfdist.operators.launchers.base import Launcher, StageFailed, StageStopped, restart_record, shrunk
from tfdist.operators.launchers.k8s_api import DONE, KINDS, Cluster, Watch, delete_objects, run_in_thread
from tfdist.operators.launchers.k8s_follow import follow
from tfdist.operators.launchers.k8s_objects import identity, label_value, stage_objects
from tfdist.operators.launchers.k8s_trigger import StageTrigger
from tfdist.operators.plan import Plan, Stage
from tfdist.trainer.contract import EXIT_REFUSED

STORE_KEY = "kubernetes_objects"
"""The task's state-store key naming the objects a try created: every later try of the task reads it."""


class KubernetesLauncher(Launcher):
    def __init__(self, plan: Plan, try_number: int = 1) -> None:
        super().__init__(plan, try_number)
        self.settings = plan.spec.kubernetes
        self.watch: Watch | None = None
        self._stop_requested = False

    @functools.cached_property
    def cluster(self) -> Cluster:
        return Cluster(self.settings)

    def kubeflow_kind(self, stage: Stage) -> str | None:
        """TFJob or MPIJob when the train stage runs as one (``kubernetes.operator``), else None."""
        if self.settings.operator == "native" or not stage.sync:
            return None
        kind = "TFJob" if stage.sync == "tf_cluster" else "MPIJob"
        if self.cluster.installed(kind):
            return kind
        if self.settings.operator == "kubeflow":
            missing = KINDS[kind]
            raise StageFailed(f"{stage.task_id}", EXIT_REFUSED, {}, how=f"cannot run as a {kind}", detail=(
                f"kubernetes.operator is 'kubeflow' but the cluster does not serve "
                f"{missing.plural}.{missing.group}/{missing.version} "
                "(install Kubeflow's training operator, or use operator 'auto' or 'native')"))
        return None

    def watch_for(self, stage: Stage, kind: str, objects: list[dict]) -> Watch:
        members = tuple(m.name for m in stage.members)
        if not stage.sync:  # a stage's writers, one pod each (k8s_objects)
            role = stage.members[0].role
            members = tuple(f"{role}-{index}" for index in range(objects[-1]["spec"]["completions"]))
        result = "launcher-0" if kind == "MPIJob" else members[0]  # the chief, worker 0, or pod 0
        return Watch(self.settings.connection_id, self.settings.namespace, stage.task_id, kind,
                     objects[-1]["metadata"]["name"], tuple((o["kind"], o["metadata"]["name"]) for o in objects),
                     members, stage.sync == "horovod", result, self.settings.startup_timeout_seconds)

    def find(self, stage: Stage, watch: Watch, store: Any) -> Watch | None:
        """The stage's objects made by an earlier try: those named in the task's state store, else the
        ones carrying this run's and stage's labels."""
        known = store.get(STORE_KEY) if store is not None else None
        if known:
            earlier = Watch.from_dict(known)
            return earlier if self.cluster.read(earlier.kind, earlier.name) is not None else None
        ctx = self.plan.context
        labels, _ = identity(self.plan.spec, ctx.dag_id, ctx.run_id, stage.task_id, self.try_number)
        selector = ",".join(f"{k}={label_value(labels[k])}"
                            for k in ("tfdist/dag-id", "tfdist/run-id", "tfdist/task-id"))
        return watch if watch.name in self.cluster.labelled(watch.kind, selector) else None

    def start(self, stage: Stage, log: logging.Logger, store: Any = None) -> Watch:
        """Create the stage's objects, or find those of an earlier try still running (a failed or finished
        one is deleted and the stage starts again: training resumes from the run's latest checkpoint)."""
        kind = self.kubeflow_kind(stage) or "Job"
        objects = stage_objects(self.plan, stage, self.try_number, kubeflow=kind != "Job")
        watch = self.watch_for(stage, kind, objects)
        earlier = self.find(stage, watch, store)
        if earlier is not None:
            status = self.cluster.read(earlier.kind, earlier.name) or {}
            ended = [c["type"] for c in status.get("conditions") or [] if c["type"] in DONE and c["status"] == "True"]
            if not ended:
                log.info("following %s %s started by an earlier try", earlier.kind, earlier.name)
                self.watch = earlier
                return earlier
            log.warning("%s %s of an earlier try is %s: deleting it and starting again", earlier.kind, earlier.name,
                        ended[0])
            run_in_thread(delete_objects(earlier, log))
            self.cluster.wait_gone(earlier)
        if self._stop_requested:
            raise StageStopped(f"{stage.task_id} stopped before its Kubernetes objects were created")
        self.watch = watch
        self.cluster.submit(objects, log)
        if store is not None:
            store.set(STORE_KEY, watch.to_dict())
        return watch

    def start_deferred(self, stage: Stage, log: logging.Logger, store: Any) -> StageTrigger:
        return StageTrigger(self.start(stage, log, store).to_dict())

    def continue_deferred(self, stage: Stage, event: dict[str, Any], log: logging.Logger,
                          store: Any) -> StageTrigger | None:
        restarts = list(event.get("restarts", []))
        current = stage.with_workers(restarts[-1]["workers_after"]) if restarts else stage
        lost = tuple(event.get("lost", ()))
        smaller = shrunk(current, lost, restarts, stage.elastic)
        if smaller is None:
            return None
        restart_record(current, smaller, lost, event["summary"], restarts, log)
        return StageTrigger(self.start(smaller, log, store).to_dict(), restarts)

    def run_once(self, stage: Stage, log: logging.Logger, restarts: list[dict]) -> dict[str, Any]:
        return asyncio.run(follow(self.start(stage, log), log, lambda: self._stop_requested))

    def stop(self) -> None:
        self._stop_requested = True
        if self.watch is not None:
            run_in_thread(delete_objects(self.watch))
