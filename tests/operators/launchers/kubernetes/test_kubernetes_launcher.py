"""The Kubernetes launcher against the stand-in cluster of tests/k8s_standin/ (the Kubernetes REST API
served locally, the real ``kubernetes`` client through the cncf provider's KubernetesHook and an Airflow
connection, pods as real processes in their own network namespaces). What the stand-in does not model is
listed in its docstring; needs root (network namespaces)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import threading
import time
import types
from dataclasses import replace

import psutil
import pytest

from tests.k8s_standin import StandInCluster
from tests.operators.launchers.kubernetes import store_secret
from tests.support.faults import FAULT_TRIALS, fault_modes
from tests.support.logs import collecting_logger
from tests.support.object_store import new_bucket_url
from tests.support.plans import plan_for, prepared_plan, run, steps_of
from tests.support.processes import assert_no_process_of, wait_for
from tests.support.roots import STANDIN_NEEDS_ROOT, needs_root
from tests.support.specs import DAY, make_spec
from tfdist.contract.launch import EXIT_HUNG, EXIT_REFUSED
from tfdist.contract.progress import checkpoint_step, last_beats
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.dag import build_dag
from tfdist.operators.demo import write_digits_partitions
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.kubernetes import STORE_KEY, KubernetesLauncher
from tfdist.operators.launchers.kubernetes.follow import follow
from tfdist.operators.launchers.kubernetes.objects import object_name
from tfdist.operators.launchers.kubernetes.trigger import StageTrigger

pytestmark = [pytest.mark.e2e, needs_root(STANDIN_NEEDS_ROOT)]
CONNECTION = "k8s_standin"
KUBERNETES = {
    "namespace": "ml",
    "connection_id": CONNECTION,
    "pods": {"image": "tfdist-worker:test", "cpu": "1"},
    "artifact_volume": {"claim_name": "tfdist-artifacts"},
    "startup_timeout_seconds": 10,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    standin = StandInCluster(str(tmp_path_factory.mktemp("standin"))).start()
    os.environ[f"AIRFLOW_CONN_{CONNECTION.upper()}"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(standin.kubeconfig)}}
    )
    yield standin
    standin.close()


def k8s_plan(root: str, run_id: str, **training):
    return prepared_plan(
        root, run_id, training={"epochs": 1, "launcher": "kubernetes", **training}, kubernetes=KUBERNETES
    )


class Store(dict):
    """The task state store's interface (``context["task_state_store"]``), kept in memory."""

    def set(self, key: str, value, **_) -> None:
        assert value == json.loads(json.dumps(value)), "not JSON values"
        self[key] = value


def launch(plan, task_id: str, try_number: int = 1):
    """Run the stage through the launcher in this process: (its result record, its log lines)."""
    logger, lines = collecting_logger(f"k8s.{task_id}")
    return KubernetesLauncher(plan, try_number).run(plan.stage(task_id), logger), lines.lines


def assert_nothing_left(cluster: StandInCluster, plan) -> None:
    name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
    wait_for(lambda: not [k for k in cluster.objects if name in k[2]], 30, "the stage's objects to be deleted")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    wait_for(
        lambda: (
            f"tfd{cluster.id}p" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ),
        30,
        f"pod namespaces gone: {netns}",
    )
    assert_no_process_of(plan)


def weights(lines: list[str]) -> dict[str, str]:
    return dict(re.findall(r"^\[([\w-]+)\] [\w-]+: done at step \d+; weights sha256 (\w+)", "\n".join(lines), re.M))


def train_in_background(plan):
    """Start the train stage in a thread and return once it trains: (launcher, its log lines so far and to
    come, a function waiting for the stage to end that returns what it raised)."""
    logger, lines = collecting_logger(f"k8s.{plan.context.run_id}")
    launcher, raised = KubernetesLauncher(plan, 1), []

    def run():
        try:
            launcher.run(plan.stage("train"), logger)
        except Exception as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    wait_for(lambda: any("first 10 steps" in line for line in lines.lines), 120, "training to start")

    def finished():
        thread.join(60)
        assert not thread.is_alive(), "the stage did not end"
        return raised[0] if raised else None

    return launcher, lines.lines, finished


@pytest.mark.extended
def test_a_retry_follows_the_running_job_of_the_earlier_try(cluster, digits_root):
    """Try 1 creates the parameter-server Job and keeps its identity in the task's state store, then its
    process 'dies'; try 2 finds the Job by that identity (or by its labels when the store has nothing) and
    follows it to the chief's success instead of creating a second one."""
    plan = k8s_plan(digits_root, "k8s_retry", strategy="parameter_server", num_ps=1, num_workers=1)
    stage, store = plan.stage("train"), Store()
    watch = KubernetesLauncher(plan, 1).start(stage, collecting_logger("k8s.try1")[0], store)
    assert store[STORE_KEY]["name"] == watch.name
    before = list(cluster.created)
    assert KubernetesLauncher(plan, 2).find(stage, watch, Store())[0] == watch  # by labels
    logger, lines = collecting_logger("k8s.try2")
    second = KubernetesLauncher(plan, 2)
    result = asyncio.run(follow(second.start(stage, logger, store), logger))
    assert cluster.created == before, "try 2 created objects of its own"
    assert any("following Job" in line for line in lines.lines) and "chief-0" in weights(lines.lines)
    assert result["final_step"] == read_json(plan.layout.result("train"))["final_step"]
    assert_nothing_left(cluster, plan)


def test_a_retry_replaces_a_job_made_from_another_spec_or_not_by_its_task(cluster, digits_root):
    """A retry never follows a Job of another spec (its spec-hash annotation) nor one its task did not create
    (its uid, kept in the task's state store): it deletes that Job, says why, and creates its own."""
    plan = k8s_plan(digits_root, "k8s_respec", strategy="parameter_server", num_ps=1, num_workers=1)
    store = Store()
    first = KubernetesLauncher(plan, 1).start(plan.stage("train"), collecting_logger("k8s.respec1")[0], store)
    assert first.uid and store[STORE_KEY]["uid"] == first.uid
    settings = plan.spec.kubernetes.model_copy(update={"ttl_seconds_after_finished": 60})
    changed = replace(plan, spec=plan.spec.model_copy(update={"kubernetes": settings}))
    logger, lines = collecting_logger("k8s.respec2")
    replaced = KubernetesLauncher(changed, 2).start(changed.stage("train"), logger, store)
    assert any(f"Job {first.name} was made from another spec" in line for line in lines.lines), lines.lines
    assert replaced.uid not in ("", first.uid) and store[STORE_KEY]["uid"] == replaced.uid
    store.set(STORE_KEY, {**store[STORE_KEY], "uid": "another-uid"})
    logger, lines = collecting_logger("k8s.respec3")
    third = KubernetesLauncher(changed, 3)
    again = third.start(changed.stage("train"), logger, store)
    assert any(
        f"Job {first.name} is not the one this task created (uid {replaced.uid}" in line for line in lines.lines
    ), lines.lines
    assert again.uid not in (replaced.uid, first.uid)
    third.stop()
    assert_nothing_left(cluster, plan)


@pytest.mark.extended
def test_killing_the_deferred_task_deletes_every_object_and_stops_every_pod(cluster, digits_root):
    """The triggerer cancels the trigger of a task a user killed and calls its on_kill."""
    plan = k8s_plan(digits_root, "k8s_kill", num_workers=2, epochs=200)  # MultiWorkerMirrored
    trigger = KubernetesLauncher(plan, 1).start_deferred(plan.stage("train"), collecting_logger("k8s.kill")[0], Store())
    assert isinstance(trigger, StageTrigger)
    trigger._log, lines = collecting_logger("k8s.trigger")  # what the triggerer writes to the task log

    async def kill_once_training() -> None:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        while not any("first 10 steps" in line for line in lines.lines):
            assert not waiting.done(), waiting.result()
            await asyncio.sleep(0.5)
        waiting.cancel()
        await trigger.on_kill()

    asyncio.run(asyncio.wait_for(kill_once_training(), 180))
    assert any(line.startswith("[worker-1] ") for line in lines.lines)
    assert_nothing_left(cluster, plan)


LOSSES = {
    "evicted": "has condition DisruptionTarget matching FailJob rule at index 0",
    "deleted": "failed with exit code 143 matching FailJob rule at index 1",
}
"""How a pod is lost (the Eviction API: a drain, a preemption; or a plain deletion), and what the Job's failure
then says of it."""


def lose_pod(core, name: str, loss: str) -> None:
    if loss == "evicted":
        from kubernetes import client

        core.create_namespaced_pod_eviction(
            name, "ml", client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="ml"))
        )
    else:
        core.delete_namespaced_pod(name, "ml")


@pytest.mark.extended
@pytest.mark.parametrize("loss", LOSSES)
def test_a_lost_pod_fails_the_stage_named_as_lost_though_it_is_gone(cluster, digits_root, loss):
    """A worker pod evicted or deleted mid-training fails the Job through the pod failure policy; the Job
    controller lets the pod go once it counted it (its job-tracking finalizer), so the launcher names the
    pod and its process from the Job's failure and counts it as lost, not as a crash."""
    plan = k8s_plan(digits_root, f"k8s_{loss}", num_workers=2, epochs=200)
    launcher, _, finished = train_in_background(plan)
    name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
    (pod,) = [
        p
        for p in launcher.cluster.core.list_namespaced_pod("ml", label_selector=f"job-name={name}").items
        if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"
    ]
    lose_pod(launcher.cluster.core, pod.metadata.name, loss)
    failure = finished()
    assert isinstance(failure, StageFailed), failure
    assert failure.process == f"worker-1 (pod {pod.metadata.name})" and failure.lost == ("worker-1",), str(failure)
    assert "was deleted (it is gone)" in str(failure) and LOSSES[loss] in str(failure), str(failure)
    assert_nothing_left(cluster, plan)


EPOCHS = 150  # 2,850 steps: long enough to be lost in
ELASTIC = {"horovod": ({"backend": "mpi", "mpi": {"controller": "gloo"}}, "worker-1"), "mirrored": ({}, "worker-1")}
"""Training section, and the member of pod 1 (a Horovod worker: the pod running its ranks)."""


@pytest.mark.faults
@pytest.mark.extended
@pytest.mark.parametrize("loss", fault_modes(LOSSES, "evicted"))
@pytest.mark.parametrize("mode", fault_modes(ELASTIC, "horovod"))
@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_an_elastic_stage_continues_with_the_pods_it_has_left_after_one_is_lost(
    cluster, digits_root, fault_figures, mode, loss, trial
):
    """The deferred path (StageTrigger, then the operator's execute_complete): a worker pod evicted or deleted
    after a checkpoint fails the Job; the operator defers again to the cluster started with the one worker left,
    from the run's latest checkpoint, and that trigger's result record lists the restart."""
    from airflow.sdk.exceptions import TaskDeferred

    mode_training, member = ELASTIC[mode]
    training = {"num_workers": 2, "min_workers": 1, "epochs": EPOCHS, "checkpoint_every_steps": 20, **mode_training}
    plan = k8s_plan(digits_root, f"k8s_elastic_{mode}_{loss}_{trial}", **training)
    operator = build_dag(
        make_spec(digits_root, training={**training, "launcher": "kubernetes"}, kubernetes=KUBERNETES)
    ).get_task("train")
    stage, store = plan.stage("train"), Store()
    logger, _ = collecting_logger("k8s.elastic")
    launcher = KubernetesLauncher(plan, 1)
    trigger = launcher.start_deferred(stage, logger, store)
    name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
    lost = {}

    def lose_after_a_checkpoint():
        wait_for(lambda: checkpoint_step(plan.layout.checkpoint_dir) >= 100, 180, "a checkpoint at step 100")
        (pod,) = [
            p
            for p in launcher.cluster.core.list_namespaced_pod("ml", label_selector=f"job-name={name}").items
            if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"
        ]
        lost["at"] = time.time()
        lose_pod(launcher.cluster.core, pod.metadata.name, loss)

    async def events(trigger):
        return [event.payload async for event in trigger.run()]

    loser = threading.Thread(target=lose_after_a_checkpoint)
    loser.start()
    (failed,) = asyncio.run(events(trigger))
    loser.join()
    assert failed["status"] == "failed" and failed["lost"] == [member], failed
    lost_at_step = max(b.step for b in last_beats(plan.layout.heartbeat_dir).values())  # it trains in its grace period
    midnight = dt.datetime.combine(DAY, dt.time(), dt.UTC)
    context = {
        "run_id": f"k8s_elastic_{mode}_{loss}_{trial}",
        "data_interval_start": midnight,
        "data_interval_end": midnight + dt.timedelta(days=1),
        "params": {},
        "ti": types.SimpleNamespace(try_number=1),
        "task_state_store": store,
    }
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute_complete(context, failed)
    again = deferred.value.trigger
    assert StageTrigger(**again.serialize()[1]).restarts == again.restarts
    restarted_at = time.time()

    def first_step_call():
        wait_for(
            lambda: max(b.time for b in last_beats(plan.layout.heartbeat_dir).values()) > restarted_at,
            120,
            "the restarted cluster's first step call",
        )
        lost["trained_again"] = time.time()

    stepped = threading.Thread(target=first_step_call)
    stepped.start()
    (done,) = asyncio.run(events(again))
    stepped.join()
    assert done["status"] == "success", done
    result = done["result"]
    (restart,) = result["elastic_restarts"]
    assert restart["lost"] == [member] and (restart["workers_before"], restart["workers_after"]) == (2, 1)
    assert "was deleted (it is gone)" in restart["why"] and (loss == "deleted") == ("exit code" in restart["why"]), (
        restart
    )
    assert (
        result["final_step"] == steps_of(plan, EPOCHS) and result["workers"] == 1 and result["resumed_from_step"] >= 20
    ), result
    assert result["metrics"]["accuracy"] > 0.9
    assert_nothing_left(cluster, plan)
    fault_figures(
        f"elastic: a worker pod {loss} (Kubernetes)",
        mode,
        steps_lost=lost_at_step - result["resumed_from_step"],
        seconds_to_train_again=round(lost["trained_again"] - lost["at"], 2),
        resumed_at_step=result["resumed_from_step"],
        accuracy=round(result["metrics"]["accuracy"], 4),
    )


HUNG = {
    "mirrored": ({"num_workers": 2}, "worker-1", "worker-1"),
    "horovod": ({"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo"}}, "worker-1", "rank-1"),
}
"""Training section, the member whose pod holds the process to stop, that process's heartbeat name."""


@pytest.mark.faults
@pytest.mark.extended
@pytest.mark.parametrize("mode", fault_modes(HUNG, "mirrored"))
@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_a_stopped_worker_fails_the_job_naming_it(cluster, digits_root, fault_figures, mode, trial):
    """A training process SIGSTOPped in its pod: the pod's entrypoint sees it stopped (and, watching the stage's
    heartbeats, that nothing steps), kills its processes and exits EXIT_HUNG with the report as its termination
    message, which fails the Job before TF's coordination service or Gloo give up on the stopped worker."""
    training, member, beater = HUNG[mode]
    plan = k8s_plan(digits_root, f"k8s_hung_{mode}_{trial}", epochs=400, hang_timeout_seconds=10, **training)
    _launcher, _, finished = train_in_background(plan)
    (pod,) = [
        p
        for p in cluster.pods.values()
        if p.obj["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "1"
        and "-train-" in p.obj["metadata"]["name"]
    ]
    wait_for(lambda: beater in last_beats(plan.layout.heartbeat_dir), 30, f"{beater}'s heartbeat")
    stopped = psutil.Process(last_beats(plan.layout.heartbeat_dir)[beater].pid)
    assert stopped in psutil.Process(pod.proc.pid).children(recursive=True)
    stopped.suspend()
    stopped_at = time.time()
    failure = finished()
    failed_after = time.time() - stopped_at
    assert isinstance(failure, StageFailed), failure
    assert failure.process.startswith(f"{member} (pod ") and failure.returncode == EXIT_HUNG, failure.summary
    assert (
        f"stopped the hung stage: {beater} is stopped: its process {stopped.pid} has been stopped (SIGSTOP)"
        in failure.summary
    ), failure.summary
    assert failed_after < 20, failed_after  # 3 s stopped, then the Job's failure and a poll
    assert_nothing_left(cluster, plan)
    fault_figures(
        "2 worker hung (SIGSTOP), on Kubernetes",
        mode,
        seconds_to_fail=round(failed_after, 2),
        named_the_stopped_worker=True,
    )


@pytest.mark.extended
def test_a_job_failed_by_a_killed_worker_is_replaced_by_the_retry_which_resumes_from_the_checkpoint(
    cluster, digits_root
):
    """Try 1's task process dies after creating the Job; then a worker's training process is SIGKILLed after
    a checkpoint, and the pod failure policy fails the Job. Try 2 finds that Job through the task's state
    store, deletes it and starts the stage again, resuming from the run's latest checkpoint. While try 2
    runs, the API server cuts off every response for 6 s (an API restart, dropped log streams): not one
    log line is lost or relayed twice."""
    plan = k8s_plan(digits_root, "k8s_crash", num_workers=2, epochs=60, checkpoint_every_steps=50)
    stage, store = plan.stage("train"), Store()
    first = KubernetesLauncher(plan, 1).start(stage, collecting_logger("k8s.crash1")[0], store)
    job = ("Job", "ml", first.name)
    checkpoint = os.path.join(plan.layout.checkpoint_dir, "checkpoint")
    wait_for(lambda: os.path.exists(checkpoint), 180, "try 1's first checkpoint")
    (worker,) = [p for p in cluster.pods.values() if p.obj["metadata"]["name"].startswith(f"{first.name}-1-")]
    (trainer,) = [
        p for p in psutil.Process(worker.proc.pid).children(recursive=True) if "tfdist.trainer.train" in p.cmdline()
    ]
    trainer.kill()
    wait_for(
        lambda: any(c["type"] == "Failed" for c in cluster.objects[job]["status"].get("conditions", [])),
        30,
        "the pod failure policy to fail the Job",
    )

    pods_dir = os.path.join(cluster.workdir, "pods")
    before = set(os.listdir(pods_dir))
    logger, lines = collecting_logger("k8s.crash2")
    watch, result = KubernetesLauncher(plan, 2).start(stage, logger, store), {}

    async def follow_through_an_outage():
        following = asyncio.ensure_future(follow(watch, logger))
        while not any("steps done in" in line for line in lines.lines):
            assert not following.done(), following.result()
            await asyncio.sleep(0.5)
        cluster.drop_connections(6)
        result.update(await following)

    asyncio.run(asyncio.wait_for(follow_through_an_outage(), 240))
    assert any("of an earlier try is Failed: deleting it and starting again" in line for line in lines.lines)
    assert any("the Kubernetes API did not answer" in line for line in lines.lines)
    assert result["resumed_from_step"] >= 50 and result["final_step"] > result["resumed_from_step"]
    assert len(set(weights(lines.lines).values())) == 1 and set(weights(lines.lines)) == {"worker-0", "worker-1"}
    for pod_dir in set(os.listdir(pods_dir)) - before:  # try 2's pods: each line relayed once, in order
        member = f"worker-{pod_dir.split('_')[1].removeprefix(first.name + '-').split('-')[0]}"
        written = [line.split(" ", 1)[1] for line in open(os.path.join(pods_dir, pod_dir, "log")).read().splitlines()]
        relayed = [line.split(" ", 1)[1] for line in lines.lines if line.startswith(f"[{member}] ")]
        assert relayed == written, member
    assert_nothing_left(cluster, plan)


@pytest.mark.extended
def test_prepare_data_as_two_pods_writes_the_shards_one_process_writes(cluster, digits_root, tmp_path):
    """data.prepare_processes pods (Indexed Job) each write their share of a three-day window; pod 0 joins the
    parts from the shared volume: the same shards as prepare_data in one local process. A bad row in pod 1's
    share fails the stage naming pod 1, the file, the line and the field; nothing is published. With
    log_members 1, pod 1's log is not relayed, yet the failure shows its last lines."""
    data = {"window": 3, "prepare_processes": 2}
    local = plan_for(digits_root, "prepare_local", data={**data, "prepare_processes": 1})
    run(local, "prepare_data")
    pods = plan_for(digits_root, "prepare_pods", data=data, training={"launcher": "kubernetes"}, kubernetes=KUBERNETES)
    result, lines = launch(pods, "prepare_data")
    assert any(
        re.search(r"^\[prepare-0\] read 4581 rows from 3 file\(s\) by 2 writer\(s\) \(pods\)$", line) for line in lines
    ), lines
    shards = {
        split: read_json(plan.layout.manifest_file)[split] for plan in (local, pods) for split in ("train", "eval")
    }
    assert shards and result["train_examples"] == read_json(local.layout.manifest_file)["train"]["examples"]
    for key in ("train", "statistics"):  # the same shards and data statistics, by two pods or one process
        assert read_json(pods.layout.manifest_file)[key] == read_json(local.layout.manifest_file)[key], key
    assert not os.path.exists(os.path.join(pods.layout.run_dir, "prepare_data", "pods-try-1"))

    root = str(tmp_path)
    write_digits_partitions(os.path.join(root, "raw", "digits"), DAY, 3)
    last = os.path.join(root, "raw", "digits", DAY.isoformat(), "digits.csv")
    with open(last, "a") as f:
        f.write(",".join(["1"] * 63 + ["oops", "3"]) + "\n")
    bad = plan_for(
        root, "prepare_bad", data=data, training={"launcher": "kubernetes"}, kubernetes={**KUBERNETES, "log_members": 1}
    )
    logger, relayed = collecting_logger("k8s.prepare_bad")
    with pytest.raises(StageFailed) as failure:
        KubernetesLauncher(bad, 1).run(bad.stage("prepare_data"), logger)
    assert failure.value.process.startswith("prepare-1 (pod ") and failure.value.returncode == EXIT_REFUSED
    assert any(line.startswith("[prepare-0] ") for line in relayed.lines), relayed.lines
    assert not any(line.startswith("[prepare-1] ") for line in relayed.lines), relayed.lines
    assert f"{last}, line 1529, field 'pixel_63': 'oops' is not a number" in "\n".join(failure.value.tails["prepare-1"])
    assert not os.path.exists(bad.layout.data_dir)


def test_where_the_api_refuses_watches_the_stage_is_followed_by_listing_and_says_so(cluster, digits_root):
    """A Role without the watch verb (403): the follow lists the Job and its pods every POLL_SECONDS instead,
    says so in the task log, and relays each line once."""
    cluster.forbidden |= {("watch", "jobs"), ("watch", "pods")}
    try:
        result, lines = launch(
            plan_for(digits_root, "k8s_polled", training={"launcher": "kubernetes"}, kubernetes=KUBERNETES),
            "prepare_data",
        )
    finally:
        cluster.forbidden.clear()
    assert result["train_examples"] > 0
    assert sum("the Kubernetes API refuses to watch (403 pods is forbidden" in line for line in lines) == 1, lines
    assert sum("the Kubernetes API refuses to watch (403 jobs is forbidden" in line for line in lines) == 1, lines
    assert sum(re.match(r"\[prepare-0\] (read|wrote) ", line) is not None for line in lines) == 2, lines
    assert cluster.requests["watch pods"] >= 1 and cluster.requests["list pods"] >= 2


@pytest.mark.extended
def test_a_job_deleted_by_someone_else_fails_the_stage_saying_so(cluster, digits_root):
    """Not by this task (kubectl delete, a namespace's cleanup): the DELETED event ends the follow at once."""
    plan = k8s_plan(digits_root, "k8s_deleted_job", num_workers=2, epochs=200)
    launcher, _, finished = train_in_background(plan)
    name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
    launcher.cluster.custom.delete_namespaced_custom_object(
        "batch", "v1", "ml", "jobs", name, propagation_policy="Background"
    )
    failure = finished()
    assert isinstance(failure, StageFailed), failure
    assert failure.summary.startswith(f"Job {name} was deleted before it ended; not by this task"), failure.summary
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
    with pytest.raises(
        StageFailed,
        match=r"was not running after 10 s \(kubernetes.startup_timeout_seconds\); "
        r"FailedScheduling: 0/1 nodes are available: 1 node\(s\) didn't match",
    ):
        launch(plan, "prepare_data")
    assert not [k for k in cluster.objects if "prepare-data" in k[2] and "k8s" in k[2]]


def test_an_oom_killed_pod_and_an_unpullable_image_are_named_with_their_reason(cluster, digits_root, tmp_path):
    """The kernel kills a pod past its memory limit (the stand-in's kubelet puts each pod in a memory
    cgroup: here TensorFlow's import outgrows 100Mi); an image the registry does not have keeps its pod
    Pending in ImagePullBackOff."""
    plan = plan_for(digits_root, "k8s_oom", kubernetes={**KUBERNETES, "roles": {"prepare": {"memory": "100Mi"}}})
    with pytest.raises(StageFailed) as failure:
        launch(plan, "prepare_data")
    assert failure.value.returncode == 137, str(failure.value)
    assert ", OOMKilled: it used more than its memory limit 100Mi" in str(failure.value)
    missing = {**KUBERNETES, "roles": {"prepare": {"image": "registry.example.com/nowhere:1"}}}
    cluster.images = {KUBERNETES["pods"]["image"]}
    try:
        with pytest.raises(
            StageFailed,
            match=r"was not running after 10 s .*(ErrImagePull|ImagePullBackOff): .*"
            r"registry.example.com/nowhere:1",
        ):
            launch(plan_for(str(tmp_path), "k8s_pull", kubernetes=missing), "prepare_data")
    finally:
        cluster.images = None


def test_a_tfjob_runs_the_train_stage_where_its_crd_is_installed(digits_root, tmp_path):
    """operator 'auto' finds the TFJob CRD through API discovery and runs a parameter-server cluster of 2 ps and 2
    workers as a TFJob, warm-started from the baseline version on the artifact volume, its ps pods sized by their
    tables (none here: the runtime's 1 GiB, within which they serve to the end); 'kubeflow' on a cluster without it
    is refused (no retry), before anything is created."""
    kubeflow = StandInCluster(str(tmp_path / "kubeflow"), crds=("tfjobs",)).start()
    os.environ["AIRFLOW_CONN_K8S_KUBEFLOW"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeflow.kubeconfig)}}
    )
    published = {"validation": {"thresholds": {"accuracy": {"lower": 0.1}}}, "export": {"model_name": "k8s_warm"}}
    parent = prepared_plan(
        digits_root,
        "k8s_warm_parent",
        DAY - dt.timedelta(days=1),
        training={"epochs": 1, "num_workers": 1},
        **published,
    )
    for task_id in ("train", "evaluate", "export"):
        run(parent, task_id)
    try:
        cluster = {"strategy": "parameter_server", "num_ps": 2, "num_workers": 2}
        plan = prepared_plan(
            digits_root,
            "k8s_tfjob",
            training={"epochs": 1, "launcher": "kubernetes", "warm_start": "baseline", **cluster},
            kubernetes={**KUBERNETES, "connection_id": "k8s_kubeflow"},
            **published,
        )
        result, lines = launch(plan, "train")
        name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
        assert kubeflow.created == [("TFJob", name)] and result["workers"] == 2
        resources = {
            pod["metadata"]["name"].removeprefix(f"{name}-"): pod["spec"]["containers"][0]["resources"]
            for change, key, pod in ((c[1], c[2], json.loads(c[3])) for c in kubeflow.recorded_changes())
            if change == "ADDED" and key[0] == "Pod"
        }
        sized = {"cpu": "1", "memory": "1024Mi"}
        assert resources == {
            **{f"ps-{i}": {"requests": sized, "limits": sized} for i in range(2)},
            **{pod: {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}} for pod in ("chief-0", "worker-0", "worker-1")},
        }, resources
        version = read_json(parent.layout.result("export"))["version"]
        assert result["warm_start"]["parent_version"] == version  # through the chief's termination message
        assert "[chief-0] chief-0: warm start from version" in "\n".join(lines)
        assert "chief-0" in weights(lines) and result["final_step"] == steps_of(plan, 1)
        wait_for(lambda: not kubeflow.objects, 30, "the TFJob, its pods and Services to be deleted")
    finally:
        kubeflow.close()
    plan = plan_for(
        str(tmp_path),
        "k8s_refused",
        training={"launcher": "kubernetes"},
        kubernetes={**KUBERNETES, "operator": "kubeflow"},
    )
    with pytest.raises(StageFailed, match=r"does not serve tfjobs\.kubeflow\.org/v1") as refused:
        launch(plan, "train")
    assert refused.value.returncode == EXIT_REFUSED


@pytest.fixture(scope="module")
def mpi_cluster(tmp_path_factory):
    """A stand-in cluster serving the MPIJob CRD, reached through the connection k8s_mpi."""
    kubeflow = StandInCluster(str(tmp_path_factory.mktemp("kubeflow")), crds=("mpijobs",)).start()
    os.environ["AIRFLOW_CONN_K8S_MPI"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeflow.kubeconfig)}}
    )
    yield kubeflow
    kubeflow.close()


MPIJOB_TRAINING = {
    "epochs": 1,
    "launcher": "kubernetes",
    "backend": "mpi",
    "num_workers": 2,
    "mpi": {"controller": "mpi", "slots_per_worker": 2},
}


def mpijob_plan(request, cluster: StandInCluster, digits_root: str, root: str, run_id: str, **training):
    """A train stage of MPIJOB_TRAINING (and ``training``) on ``cluster``, its data prepared; ``root`` 'bucket': the
    artifact root in a new S3 bucket the pods reach with a Secret's credentials (no volume), the data uploaded."""
    kubernetes = {**KUBERNETES, "connection_id": "k8s_mpi", "log_members": "all"}
    sections = {"training": {**MPIJOB_TRAINING, **training}}
    plan = prepared_plan(digits_root, run_id, kubernetes=kubernetes, **sections)
    if root == "volume":
        return plan
    s3 = request.getfixturevalue("s3")
    secret = store_secret(cluster, f"s3-{run_id.replace('_', '-')}", s3.env_at(f"{cluster.subnet}.1"))
    kubernetes = {**kubernetes, "artifact_volume": None, "credentials_secret": secret}
    in_a_bucket = plan_for(new_bucket_url(request, "s3", "tfdist"), run_id, kubernetes=kubernetes, **sections)
    storage.upload_tree(plan.layout.data_dir, in_a_bucket.layout.data_dir)
    return in_a_bucket


@pytest.mark.parametrize("root", ["volume", "bucket"])
def test_an_mpijob_runs_the_train_stage_where_its_crd_is_installed(request, mpi_cluster, digits_root, root):
    """operator 'auto' finds the MPIJob CRD through API discovery and runs Horovod over OpenMPI as an MPIJob:
    mpirun in the launcher pod starts orted and two ranks in each worker pod through its sshd (the worker
    image's user and config, the job's generated key), and every rank ends with the same weights. With the
    artifact root in a bucket, the ranks reach it with the launcher pod's environment (the Secret's
    credentials), which the launcher hands on through mpirun: rank 0 uploads the checkpoints."""
    plan = mpijob_plan(request, mpi_cluster, digits_root, root, f"k8s_mpijob_{root}")
    created = len(mpi_cluster.created)
    result, lines = launch(plan, "train")
    name = object_name(plan.context.pipeline_id, plan.context.run_id, "train")
    assert mpi_cluster.created[created:] == [("MPIJob", name)] and result["workers"] == 4
    assert set(weights(lines)) == {f"rank-{r}" for r in range(4)} and len(set(weights(lines).values())) == 1
    for worker in ("worker-0", "worker-1"):  # each worker pod's sshd let mpirun's ssh in, as the image's user
        assert any(line.startswith(f"[{worker}] Accepted publickey for tfdist from ") for line in lines), worker
    assert checkpoint_step(plan.layout.checkpoint_dir) == result["final_step"]
    assert_nothing_left(mpi_cluster, plan)


def rank_process(plan, rank: int) -> psutil.Process:
    """The training process of the run's rank ``rank`` (started by mpirun through a worker pod's sshd)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmdline = p.cmdline()
            ours = "tfdist.trainer.train" in cmdline and plan.context.run_id in " ".join(cmdline)
            if ours and p.environ().get("OMPI_COMM_WORLD_RANK") == str(rank):
                found.append(p)
    (process,) = found
    return process


@pytest.mark.extended
def test_an_mpijob_in_a_bucket_whose_rank_stops_fails_as_hung_read_over_ssh(request, mpi_cluster, digits_root):
    """With no volume, each rank beats in its worker pod's scratch: the launcher pod reads the beats there over the
    SSH mpirun uses, and once none has stepped for the hang timeout it stops the stage (EXIT_HUNG), naming who."""
    plan = mpijob_plan(
        request, mpi_cluster, digits_root, "bucket", "k8s_mpijob_hung", epochs=400, hang_timeout_seconds=10
    )
    _launcher, _, finished = train_in_background(plan)
    rank_process(plan, 1).suspend()
    stopped_at = time.time()
    failure = finished()
    failed_after = time.time() - stopped_at
    assert isinstance(failure, StageFailed), failure
    assert failure.returncode == EXIT_HUNG and failure.process.startswith("launcher"), failure.summary
    assert re.search(r"stopped the hung stage: rank-\d made no training progress for 10 s", failure.summary)
    assert failed_after < 60, failed_after  # the timeout, a beats scan every 10 s, the job's failure (not 400 epochs)
    assert_nothing_left(mpi_cluster, plan)
