"""operators/launchers/kubernetes/api.py: the Watch a trigger and the task's state store carry (its stored shape
since 0.2.0, which pod is which member, whose log is relayed), the kinds, and running a coroutine to its end."""

from __future__ import annotations

import asyncio

import pytest

from tests.operators.launchers.kubernetes.test_objects import k8s_plan
from tfdist.operators.launchers.kubernetes.api import KINDS, Watch, run_in_thread
from tfdist.operators.launchers.kubernetes.launcher import KubernetesLauncher
from tfdist.operators.launchers.kubernetes.objects import stage_objects
from tfdist.operators.plan import Following


def train_watch(mode: str, kind: str = "Job") -> Watch:
    """The watch the launcher makes for the train stage of the real plan of ``mode`` (test_objects' MODES)."""
    _, plan = k8s_plan(None, mode)
    stage = plan.stage("train")
    objects = stage_objects(plan, stage, kubeflow=kind != "Job")
    return KubernetesLauncher(plan).watch_for(stage, kind, objects, "4c2a9e1b7d3f5a60")


WATCH_BEFORE_LOG_MEMBERS = {
    "connection_id": "k8s_ml",
    "namespace": "ml",
    "task_id": "train",
    "kind": "Job",
    "name": "tfd-digits-train-1",
    "objects": [["Service", "tfd-digits-train-1"], ["Job", "tfd-digits-train-1"]],
    "members": ["worker-0", "worker-1", "worker-2"],
    "rank_tagged": False,
    "result_member": "worker-0",
    "startup_timeout_seconds": 600,
}
"""A watch as the 0.2.0 release stored it in a deferred task's trigger and the task's state store, before
kubernetes.log_members, uids and spec hashes."""


def test_a_watch_stored_by_an_earlier_version_reads_as_it_was_stored():
    """A watch is stored as one mapping, the plan's following beside the watch's own fields: one stored before
    log_members (0.2.0: it relayed every member's log; no uid, no spec hash) resumes as it ran, and one stored
    before the following was a record of its own reads and writes the same mapping."""
    oldest = Watch.from_dict(WATCH_BEFORE_LOG_MEMBERS)
    assert oldest.following == Following(
        connection_id="k8s_ml", namespace="ml", startup_timeout_seconds=600, log_members=None
    )
    assert (oldest.uid, oldest.spec_hash) == ("", "") and oldest.relayed("worker-2")
    assert oldest.objects == (("Service", "tfd-digits-train-1"), ("Job", "tfd-digits-train-1"))
    stored = {**WATCH_BEFORE_LOG_MEMBERS, "log_members": 2, "uid": "5f0c", "spec_hash": "4c2a9e1b7d3f5a60"}
    watch = Watch.from_dict(stored)
    assert watch.to_dict() == stored and Watch.from_dict(watch.to_dict()) == watch
    assert [watch.relayed(m) for m in watch.members] == [True, True, False]


def test_a_watch_round_trips_through_json_as_one_mapping_beside_the_followings_fields():
    watch = train_watch("parameter_server")
    stored = watch.to_dict()
    assert set(stored) == {"connection_id", "namespace", "startup_timeout_seconds", "log_members"} | {
        "task_id",
        "kind",
        "name",
        "objects",
        "members",
        "rank_tagged",
        "result_member",
        "uid",
        "spec_hash",
    }
    assert stored["objects"] == [list(o) for o in watch.objects] and Watch.from_dict(stored) == watch


def pod(labels: dict | None = None, index: int | None = None) -> dict:
    """A pod's metadata as the API gives it: an Indexed Job's pod carries its completion index as an annotation."""
    annotations = {} if index is None else {"batch.kubernetes.io/job-completion-index": str(index)}
    return {"metadata": {"name": "p", "labels": labels or {}, "annotations": annotations}}


def test_each_kind_of_pod_is_told_its_member_by_its_index_or_its_operators_labels():
    assert train_watch("parameter_server").member(pod(index=4)) == "worker-1"  # chief-0, ps-0, ps-1, worker-0, worker-1
    tfjob = train_watch("parameter_server", "TFJob")
    labels = {"training.kubeflow.org/replica-type": "PS", "training.kubeflow.org/replica-index": "1"}
    assert tfjob.member(pod(labels)) == "ps-1"
    mpijob = train_watch("horovod_mpi", "MPIJob")
    assert mpijob.member(pod({"training.kubeflow.org/job-role": "launcher"})) == "launcher-0"
    worker = {"training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "1"}
    assert mpijob.member(pod(worker)) == "worker-1"


def test_a_watch_selects_its_jobs_pods_and_names_the_member_of_a_pod_the_job_names():
    watch = train_watch("mirrored")
    assert watch.selector == f"{KINDS['Job'].job_label}={watch.name}" and watch.selector.startswith("batch.")
    assert watch.named_member(f"{watch.name}-2-x7k2q") == "worker-2"
    assert KINDS["TFJob"].path("ml") == ("kubeflow.org", "v1", "ml", "tfjobs")


def test_rank_tags_are_read_on_horovod_job_pods_and_an_mpijobs_launcher_only():
    assert train_watch("horovod_gloo").tagged("worker-1") and not train_watch("mirrored").tagged("worker-1")
    mpijob = train_watch("horovod_mpi", "MPIJob")
    assert mpijob.tagged("launcher-0") and not mpijob.tagged("worker-0")


def test_run_in_thread_runs_a_coroutine_inside_a_running_event_loop_and_raises_what_it_raised():
    async def fails() -> None:
        raise LookupError("gone")

    ran: list[str] = []

    async def inside_a_loop() -> None:
        async def note() -> None:
            ran.append("ran")

        run_in_thread(note())

    asyncio.run(inside_a_loop())
    assert ran == ["ran"]
    with pytest.raises(LookupError, match="gone"):
        run_in_thread(fails())
