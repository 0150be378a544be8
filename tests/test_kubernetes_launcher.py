"""The Kubernetes launcher against the stand-in cluster of tests/k8s_standin.py (the Kubernetes REST API
served locally, the real ``kubernetes`` client through the cncf provider's KubernetesHook and an Airflow
connection, pods as real processes in their own network namespaces). What the stand-in does not model is
listed in its docstring; needs root (network namespaces)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading

import pytest

from operators.launchers import StageFailed, StageStopped
from operators.launchers.k8s_objects import object_name, stage_objects
from operators.launchers.kubernetes import KubernetesLauncher
from tests.conftest import assert_no_process_of, collecting_logger, plan_for, prepared_plan, wait_for
from tests.k8s_standin import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                                   reason="the stand-in's pods need root (network namespaces)")]
CONNECTION = "k8s_standin"
KUBERNETES = {"namespace": "ml", "connection_id": CONNECTION, "pods": {"image": "tfdist-worker:test", "cpu": "1"},
              "artifact_volume": {"claim_name": "tfdist-artifacts"}, "startup_timeout_seconds": 10}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    standin = Cluster(str(tmp_path_factory.mktemp("standin"))).start()
    os.environ[f"AIRFLOW_CONN_{CONNECTION.upper()}"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(standin.kubeconfig)}})
    yield standin
    standin.close()


def k8s_plan(root: str, run_id: str, **training):
    return prepared_plan(root, run_id, training={"epochs": 1, "launcher": "kubernetes", **training},
                         kubernetes=KUBERNETES)


def launch(plan, task_id: str, try_number: int = 1):
    logger, lines = collecting_logger(f"k8s.{task_id}")
    launcher = KubernetesLauncher(plan.spec, plan.context, try_number)
    launcher.run(plan.stage(task_id), logger)
    return launcher, lines.lines


def assert_nothing_left(cluster: Cluster, plan) -> None:
    name = object_name(plan.context.dag_id, plan.context.run_id, "train")
    wait_for(lambda: not [k for k in cluster.objects if name in k[2]], 30, "the stage's objects to be deleted")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    wait_for(lambda: f"tfd{cluster.id}p" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                               text=True).stdout, 30, f"pod namespaces gone: {netns}")
    assert_no_process_of(plan)


def weights(lines: list[str]) -> dict[str, str]:
    return dict(re.findall(r"^\[([\w-]+)\] [\w-]+: done at step \d+; weights sha256 (\w+)", "\n".join(lines), re.M))


def train_in_background(plan):
    """Start the train stage in a thread and return once it trains: (launcher, its log lines so far and to
    come, a function waiting for the stage to end that returns what it raised)."""
    logger, lines = collecting_logger(f"k8s.{plan.context.run_id}")
    launcher, raised = KubernetesLauncher(plan.spec, plan.context, 1), []

    def run():
        try:
            launcher.run(plan.stage("train"), logger)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    wait_for(lambda: any("first 10 steps" in line for line in lines.lines), 120, "training to start")

    def finished():
        thread.join(60)
        assert not thread.is_alive(), "the stage did not end"
        return raised[0] if raised else None

    return launcher, lines.lines, finished


def test_horovod_pods_train_over_gloo_without_ssh_and_leave_nothing(cluster, digits_root):
    """2 pods × 2 ranks meeting through pod 0's rendezvous server; every rank ends with the same weights."""
    plan = k8s_plan(digits_root, "k8s_horovod", backend="mpi", num_workers=2, mpi={"controller": "gloo",
                                                                                   "slots_per_worker": 2})
    _, lines = launch(plan, "train")
    found = weights(lines)
    assert set(found) == {f"rank-{r}" for r in range(4)} and len(set(found.values())) == 1, lines[-20:]
    assert os.path.exists(plan.layout.train_result)
    assert sum(1 for line in lines if "done at step" in line) == 4  # each line relayed once
    assert_nothing_left(cluster, plan)


def test_a_retry_follows_the_running_job_of_the_earlier_try(cluster, digits_root):
    """The parameter-server Job of try 1 is created (its task process then 'dies'); try 2 finds it by the
    run's identity, follows it to the chief's success instead of creating a second one."""
    plan = k8s_plan(digits_root, "k8s_retry", strategy="parameter_server", num_ps=1, num_workers=1)
    stage = plan.stage("train")
    first = KubernetesLauncher(plan.spec, plan.context, 1)
    first.submit(stage_objects(plan.spec, stage, plan.context.dag_id, plan.context.run_id, 1), collecting_logger("t1")[0])
    before = list(cluster.created)
    _, lines = launch(plan, "train", try_number=2)
    assert cluster.created == before, "try 2 created objects of its own"
    assert any("following Job" in line for line in lines) and "chief-0" in weights(lines)
    assert_nothing_left(cluster, plan)


def test_on_kill_deletes_every_object_and_stops_every_pod(cluster, digits_root):
    plan = k8s_plan(digits_root, "k8s_kill", num_workers=2, epochs=200)  # MultiWorkerMirrored
    launcher, lines, finished = train_in_background(plan)
    launcher.stop()
    assert isinstance(finished(), StageStopped)
    assert any(line.startswith("[worker-1] ") for line in lines)
    assert_nothing_left(cluster, plan)


def test_an_evicted_pod_fails_the_stage_told_apart_from_a_crash(cluster, digits_root):
    """A worker pod evicted mid-training (the Eviction API: a drain, a preemption) fails the Job through the
    pod failure policy's DisruptionTarget rule, and the failure says so."""
    from kubernetes import client

    plan = k8s_plan(digits_root, "k8s_evict", num_workers=2, epochs=200)
    launcher, _, finished = train_in_background(plan)
    name = object_name(plan.context.dag_id, plan.context.run_id, "train")
    pod, = [p for p in launcher.core.list_namespaced_pod("ml", label_selector=f"job-name={name}").items
            if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"]
    launcher.core.create_namespaced_pod_eviction(pod.metadata.name, "ml", client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace="ml")))
    failure = finished()
    assert isinstance(failure, StageFailed), failure
    assert failure.process == f"worker-1 (pod {pod.metadata.name})", str(failure)
    assert "was disrupted (EvictionByEvictionAPI" in str(failure) and "matching FailJob rule at index 0" in str(failure)
    assert_nothing_left(cluster, plan)




def test_a_failing_pod_fails_the_stage_naming_it_with_its_exit_code_and_last_lines(cluster, tmp_path):
    plan = plan_for(str(tmp_path), "k8s_fails", kubernetes=KUBERNETES)  # nothing prepared or trained
    with pytest.raises(StageFailed) as failure:
        launch(plan, "evaluate")
    message = str(failure.value)
    assert failure.value.process.startswith("evaluate-0 (pod tfd-digits-test-evaluate-") and failure.value.returncode
    assert "PodFailurePolicy" in message and "matching FailJob rule at index 1" in message
    assert "[evaluate-0] last lines:" in message


def test_an_unschedulable_pod_fails_the_stage_with_the_schedulers_reason(cluster, tmp_path):
    kubernetes = {**KUBERNETES, "roles": {"prepare": {"node_selector": {"gpu": "a100"}}}}
    plan = plan_for(str(tmp_path), "k8s_pending", kubernetes=kubernetes)
    with pytest.raises(StageFailed, match=r"was not running after 10 s \(kubernetes.startup_timeout_seconds\); "
                                          r"FailedScheduling: 0/1 nodes are available: 1 node\(s\) didn't match"):
        launch(plan, "prepare_data")
    assert not [k for k in cluster.objects if "prepare-data" in k[2] and "k8s" in k[2]]
