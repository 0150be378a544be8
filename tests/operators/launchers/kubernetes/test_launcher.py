"""operators/launchers/kubernetes/launcher.py, without a cluster: the watch it makes of a stage's objects, and
whether a retry may follow the object an earlier try made (the stand-in cluster runs the launcher whole:
test_kubernetes_launcher.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.operators.launchers.kubernetes.test_objects import KUBERNETES, k8s_plan, plan_of
from tests.support.specs import make_spec
from tfdist.operators.launchers.kubernetes.launcher import KubernetesLauncher
from tfdist.operators.launchers.kubernetes.objects import SPEC_HASH_ANNOTATION, stage_objects
from tfdist.spec import load_spec

DIGEST = "4c2a9e1b7d3f5a60"


def test_the_launchers_watch_carries_the_plans_following_whole():
    """What the watch follows by (connection, namespace, startup timeout, logs relayed) is the plan's, not copied."""
    _, plan = k8s_plan(None, "mirrored")
    stage = plan.stage("train")
    objects = stage_objects(plan, stage)
    watch = KubernetesLauncher(plan).watch_for(stage, "Job", objects, "4c2a9e1b7d3f5a60")
    assert watch.following is stage.kubernetes.following
    assert watch.members == ("worker-0", "worker-1", "worker-2", "worker-3") and watch.result_member == "worker-0"


def test_a_stage_of_several_writers_is_followed_as_one_member_per_pod_the_first_handing_back_the_result():
    plan = plan_of(load_spec(make_spec("/mnt/tfdist", data={"prepare_processes": 3}, kubernetes=KUBERNETES)))
    stage = plan.stage("prepare_data")
    watch = KubernetesLauncher(plan).watch_for(stage, "Job", stage_objects(plan, stage), DIGEST)
    assert watch.members == ("prepare-0", "prepare-1", "prepare-2") and watch.result_member == "prepare-0"
    assert (watch.kind, watch.spec_hash, watch.rank_tagged) == ("Job", DIGEST, False)


def test_an_mpijobs_result_is_its_launchers_and_its_horovod_pods_print_rank_tags():
    _, plan = k8s_plan(None, "horovod_mpi")
    stage = plan.stage("train")
    watch = KubernetesLauncher(plan).watch_for(stage, "MPIJob", stage_objects(plan, stage, kubeflow=True), DIGEST)
    assert watch.result_member == "launcher-0" and watch.rank_tagged
    assert watch.objects[-1][0] == "MPIJob" and watch.name == watch.objects[-1][1]


def test_with_the_native_operator_no_stage_asks_the_cluster_for_a_kubeflow_kind():
    spec = load_spec(make_spec("/mnt/tfdist", kubernetes={**KUBERNETES, "operator": "native"}))
    plan = plan_of(spec)
    assert [KubernetesLauncher(plan).kubeflow_kind(s) for s in plan.stages] == [None] * len(plan.stages)


def found(uid: str = "5f0c", made_from: str | None = DIGEST, *conditions: str) -> dict:
    """The ending object as the cluster returns it: its uid, its spec hash annotation, its conditions."""
    annotations = {SPEC_HASH_ANNOTATION: made_from} if made_from else {}
    listed = [{"type": c, "status": "True"} for c in conditions] + [{"type": "Suspended", "status": "False"}]
    return {"metadata": {"uid": uid, "annotations": annotations}, "status": {"conditions": listed}}


@pytest.mark.parametrize(
    "obj, why",
    [
        (found(), None),
        (found("5f0c", DIGEST, "FailureTarget", "Failed"), "of an earlier try is Failed"),
        (found("5f0c", DIGEST, "SuccessCriteriaMet"), "of an earlier try is SuccessCriteriaMet"),
        (found("9e1d"), "is not the one this task created (uid 9e1d, the task's state store names 5f0c)"),
        (
            found("5f0c", "0123456789abcdef"),
            f"was made from another spec (spec hash 0123456789abcdef, this try's {DIGEST})",
        ),
        (found("5f0c", None), f"was made from another spec (spec hash None, this try's {DIGEST})"),
    ],
)
def test_a_retry_follows_the_earlier_tries_object_only_while_it_runs_as_this_task_made_it(obj, why):
    _, plan = k8s_plan(None, "mirrored")
    stage = plan.stage("train")
    watch = KubernetesLauncher(plan).watch_for(stage, "Job", stage_objects(plan, stage), DIGEST)
    assert KubernetesLauncher.not_to_follow(replace(watch, uid="5f0c"), obj, DIGEST) == why
    assert KubernetesLauncher.not_to_follow(watch, found("9e1d"), DIGEST) is None  # found by labels: no uid to match
