"""The Kubernetes launcher: a stage runs as the objects of ``objects`` (native Indexed Jobs, or for the train
stage a Kubeflow TFJob / MPIJob when ``kubernetes.operator`` and the cluster's CRDs say so), named from the
run's identity. ``start`` creates them, or finds those of an earlier try (by the identity kept in the
task's state store, else by labels) and follows them instead of starting a second set. They are followed
(``follow``) in the task process (``run``) or in the triggerer (``StageTrigger``), so a multi-hour stage
holds no worker slot. The stage's objects are deleted when it ends, fails, or is killed (the task's
``on_kill``, or the trigger's ``on_kill`` when a user kills the deferred task)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from typing import Any

from tfdist.contract.launch import EXIT_REFUSED
from tfdist.operators.launchers.base import (
    ElasticRestart,
    Launcher,
    StageEvent,
    StageFailed,
    StageLog,
    StageStopped,
    restart_record,
    shrunk,
)
from tfdist.operators.launchers.kubernetes.api import DONE, KINDS, ClusterApi, Watch, delete_objects, run_in_thread
from tfdist.operators.launchers.kubernetes.follow import follow
from tfdist.operators.launchers.kubernetes.objects import (
    PIPELINE_LABEL,
    SPEC_HASH_ANNOTATION,
    identity,
    label_value,
    placement,
    spec_hash,
    stage_objects,
)
from tfdist.operators.launchers.kubernetes.trigger import StageTrigger
from tfdist.operators.plan import Plan, StagePlan

STORE_KEY = "kubernetes_objects"
"""The task's state-store key naming the objects a try created: every later try of the task reads it."""


class KubernetesLauncher(Launcher):
    outlives_task = True

    def __init__(self, plan: Plan, try_number: int = 1) -> None:
        super().__init__(plan, try_number)
        self.placement = placement(plan.stages[0])
        self.watch: Watch | None = None
        self._stop_requested = False

    @functools.cached_property
    def cluster(self) -> ClusterApi:
        return ClusterApi(self.placement.following)

    def kubeflow_kind(self, stage: StagePlan) -> str | None:
        """TFJob or MPIJob when the train stage runs as one (``kubernetes.operator``), else None."""
        if self.placement.operator == "native" or not stage.sync:
            return None
        kind = "TFJob" if stage.sync == "tf_cluster" else "MPIJob"
        if self.cluster.installed(kind):
            return kind
        if self.placement.operator == "kubeflow":
            missing = KINDS[kind]
            raise StageFailed(
                f"{stage.task_id}",
                EXIT_REFUSED,
                {},
                how=f"cannot run as a {kind}",
                detail=(
                    f"kubernetes.operator is 'kubeflow' but the cluster does not serve "
                    f"{missing.plural}.{missing.group}/{missing.version} "
                    "(install Kubeflow's training operator, or use operator 'auto' or 'native')"
                ),
            )
        return None

    def watch_for(self, stage: StagePlan, kind: str, objects: list[dict], digest: str) -> Watch:
        members = tuple(m.name for m in stage.members)
        if not stage.sync:  # a stage's writers, one pod each (objects)
            role = stage.members[0].role
            members = tuple(f"{role}-{index}" for index in range(objects[-1]["spec"]["completions"]))
        result = "launcher-0" if kind == "MPIJob" else members[0]  # the chief, worker 0, or pod 0
        return Watch(
            following=self.placement.following,
            task_id=stage.task_id,
            kind=kind,
            name=objects[-1]["metadata"]["name"],
            objects=tuple((o["kind"], o["metadata"]["name"]) for o in objects),
            members=members,
            rank_tagged=stage.sync == "horovod",
            result_member=result,
            spec_hash=digest,
        )

    def find(self, stage: StagePlan, watch: Watch, store: Any) -> tuple[Watch, dict] | None:
        """The stage's object made by an earlier try, and what its Watch says: the one named in the task's state
        store, else the one carrying this run's and stage's labels."""
        known = store.get(STORE_KEY) if store is not None else None
        if known:
            earlier = Watch.from_dict(known)
            found = self.cluster.read(earlier.kind, earlier.name)
            return (earlier, found) if found is not None else None
        ctx = self.plan.context
        labels, _ = identity(self.placement, ctx.pipeline_id, ctx.run_id, stage.task_id, self.try_number)
        selector = ",".join(
            f"{k}={label_value(labels[k])}" for k in (PIPELINE_LABEL, "tfdist/run-id", "tfdist/task-id")
        )
        if watch.name not in self.cluster.labelled(watch.kind, selector):
            return None
        found = self.cluster.read(watch.kind, watch.name)
        return (replace(watch, uid=found["metadata"]["uid"]), found) if found is not None else None

    @staticmethod
    def not_to_follow(earlier: Watch, found: dict, digest: str) -> str | None:
        """Why the earlier try's object may not be followed: it ended, it is not the one the task created (its
        uid), or it was made from another spec (its spec hash); None when it may."""
        status, meta = found.get("status") or {}, found["metadata"]
        ended = [c["type"] for c in status.get("conditions") or [] if c["type"] in DONE and c["status"] == "True"]
        if ended:
            return f"of an earlier try is {ended[-1]}"  # the last: Failed after FailureTarget
        if earlier.uid and meta["uid"] != earlier.uid:
            return f"is not the one this task created (uid {meta['uid']}, the task's state store names {earlier.uid})"
        made_from = (meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if made_from != digest:
            return f"was made from another spec (spec hash {made_from}, this try's {digest})"
        return None

    def start(self, stage: StagePlan, log: StageLog, store: Any = None) -> Watch:
        """Create the stage's objects, or follow those an earlier try of the task created, unless they ended or
        differ (deleted then, and the stage starts again: training resumes from the run's latest checkpoint)."""
        kind = self.kubeflow_kind(stage) or "Job"
        objects, digest = (
            stage_objects(self.plan, stage, self.try_number, kubeflow=kind != "Job"),
            spec_hash(self.plan, stage, kubeflow=kind != "Job"),
        )
        objects[-1]["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = digest
        watch = self.watch_for(stage, kind, objects, digest)
        if (earlier := self.find(stage, watch, store)) is not None:
            if (why := self.not_to_follow(*earlier, digest)) is None:
                log.info(
                    "following %s %s (uid %s) started by an earlier try",
                    earlier[0].kind,
                    earlier[0].name,
                    earlier[1]["metadata"]["uid"],
                )
                self.watch = earlier[0]
                return earlier[0]
            log.warning("%s %s %s: deleting it and starting again", earlier[0].kind, earlier[0].name, why)
            run_in_thread(delete_objects(earlier[0], log))
            self.cluster.wait_gone(earlier[0])
        if self._stop_requested:
            raise StageStopped(f"{stage.task_id} stopped before its Kubernetes objects were created")
        self.watch = watch  # a stop meanwhile deletes what was created so far
        self.watch = watch = replace(watch, uid=self.cluster.submit(objects, log))
        if self._stop_requested:  # during a create: the object it made may have been missed
            self.stop()
            raise StageStopped(f"{stage.task_id} stopped while its Kubernetes objects were created")
        if store is not None:
            store.set(STORE_KEY, watch.to_dict())
        return watch

    def start_deferred(self, stage: StagePlan, log: StageLog, store: Any) -> StageTrigger:
        return StageTrigger(self.start(stage, log, store).to_dict())

    def continue_deferred(self, stage: StagePlan, event: StageEvent, log: StageLog, store: Any) -> StageTrigger | None:
        restarts = list(event.restarts)
        sizes = [r.workers_after for r in restarts if r.workers_after is not None]  # after each cluster restart
        current = stage.with_workers(sizes[-1]) if sizes else stage
        lost = tuple(event.lost)
        smaller = shrunk(current, lost, restarts, stage.elastic)
        if smaller is None:
            return None
        restart_record(current, smaller, lost, event.summary, restarts, log)
        return StageTrigger(self.start(smaller, log, store).to_dict(), restarts)

    def run_once(self, stage: StagePlan, log: StageLog, restarts: list[ElasticRestart]) -> dict[str, Any]:
        return asyncio.run(follow(self.start(stage, log), log, lambda: self._stop_requested))

    def stop(self) -> None:
        self._stop_requested = True
        if self.watch is not None:
            run_in_thread(delete_objects(self.watch))
