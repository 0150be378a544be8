"""How the Kubernetes launcher follows a stage (``follow``) and says how its pods ended (``diagnosis``), fast and
without root: the stand-in's API server and Job controller over real HTTP and the real asyncio client, with
the scripted kubelet (tests/k8s_standin/scripted.py) playing each pod: its log lines, its termination message,
how it ends, and what happens to it meanwhile (evicted, deleted, the API cut off). Table-driven, like the cncf
provider's pod-manager tests; each case runs in a second or two. The root-only tests of the same follow, with
real processes, are in test_kubernetes_launcher.py."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from kubernetes import client, config

from tests.k8s_standin import Script, ScriptedKubelet, StandInCluster
from tests.support.logs import collecting_logger
from tfdist.contract.launch import EXIT_HUNG
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.kubernetes import follow as following
from tfdist.operators.launchers.kubernetes.api import Watch
from tfdist.operators.launchers.kubernetes.follow import follow
from tfdist.operators.plan import Following

pytestmark = pytest.mark.e2e  # starts the stand-in cluster's API server

NS, NAME, CONNECTION = "ml", "tfd-digits-train-1", "k8s_scripted"
MEMBERS = ("worker-0", "worker-1")
INDEX = "batch.kubernetes.io/job-completion-index"
WATCH = Watch(
    following=Following(connection_id=CONNECTION, namespace=NS, startup_timeout_seconds=1, log_members=2),
    task_id="train",
    kind="Job",
    name=NAME,
    objects=(("Job", NAME),),
    members=MEMBERS,
    rank_tagged=False,
    result_member="worker-0",
)
RESULT = {"final_step": 20, "workers": 2}
RUNS = Script(["running"], exit_code=None)
"""A member that runs until the stage's end stops it."""


def api(pod) -> client.CoreV1Api:
    """The real client, for a script's action on the cluster."""
    return client.CoreV1Api(config.new_client_from_config_dict(pod.cluster.kubeconfig))


def evict(pod) -> None:
    core = api(pod)
    core.create_namespaced_pod_eviction(
        pod.name, NS, client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=NS))
    )


def delete_pod(pod) -> None:
    api(pod).delete_namespaced_pod(pod.name, NS)


def delete_job(pod) -> None:
    client.CustomObjectsApi(config.new_client_from_config_dict(pod.cluster.kubeconfig)).delete_namespaced_custom_object(
        "batch", "v1", NS, "jobs", NAME, propagation_policy="Background"
    )


def job(image: str = "tfdist-worker:test", node_selector: dict | None = None) -> dict:
    """The stage's Job as the launcher makes one: Indexed, its pod failure policy failing it on a disruption or
    any non-zero exit of the ``trainer`` container, the termination message falling back to the log."""
    container = {
        "name": "trainer",
        "image": image,
        "command": ["python", "-m", "tfdist.trainer.train"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"limits": {"memory": "100Mi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(MEMBERS),
            "parallelism": len(MEMBERS),
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]},
                    },
                ]
            },
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    **({"nodeSelector": node_selector} if node_selector else {}),
                }
            },
        },
    }


@dataclass(frozen=True)
class Case:
    """One stage: each member's script, the Job, and what the follow ends with: the result record, or the
    StageFailed's process (a regex), return code, words in its summary, lost members and first tail."""

    scripts: dict[str, Script]
    result: dict | None = None
    process: str = ""
    returncode: int | None = None
    says: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    tail: tuple[str, ...] | None = None
    """The failed member's last lines, first among the tails."""
    job: dict = field(default_factory=job)
    images: tuple[str, ...] | None = None
    following: dict = field(default_factory=dict)
    """Over WATCH's following."""


SUCCESS = Script(["loading", "step 10", "step 20"], message=json.dumps(RESULT))
CASES = {
    "success: the result record from the result member's termination message": Case(
        {"worker-0": SUCCESS, "worker-1": Script(["worker-1 trains"])}, result=RESULT
    ),
    "success without a result record": Case(
        {"worker-0": Script(["done"]), "worker-1": Script()},
        process=r"worker-0 \(pod tfd-digits-train-1-0-\w+\)$",
        says=("ended without handing back the stage's result record; termination message None",),
    ),
    "a failed pod: its exit code, by the pod failure policy": Case(
        {"worker-0": RUNS, "worker-1": Script(["loading", "ValueError: bad row"], exit_code=3)},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        returncode=3,
        says=(
            "worker-1 (pod tfd-digits-train-1-1-",
            "exited with code 3; Job tfd-digits-train-1 failed: PodFailurePolicy: Container trainer for pod ml/",
            "failed with exit code 3 matching FailJob rule at index 1",
        ),
        tail=("loading", "ValueError: bad row"),
    ),
    "OOMKilled: named with the memory limit, not lost": Case(
        {"worker-0": RUNS, "worker-1": Script(["import tensorflow"], exit_code=137, oom_killed=True)},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+, OOMKilled: it used more than its memory limit 100Mi ",
        returncode=137,
        says=("(kubernetes.pods.memory or roles.<role>.memory)",),
    ),
    "killed by a signal: lost": Case(
        {"worker-0": RUNS, "worker-1": Script(["step 10"], exit_code=137)},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        returncode=137,
        says=("exited with code 137",),
        lost=("worker-1",),
    ),
    "hung: the report from its termination message, lost": Case(
        {
            "worker-0": RUNS,
            "worker-1": Script(
                ["step 10"], exit_code=EXIT_HUNG, message="worker-1 is stopped: its process 42 (SIGSTOP)"
            ),
        },
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        returncode=EXIT_HUNG,
        says=("stopped the hung stage: worker-1 is stopped: its process 42 (SIGSTOP)",),
        lost=("worker-1",),
    ),
    "evicted: gone once counted, named from the Job's failure, lost": Case(
        {"worker-0": RUNS, "worker-1": Script(["step 10", evict], exit_code=None)},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        says=("was deleted (it is gone)", "has condition DisruptionTarget matching FailJob rule at index 0"),
        lost=("worker-1",),
    ),
    "deleted pod: gone once counted, named from the Job's failure, lost": Case(
        {"worker-0": RUNS, "worker-1": Script(["step 10", delete_pod], exit_code=None)},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        returncode=143,
        says=("was deleted (it is gone)", "failed with exit code 143 matching FailJob rule at index 1"),
        lost=("worker-1",),
    ),
    "deleted Job: not by this task": Case(
        {"worker-0": Script(["step 10", delete_job], exit_code=None), "worker-1": RUNS},
        process=f"Job {NAME}$",
        says=(f"Job {NAME} was deleted before it ended; not by this task",),
    ),
    "image pull back-off: not running after the startup timeout": Case(
        {},
        job=job(image="registry.example.com/nowhere:1"),
        images=("tfdist-worker:test",),
        process=r"worker-\d \(pod tfd-digits-train-1-\d-\w+\)$",
        says=(
            "was not running after 1 s (kubernetes.startup_timeout_seconds); ",
            'Failed to pull image "registry.example.com/nowhere:1"',
        ),
    ),
    "unschedulable: pending, with the scheduler's reason": Case(
        {},
        job=job(node_selector={"gpu": "a100"}),
        process=r"worker-\d \(pod tfd-digits-train-1-\d-\w+\)$",
        says=(
            "was not running after 1 s (kubernetes.startup_timeout_seconds); FailedScheduling: 0/1 nodes are "
            "available: 1 node(s) didn't match Pod's node affinity/selector",
        ),
    ),
    "a failed member whose log is not relayed: its last lines read once it failed": Case(
        {"worker-0": RUNS, "worker-1": Script([f"line {i}" for i in range(50)], exit_code=2)},
        following={"log_members": 1},
        process=r"worker-1 \(pod tfd-digits-train-1-1-\w+\)$",
        returncode=2,
        tail=tuple(f"line {i}" for i in range(10, 50)),
    ),
}


def member_of(pod: dict) -> str:
    return MEMBERS[int(pod["metadata"]["annotations"][INDEX])]


@pytest.fixture
def standin(tmp_path, monkeypatch) -> Callable[..., StandInCluster]:
    """Start a rootless stand-in: its kubelet plays ``scripts`` by member; the follow's waits shortened."""
    monkeypatch.setattr(following, "RETRY_SECONDS", 0.1)
    monkeypatch.setattr(following, "POLL_SECONDS", 0.2)
    started = []

    def start(scripts: dict[str, Script], **keywords) -> StandInCluster:
        kubelet = ScriptedKubelet(lambda pod: scripts.get(member_of(pod), Script()))
        cluster = StandInCluster(str(tmp_path), kubelet=kubelet, **keywords).start()
        started.append(cluster)
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{CONNECTION.upper()}",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(cluster.kubeconfig)}}),
        )
        return cluster

    yield start
    for cluster in started:
        cluster.close()
        assert not cluster.kubelet.errors, "a script's action failed"


def run_stage(cluster: StandInCluster, manifest: dict, watch: Watch = WATCH) -> tuple[dict | StageFailed, list[str]]:
    """Create the Job through the real client and follow it: (its result record or StageFailed, the log)."""
    client.BatchV1Api(config.new_client_from_config_dict(cluster.kubeconfig)).create_namespaced_job(NS, manifest)
    logger, lines = collecting_logger(f"follow.{watch.name}")
    try:
        return asyncio.run(asyncio.wait_for(follow(watch, logger), 30)), lines.lines
    except StageFailed as failure:
        return failure, lines.lines


def written(cluster: StandInCluster, member: str) -> list[str]:
    """The lines the member's pod wrote, from the kubelet's log file."""
    (pod_dir,) = [
        d for d in os.listdir(os.path.join(cluster.workdir, "pods")) if d.startswith(f"{NS}_{NAME}-{member[-1]}-")
    ]
    with open(os.path.join(cluster.workdir, "pods", pod_dir, "log")) as f:
        return [line.split(" ", 1)[1] for line in f.read().splitlines()]


def relayed(lines: list[str], member: str) -> list[str]:
    return [line.removeprefix(f"[{member}] ") for line in lines if line.startswith(f"[{member}] ")]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_follow_ends_with_the_result_record_or_names_the_pod_and_how_it_ended(standin, case):
    cluster = standin(case.scripts, images=case.images)
    watch = replace(WATCH, following=replace(WATCH.following, **case.following))
    outcome, lines = run_stage(cluster, case.job, watch)
    if case.result is not None:
        assert outcome == case.result, outcome
        for member in MEMBERS:  # each relayed line once, in order
            assert relayed(lines, member) == written(cluster, member), member
    else:
        assert isinstance(outcome, StageFailed), outcome
        assert re.match(case.process, outcome.process), outcome.process
        assert outcome.returncode == case.returncode, outcome.summary
        for words in case.says:
            assert words in outcome.summary, outcome.summary
        assert outcome.lost == case.lost, outcome.summary
        if case.tail is not None:
            member, tail = next(iter(outcome.tails.items()))
            assert (member, tuple(tail)) == (outcome.process.split(" ")[0], case.tail), outcome.tails
    for member in MEMBERS[watch.following.log_members :]:
        assert not relayed(lines, member), f"{member}'s log is not relayed"
    assert not cluster.objects, "the stage's objects are deleted when it ends"


def talk(first: int, last: int) -> list:
    """Numbered lines, a moment apart."""
    return [step for i in range(first, last) for step in (f"line {i}", 0.01)]


def drop(seconds: float) -> Callable:
    return lambda pod: pod.cluster.drop_connections(seconds)


def churn(count: int) -> Callable:
    """While GETs are cut off, make ``count`` changes through the API (creates still answer): more than the
    history of a small stand-in holds."""

    def make(pod) -> None:
        core = api(pod)
        for n in range(count):
            core.create_namespaced_config_map(
                NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"churn-{n}"}, "data": {}}
            )

    return make


RESUMED = {
    "a dropped log stream resumes after its last line relayed": (
        {"history_limit": 10000},
        [drop(0.5)],
        {"list jobs": 1},
    ),
    "a watch whose resourceVersion is gone (410) lists again": (
        {"history_limit": 10},
        [drop(0.8), churn(30)],
        {"list jobs": 2},
    ),
}


@pytest.mark.parametrize("standin_keywords, mid_stream, lists", RESUMED.values(), ids=RESUMED.keys())
def test_an_api_cut_off_mid_stream_loses_and_repeats_no_log_line(standin, standin_keywords, mid_stream, lists):
    """The API cuts every GET off for a moment while the result member prints: its log stream resumes after its
    last relayed line (asking for more, the lines already relayed skipped by timestamp), the watches resume from
    their resourceVersion, or list again when the history no longer reaches back to it (410 Gone)."""
    scripts = {"worker-0": Script([*talk(0, 30), *mid_stream, *talk(30, 60)], message=json.dumps(RESULT))}
    cluster = standin(scripts, **standin_keywords)
    outcome, lines = run_stage(cluster, job())
    assert outcome == RESULT, outcome
    assert relayed(lines, "worker-0") == written(cluster, "worker-0") == [f"line {i}" for i in range(60)]
    assert sum("the Kubernetes API did not answer" in line for line in lines) >= 1, lines
    assert cluster.requests["get pods/log"] >= 2 + 1  # worker-0's resumed at least once, worker-1's
    for what, count in lists.items():
        assert cluster.requests[what] == count, cluster.requests


def test_where_the_api_refuses_watches_the_stage_is_followed_by_listing_and_says_so(standin):
    """A Role without the watch verb (403): the object and its pods are listed every POLL_SECONDS instead, the
    task log says so once for each, and each line is relayed once."""
    scripts = {"worker-0": Script([*talk(0, 20), 0.5, *talk(20, 40)], message=json.dumps(RESULT))}
    cluster = standin(scripts)
    cluster.forbidden |= {("watch", "jobs"), ("watch", "pods")}
    outcome, lines = run_stage(cluster, job())
    assert outcome == RESULT, outcome
    assert sum("the Kubernetes API refuses to watch (403 pods is forbidden" in line for line in lines) == 1, lines
    assert sum("the Kubernetes API refuses to watch (403 jobs is forbidden" in line for line in lines) == 1, lines
    assert relayed(lines, "worker-0") == written(cluster, "worker-0") == [f"line {i}" for i in range(40)]
    assert cluster.requests["watch pods"] == 1 and cluster.requests["list pods"] >= 3
