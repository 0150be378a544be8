"""The stand-in's API server and controllers without root, through the real ``kubernetes`` client, with the
scripted kubelet playing each pod: what test_cluster.py checks with real processes, wherever no process is
needed (the termination message's policy, watches and their 410, followed logs, RBAC refusals, the Job
controller's failure policy and finalizer, the scheduler, image pulls, the TFJob and MPIJob controllers). Fast."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.k8s_standin import Script, ScriptedKubelet, StandInCluster, timing
from tests.k8s_standin.tests import clients
from tests.k8s_standin.tests.clients import (
    NS,
    apis,
    check_failed_by_policy,
    check_unschedulable,
    check_watches_resume_and_a_lost_version_is_gone,
    conditions,
    evict,
    indexed_job,
    pods_of,
    running_pods,
    terminated,
    until,
)

pytestmark = pytest.mark.e2e  # starts the stand-in cluster's API server


@pytest.fixture
def standin(tmp_path):
    """Start a rootless stand-in whose kubelet plays the script named by the pod's name, else by its ``script``
    label."""
    started = []

    def script(scripts: dict[str, Script], pod: dict) -> Script:
        return scripts.get(pod["metadata"]["name"]) or scripts[(pod["metadata"].get("labels") or {}).get("script", "")]

    def start(scripts: dict[str, Script], **keywords) -> StandInCluster:
        kubelet = ScriptedKubelet(lambda pod: script(scripts, pod))
        started.append(StandInCluster(str(tmp_path / str(len(started))), kubelet=kubelet, **keywords).start())
        return started[-1]

    yield start
    for cluster in started:
        cluster.close()
        assert not cluster.kubelet.errors


def container(name: str = "main", **fields) -> dict:
    return {"name": name, "image": "python:3.11", "command": ["python", "-c", "pass"], **fields}


def job(name: str, script: str, completions: int = 1, rules: bool = False, **fields) -> dict:
    """An Indexed Job whose pods play ``script``; ``rules``: the launcher's pod failure policy."""
    policy = {
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]}},
            ]
        }
    }
    return indexed_job(name, container(**fields), completions, {"script": script}, **(policy if rules else {}))


FALLBACK = {"terminationMessagePolicy": "FallbackToLogsOnError"}
MESSAGES = {  # name: (script, container fields, the message)
    "file": (Script(["x"], message="done: 1"), {}, "done: 1"),
    "file-fails-silently": (Script(["boom"], exit_code=1), {}, None),
    "fallback-ok": (Script(["fine"]), FALLBACK, None),
    "fallback-file": (Script(["x"], exit_code=2, message="why"), FALLBACK, "why"),
    "fallback-lines": (
        Script([str(i) for i in range(100)], exit_code=3),
        FALLBACK,
        "".join(f"{i}\n" for i in range(20, 100)),
    ),
    "fallback-bytes": (
        Script([f"line {i} {'x' * 20}" for i in range(100)], exit_code=3),
        FALLBACK,
        "".join(f"line {i} {'x' * 20}\n" for i in range(100))[-2048:],
    ),
    "long": (Script(message="a" * 5000 + "END"), {}, "a" * 4093 + "END"),
    "oom": (Script(["hog"], exit_code=137, oom_killed=True), {}, None),
}


def test_termination_messages_follow_the_policy_and_the_reason_says_how_it_ended(standin):
    cluster = standin({name: script for name, (script, _, _) in MESSAGES.items()})
    core, batch, _ = apis(cluster)
    for name, (_, fields, _) in MESSAGES.items():
        batch.create_namespaced_job(NS, job(name, name, **fields))
    for name, (_, _, expected) in MESSAGES.items():
        assert terminated(core, name).message == expected, name
    assert (terminated(core, "file").reason, terminated(core, "fallback-file").exit_code) == ("Completed", 2)
    assert (terminated(core, "oom").reason, terminated(core, "oom").exit_code) == ("OOMKilled", 137)
    assert terminated(core, "file-fails-silently").reason == "Error"
    (pod,) = pods_of(core, "job-name=file")
    main = pod.spec.containers[0]  # the API server's defaults
    assert (main.termination_message_path, main.termination_message_policy) == ("/dev/termination-log", "File")
    assert {c.type: c.status for c in pod.status.conditions} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    assert pod.spec.node_name == "standin" and pod.status.pod_ip and pod.status.phase == "Succeeded"


def test_watches_resume_from_a_resource_version_and_one_too_old_is_gone(standin):
    cluster = standin({"w": Script(["hi", 0.2]), "pass": Script()}, history_limit=40)
    check_watches_resume_and_a_lost_version_is_gone(
        cluster, lambda name, talks: job(name, "w" if talks else "pass"), 20
    )


def test_a_followed_log_streams_each_line_once_and_a_dropped_connection_cuts_it_off(standin, monkeypatch):
    monkeypatch.setattr(timing, "BOOKMARK_SECONDS", 0.1)
    cluster = standin(
        {"talker": Script([s for i in range(5) for s in (str(i), 0.1)]), "long": Script(["."], exit_code=None)}
    )
    core, batch, custom = apis(cluster)
    batch.create_namespaced_job(NS, job("talker", "talker"))
    pod = until(lambda: [p for p in pods_of(core, "app=talker") if p.status.phase != "Pending"])[0]
    stream = core.read_namespaced_pod_log(pod.metadata.name, NS, follow=True, timestamps=True, _preload_content=False)
    lines = b"".join(stream.stream()).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["0", "1", "2", "3", "4"]
    assert core.read_namespaced_pod_log(pod.metadata.name, NS, tail_lines=2, _preload_content=False).data == b"3\n4\n"
    batch.create_namespaced_job(NS, job("long", "long"))
    bookmarks = [
        e["raw_object"]["metadata"]["resourceVersion"]
        for e in watch.Watch().stream(
            custom.list_namespaced_custom_object,
            "batch",
            "v1",
            NS,
            "jobs",
            field_selector="metadata.name=long",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        if e["type"] == "BOOKMARK"
    ]
    assert bookmarks
    pod = until(lambda: [p for p in pods_of(core, "app=long") if p.status.phase == "Running"])[0]
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, follow=True, _preload_content=False)
    cluster.drop_connections(1)
    with pytest.raises(Exception) as cut:  # whichever the client raises for a cut-off body
        for _ in log.stream():
            pass
    assert "IncompleteRead" in repr(cut.value) or "ProtocolError" in repr(cut.value)


def test_a_verb_rbac_denies_is_forbidden_and_requests_are_counted(standin):
    cluster = standin({"counted": Script(["one line"])})
    core, batch, _ = apis(cluster)
    cluster.forbidden.add(("watch", "pods"))
    batch.create_namespaced_job(NS, job("counted", "counted"))
    with pytest.raises(ApiException) as denied:
        next(iter(watch.Watch().stream(core.list_namespaced_pod, NS, label_selector="app=counted", timeout_seconds=5)))
    assert denied.value.status == 403 and 'cannot watch resource "pods"' in json.loads(denied.value.body)["message"]
    (pod,) = until(lambda: [p for p in pods_of(core, "app=counted") if p.status.phase == "Succeeded"])
    text = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False).data
    assert cluster.requests["create jobs"] == 1 and cluster.requests["watch pods"] == 1
    assert cluster.bytes_sent["get pods/log"] == len(text) == len("one line\n")


def test_job_pods_fail_by_the_failure_policy_or_wait_unschedulable_or_for_their_image(standin, monkeypatch):
    """The Job controller's messages are the real one's; an evicted or deleted pod stays marked for deletion until
    the controller counted it (the job-tracking finalizer), then is gone; a crashed pod stays; a pod whose node
    selector matches no node, or whose image the registry lacks, stays Pending, saying why."""
    monkeypatch.setattr(timing, "POD_RESYNC_SECONDS", 0.2)
    runs = Script(["up"], exit_code=None)
    cluster = standin({"runs": runs, "crash": Script(exit_code=3), "never": Script()}, images={"python:3.11"})
    core, batch, _ = apis(cluster)
    for name, script in (("evicted", "runs"), ("deleted", "runs"), ("crash", "crash")):
        batch.create_namespaced_job(NS, job(name, script, rules=True))
    unschedulable = job("pending", "never")
    unschedulable["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    batch.create_namespaced_job(NS, unschedulable)
    batch.create_namespaced_job(NS, job("pull", "never", image="tfdist-worker:missing"))
    running = running_pods(core, ("evicted", "deleted"))
    evict(core, running["evicted"])
    deleting = core.delete_namespaced_pod(running["deleted"].metadata.name, NS)
    assert deleting.metadata.deletion_timestamp and deleting.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]
    check_failed_by_policy(
        core,
        batch,
        running,
        {
            "evicted": "Pod {} has condition DisruptionTarget matching FailJob rule at index 0",
            "deleted": "Container main for pod {} failed with exit code 143 matching FailJob rule at index 1",
            "crash": "Container main for pod {} failed with exit code 3 matching FailJob rule at index 1",
        },
    )
    check_unschedulable(core, "pending")
    pull = until(
        lambda: [
            p
            for p in pods_of(core, "job-name=pull")
            if p.status.container_statuses and p.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
        ]
    )[0]
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log(pull.metadata.name, NS)
    assert refused.value.status == 400 and "trying and failing to pull image" in refused.value.body
    assert cluster.kubelet.played.count(pull.metadata.name) == 0


def tfjob(name: str, replicas: dict[str, tuple[int, str]], **run_policy) -> dict:
    """A TFJob: replica type → (replicas, the script its pods play)."""
    pods = {rtype: (count, container("tensorflow"), {"script": script}) for rtype, (count, script) in replicas.items()}
    return clients.tfjob(name, pods, **run_policy)


def test_the_tfjob_controller_succeeds_with_its_chief_and_fails_with_a_replica(standin):
    cluster = standin(
        {
            "chief": Script(["chief", 0.5], message="42"),
            "serve": Script(exit_code=None),
            "bad-worker-1": Script([0.3], exit_code=3),
        },
        crds=("tfjobs",),
    )
    core, _, custom = apis(cluster)
    args = ("kubeflow.org", "v1", NS, "tfjobs")
    custom.create_namespaced_custom_object(
        *args,
        tfjob("tf", {"Chief": (1, "chief"), "PS": (1, "serve"), "Worker": (2, "serve")}, cleanPodPolicy="Running"),
    )
    custom.create_namespaced_custom_object(*args, tfjob("bad", {"Worker": (2, "serve")}, cleanPodPolicy="None"))

    def ended(name):
        status = custom.get_namespaced_custom_object(*args, name).get("status") or {}
        return (conditions(status).get("Failed") == "True" or conditions(status).get("Succeeded") == "True") and status

    status = until(lambda: ended("tf") and ended("tf")["replicaStatuses"].get("PS") == {"succeeded": 1} and ended("tf"))
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    assert status["replicaStatuses"] == {"Chief": {"succeeded": 1}, "PS": {"succeeded": 1}, "Worker": {"succeeded": 2}}
    until(lambda: len(pods_of(core, "training.kubeflow.org/job-name=tf")) == 1, what="cleanPodPolicy Running")
    chief = core.read_namespaced_pod("tf-chief-0", NS)
    assert chief.status.container_statuses[0].state.terminated.message == "42"
    tf_config = json.loads(next(e.value for e in chief.spec.containers[0].env if e.name == "TF_CONFIG"))
    assert tf_config["cluster"]["worker"] == ["tf-worker-0.ml.svc:2222", "tf-worker-1.ml.svc:2222"]
    bad = until(lambda: ended("bad"))
    assert bad["conditions"][-1]["message"] == "TFJob ml/bad has failed because 1 Worker replica(s) failed."
    assert bad["replicaStatuses"] == {"Worker": {"active": 1, "failed": 1}}
    time.sleep(0.5)  # cleanPodPolicy None: the running worker keeps running
    assert sorted(p.status.phase for p in pods_of(core, "training.kubeflow.org/job-name=bad")) == ["Failed", "Running"]


def test_the_mpijob_controller_makes_the_operators_objects_and_follows_its_launcher_job(standin):
    cluster = standin(
        {"launcher": Script(["mpirun", 0.5], message="ok"), "worker": Script(exit_code=None)}, crds=("mpijobs",)
    )
    core, batch, custom = apis(cluster)
    args = ("kubeflow.org", "v2beta1", NS, "mpijobs")
    replica = {
        "restartPolicy": "Never",
        "template": {"metadata": {"labels": {}}, "spec": {"containers": [container()]}},
    }
    replicas = {
        "Launcher": {
            **replica,
            "replicas": 1,
            "template": {**replica["template"], "metadata": {"labels": {"script": "launcher"}}},
        },
        "Worker": {
            **replica,
            "replicas": 2,
            "template": {**replica["template"], "metadata": {"labels": {"script": "worker"}}},
        },
    }
    custom.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "mpi", "namespace": NS},
            "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": replicas, "runPolicy": {"cleanPodPolicy": "Running"}},
        },
    )
    status = until(
        lambda: (
            (s := custom.get_namespaced_custom_object(*args, "mpi").get("status") or {})
            and conditions(s).get("Succeeded") == "True"
            and s["replicaStatuses"]["Worker"] == {}
            and s
        ),
        what="the MPIJob to succeed and its workers to be cleaned up",
    )
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    assert status["replicaStatuses"] == {"Launcher": {"succeeded": 1}, "Worker": {}}
    config_map = core.read_namespaced_config_map("mpi-config", NS)
    assert config_map.data["hostfile"] == "mpi-worker-0.mpi.ml.svc slots=2\nmpi-worker-1.mpi.ml.svc slots=2\n"
    assert set(core.read_namespaced_secret("mpi-ssh", NS).data) == {"ssh-privatekey", "ssh-publickey"}
    assert batch.read_namespaced_job("mpi-launcher", NS).metadata.owner_references[0].kind == "MPIJob"
    (launcher,) = pods_of(core, "training.kubeflow.org/job-role=launcher")
    assert launcher.status.container_statuses[0].state.terminated.message == "ok"
    env = {e.name: e.value for e in launcher.spec.containers[0].env}
    assert (
        env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile" and env["OMPI_MCA_orte_set_default_slots"] == "2"
    )
