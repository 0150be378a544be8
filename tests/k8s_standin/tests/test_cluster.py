"""The stand-in cluster of tests/k8s_standin/ on its own, with its process kubelet, through the real
``kubernetes`` client: termination messages, memory limits, image pulls, API discovery and custom objects, the
TFJob controller, the MPIJob controller (its launcher reaching the workers' sshd over ssh), and that
``close()`` leaves nothing behind. Pods run tiny ``python -c`` commands (TensorFlow only in the e2e test);
needs root (network namespaces). The same API server and controllers without root, with the scripted
kubelet: test_scripted.py."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import psutil
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.k8s_standin import StandInCluster, dns, image_reference, kubelet, memory_bytes, timing
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
from tests.support.roots import STANDIN_NEEDS_ROOT, lacks_root

pytestmark = pytest.mark.e2e  # starts the stand-in cluster's API server and pods

MARK = "# standin-test"
"""In every pod's command line: no process carrying it may outlive its cluster."""


def assert_nothing_left(cluster: StandInCluster) -> None:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"tfd{cluster.id}p" not in netns and f"tfd{cluster.id}" not in links
    assert cluster.cgroup is None or not os.path.exists(cluster.cgroup)
    left = [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE and MARK in " ".join(p.info["cmdline"] or [])
    ]
    assert not left, left


@pytest.fixture
def cluster(tmp_path, request, monkeypatch):
    """A started stand-in (``StandInCluster`` keywords from an indirect parameter; ``cgroups: False`` to do without
    memory cgroups), closed and checked empty after."""
    if lacks_root():
        pytest.skip(STANDIN_NEEDS_ROOT)
    params = dict(getattr(request, "param", {}))
    if not params.pop("cgroups", True):
        monkeypatch.setattr(kubelet, "_memory_cgroup", lambda: None)
    standin = StandInCluster(str(tmp_path), **params).start()
    yield standin
    standin.close()
    assert_nothing_left(standin)


def container(code: str, name: str = "main", **fields) -> dict:
    return {"name": name, "image": "python:3.11", "command": ["python", "-c", f"{code}\n{MARK}"], **fields}


def job(name: str, code: str, completions: int = 1, **fields) -> dict:
    return indexed_job(name, container(code, **fields), completions)


def test_quantities_and_image_references():
    assert [memory_bytes(q) for q in ("512Mi", "1Gi", "500M", "1e3", "1073741824", "1.5Ki", "100m", 64)] == [
        512 * 2**20,
        2**30,
        500 * 10**6,
        1000,
        2**30,
        1536,
        1,
        64,
    ]
    with pytest.raises(ValueError):
        memory_bytes("lots")
    assert image_reference("python") == "docker.io/library/python:latest"
    assert image_reference("tfdist-worker:test") == "docker.io/library/tfdist-worker:test"
    assert image_reference("ghcr.io/org/img") == "ghcr.io/org/img:latest"
    assert image_reference("localhost:5000/img@sha256:ab") == "localhost:5000/img@sha256:ab"


def test_a_hosts_file_rewritten_in_place_never_reads_empty(tmp_path):
    """A pod's resolver reading its hosts file while the kubelet rewrites it (shorter, then longer) always finds
    the record it needs: the file is never seen truncated."""
    path = str(tmp_path / "hosts")
    texts = ["10.0.0.2 ps-0.ml.svc\n" + "10.0.0.3 worker-0.ml.svc\n" * 40, "10.0.0.2 ps-0.ml.svc\n"]
    dns.overwrite(path, texts[0])
    done = threading.Event()

    def rewrite() -> None:
        try:
            for i in range(20000):
                dns.overwrite(path, texts[i % 2])
        finally:
            done.set()  # a failed rewrite ends the reads too, not the test's time

    threading.Thread(target=rewrite, daemon=True).start()
    reads = 0
    while not done.is_set():
        with open(path) as f:
            assert "ps-0.ml.svc" in f.read()
        reads += 1
    assert reads > 100


def test_termination_messages_follow_the_policy(cluster, tmp_path):
    core, batch, _ = apis(cluster)
    write = "open('/dev/termination-log', 'w').write({!r})"
    custom = str(tmp_path / "results" / "message")  # not there yet: made for the bind mount, left empty
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    cases = {  # name: (code, container fields, expected message)
        "file": (write.format("done: 1"), {}, "done: 1"),
        "file-fails-silently": ("print('boom'); raise SystemExit(1)", {}, None),
        "fallback-ok": ("print('fine')", fallback, None),
        "fallback-file": (f"{write.format('why')}; raise SystemExit(2)", fallback, "why"),
        "fallback-lines": (
            "[print(i) for i in range(100)]; raise SystemExit(3)",
            fallback,
            "".join(f"{i}\n" for i in range(20, 100)),
        ),
        "fallback-bytes": (
            "[print(f'line {i} ' + 'x' * 20) for i in range(100)]; raise SystemExit(3)",
            fallback,
            "".join(f"line {i} {'x' * 20}\n" for i in range(100))[-2048:],
        ),
        "long": (write.format("a" * 5000 + "END"), {}, "a" * 4093 + "END"),
        "custom-path": (f"open({custom!r}, 'w').write('elsewhere')", {"terminationMessagePath": custom}, "elsewhere"),
    }
    existed = os.path.exists("/dev/termination-log")
    for name, (code, fields, _) in cases.items():
        batch.create_namespaced_job(NS, job(name, code, **fields))
    for name, (_, _, expected) in cases.items():
        assert terminated(core, name).message == expected, name
    assert terminated(core, "file").reason == "Completed" and terminated(core, "fallback-file").exit_code == 2
    assert os.path.exists("/dev/termination-log") == existed  # the pods' /dev is their own
    assert open(custom).read() == ""  # the pod wrote its own file, bind-mounted there
    (pod,) = pods_of(core, "job-name=file")
    container = pod.spec.containers[0]  # the API server's defaults
    assert (container.termination_message_path, container.termination_message_policy) == (
        "/dev/termination-log",
        "File",
    )


def test_a_running_pod_has_a_running_state_and_a_job_deleted_without_policy_orphans_its_pods(cluster):
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(NS, job("sleeper", "import time; time.sleep(60)"))
    batch.create_namespaced_job(NS, job("orphan", "import time; time.sleep(60)"))
    for name in ("sleeper", "orphan"):
        pod = until(lambda name=name: [p for p in pods_of(core, f"job-name={name}") if p.status.phase == "Running"])[0]
        status = pod.status.container_statuses[0]
        assert status.state.running.started_at and status.ready and status.started and not status.state.terminated
        assert {c.type: c.status for c in pod.status.conditions} == {
            "PodScheduled": "True",
            "Initialized": "True",
            "ContainersReady": "True",
            "Ready": "True",
        }
        assert pod.spec.node_name == "standin" and pod.status.pod_ip
    batch.delete_namespaced_job("sleeper", NS, propagation_policy="Foreground")
    assert not pods_of(core, "job-name=sleeper")
    batch.delete_namespaced_job("orphan", NS)  # batch/v1's default: the pods are orphaned, and run on
    (pod,) = pods_of(core, "job-name=orphan")
    assert pod.status.phase == "Running" and not pod.metadata.owner_references


def test_the_nodes_bridge_keeps_its_mac_address_as_pods_come_and_go(cluster):
    """Else the bridge takes a pod's port's address, and when that pod goes, the other pods' ARP entries for the
    node's address point nowhere until they expire: a pod polling the store on the node lost it for 30 s."""
    core, batch, _ = apis(cluster)

    def mac() -> str:
        with open(f"/sys/class/net/{cluster.bridge}/address") as f:
            return f.read().strip()

    before = mac()
    batch.create_namespaced_job(NS, job("sleeper", "import time; time.sleep(60)"))
    running_pods(core, ("sleeper",))
    during = mac()
    batch.delete_namespaced_job("sleeper", NS, propagation_policy="Foreground")
    assert not pods_of(core, "job-name=sleeper")
    assert before == during == mac()


@pytest.mark.parametrize("cluster", [{"history_limit": 40}], indirect=True)
def test_watches_resume_from_a_resource_version_and_one_too_old_is_gone(cluster):
    check_watches_resume_and_a_lost_version_is_gone(
        cluster, lambda name, talks: job(name, "print('hi')" if talks else "pass"), 8
    )


def test_a_watch_of_one_job_by_name_sees_it_end_and_bookmarks_carry_the_version_on(cluster):
    _, batch, custom = apis(cluster)
    batch.create_namespaced_job(NS, job("named", "import time; time.sleep(2)"))
    batch.create_namespaced_job(NS, job("other", "pass"))
    seen, bookmarks = set(), []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object,
        "batch",
        "v1",
        NS,
        "jobs",
        field_selector="metadata.name=named",
        allow_watch_bookmarks=True,
        timeout_seconds=30,
    ):
        if event["type"] == "BOOKMARK":
            bookmarks.append(event["raw_object"]["metadata"]["resourceVersion"])
            continue
        seen.add(event["raw_object"]["metadata"]["name"])
        if any(c["type"] == "Complete" for c in event["raw_object"]["status"].get("conditions") or []):
            break
    assert seen == {"named"} and bookmarks


def test_a_followed_log_streams_each_line_once_and_ends_with_its_container(cluster):
    """Through the real client's streaming read (``follow``, ``_preload_content=False``): each line as it is
    written, with its time, then the end of the stream once the container ended; tailLines of it."""
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(
        NS, job("talker", "import time\nfor i in range(5): print(i, flush=True); time.sleep(0.3)")
    )
    pod = until(lambda: [p for p in pods_of(core, "app=talker") if p.status.phase != "Pending"])[0]
    stream = core.read_namespaced_pod_log(pod.metadata.name, NS, follow=True, timestamps=True, _preload_content=False)
    lines = b"".join(stream.stream()).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["0", "1", "2", "3", "4"]
    assert all(line.split(" ", 1)[0].endswith("Z") for line in lines)
    tail = core.read_namespaced_pod_log(pod.metadata.name, NS, tail_lines=2, _preload_content=False)
    assert tail.data == b"3\n4\n"  # raw: this client turns a log it decodes into the text of its bytes' repr
    assert terminated(core, "talker").exit_code == 0


def test_a_dropped_connection_cuts_a_watch_and_a_followed_log_off_mid_stream(cluster):
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(NS, job("long", "import time\nwhile True: print('.', flush=True); time.sleep(0.2)"))
    pod = until(lambda: [p for p in pods_of(core, "app=long") if p.status.phase == "Running"])[0]
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, follow=True, _preload_content=False)
    events = watch.Watch().stream(core.list_namespaced_pod, NS, label_selector="app=long", timeout_seconds=30)
    next(iter(events))
    cluster.drop_connections(2)
    with pytest.raises(Exception) as cut:
        for _ in log.stream():
            pass
    assert "IncompleteRead" in repr(cut.value) or "ProtocolError" in repr(cut.value)
    with pytest.raises(urllib3.exceptions.ProtocolError):  # the watch's stream, cut off
        list(events)


def test_a_verb_rbac_denies_is_forbidden_and_requests_are_counted_by_verb_and_resource(cluster):
    """What the bench counts, and a Role without ``watch``: the real client gets 403 Forbidden for a watch of
    pods, and may still list them; a create waits ``create_delay`` with its object already made."""
    core, batch, _ = apis(cluster)
    cluster.forbidden.add(("watch", "pods"))
    cluster.create_delay = 1.5
    started = time.monotonic()
    batch.create_namespaced_job(NS, job("counted", "print('one line')"))
    assert time.monotonic() - started >= 1.5 and ("Job", "counted") in cluster.created
    with pytest.raises(ApiException) as denied:
        next(iter(watch.Watch().stream(core.list_namespaced_pod, NS, label_selector="app=counted", timeout_seconds=5)))
    assert denied.value.status == 403 and 'cannot watch resource "pods"' in json.loads(denied.value.body)["message"]
    (pod,) = until(lambda: [p for p in pods_of(core, "app=counted") if p.status.phase == "Succeeded"])
    text = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False).data
    assert cluster.requests["create jobs"] == 1 and cluster.requests["watch pods"] == 1
    assert cluster.requests["list pods"] >= 1 and cluster.requests["get pods/log"] == 1
    assert cluster.bytes_sent["get pods/log"] == len(text) == len("one line\n")


@pytest.mark.parametrize("cluster", [{}, {"cgroups": False}], ids=["cgroup", "polled"], indirect=True)
def test_a_container_past_its_memory_limit_is_oom_killed(cluster, request):
    polled = request.node.callspec.id == "polled"
    assert (cluster.cgroup is None) == polled, "no cgroup v1 memory controller to write to (/sys/fs/cgroup/memory)"
    core, batch, _ = apis(cluster)
    limits = {"resources": {"limits": {"memory": "96Mi"}}}
    hog = "import time; chunks = [bytearray(2 ** 20) for _ in range(400)]; time.sleep(5)"
    batch.create_namespaced_job(NS, job("hog", hog, **limits))
    batch.create_namespaced_job(NS, job("modest", "chunk = bytearray(16 * 2 ** 20)", **limits))
    state = terminated(core, "hog")
    assert (state.reason, state.exit_code) == ("OOMKilled", 137)
    assert (terminated(core, "modest").reason, terminated(core, "modest").exit_code) == ("Completed", 0)
    if cluster.cgroup:  # each pod's is gone with it
        until(
            lambda: not [d for d in os.listdir(cluster.cgroup) if os.path.isdir(os.path.join(cluster.cgroup, d))],
            what="the pods' cgroups to be removed",
        )


@pytest.mark.parametrize("cluster", [{"images": {"python:3.11"}}], indirect=True)
def test_an_image_the_registry_lacks_backs_off_until_it_is_pushed(cluster, monkeypatch):
    monkeypatch.setattr(timing, "IMAGE_BACKOFF_SECONDS", (2.0, 4.0))
    monkeypatch.setattr(timing, "POD_RESYNC_SECONDS", 0.5)
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(NS, job("pull", "print('pulled')", image="tfdist-worker:missing"))
    batch.create_namespaced_job(NS, job("never", "print('never')", image="local:only", imagePullPolicy="Never"))
    reasons = set()

    def waiting(reason, name="pull"):
        pods = pods_of(core, f"job-name={name}")
        state = pods and pods[0].status.container_statuses and pods[0].status.container_statuses[0].state
        if state and state.waiting:
            reasons.add((name, state.waiting.reason))
            assert pods[0].status.phase == "Pending"
        return state and state.waiting and state.waiting.reason == reason and pods[0]

    pod = until(lambda: waiting("ErrImagePull"))
    ref = "docker.io/library/tfdist-worker:missing"
    assert pod.status.container_statuses[0].state.waiting.message.startswith(
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}"'
    )
    pod = until(lambda: waiting("ImagePullBackOff"))
    assert pod.status.container_statuses[0].state.waiting.message == 'Back-off pulling image "tfdist-worker:missing"'
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pod.metadata.name}").items
    warnings = [(e.reason, e.message) for e in events if e.type == "Warning"]
    error = f'failed to pull and unpack image "{ref}": failed to resolve reference "{ref}": {ref}: not found'
    assert (
        "Failed",
        f'Failed to pull image "tfdist-worker:missing": rpc error: code = NotFound desc = {error}',
    ) in warnings
    assert ("Failed", "Error: ImagePullBackOff") in warnings
    assert ("BackOff", 'Back-off pulling image "tfdist-worker:missing"') in [(e.reason, e.message) for e in events]
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log(pod.metadata.name, NS)
    assert refused.value.status == 400 and "trying and failing to pull image" in refused.value.body
    cluster.images.add("tfdist-worker:missing")  # pushed: the next try pulls it
    assert terminated(core, "pull").reason == "Completed"
    assert {r for n, r in reasons if n == "pull"} == {"ErrImagePull", "ImagePullBackOff"}
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False)  # kubernetes#2596
    assert log.data == b"pulled\n"
    never = until(lambda: waiting("ErrImageNeverPull", "never"))
    assert (
        never.status.container_statuses[0].state.waiting.message
        == 'Container image "local:only" is not present with pull policy of Never'
    )


def indexed_job_objects(name: str, code: str, completions: int, **spec) -> tuple[dict, dict]:
    """A headless Service (publishNotReadyAddresses) and an Indexed Job whose pods it names, as the launcher
    makes them: pod failure policy (disruption, then any non-zero exit fails the Job)."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": name},
        },
    }
    manifest = job(name, code, completions)
    manifest["spec"]["template"]["spec"]["subdomain"] = name
    manifest["spec"].update(
        podFailurePolicy={
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]}},
            ]
        },
        **spec,
    )
    return service, manifest


PEER = """
import os, socket, time
index = int(os.environ["JOB_COMPLETION_INDEX"])
peer = f"peers-{1 - index}.peers"
while True:
    try:
        print(index, "found", peer, socket.gethostbyname(peer), "as", socket.gethostname(), flush=True)
        break
    except OSError:
        time.sleep(0.1)
if index == 0:  # done once pod 1 reached it (a pod that ended leaves DNS)
    socket.create_server(("", 2222)).accept()
while index == 1:
    try:
        socket.create_connection((peer, 2222), 1).close()
        time.sleep(60)
    except OSError:
        time.sleep(0.1)
"""


def test_indexed_job_pods_find_each_other_and_the_success_policy_completes_the_job(cluster):
    core, batch, _ = apis(cluster)
    service, manifest = indexed_job_objects("peers", PEER, 2, successPolicy={"rules": [{"succeededIndexes": "0"}]})
    core.create_namespaced_service(NS, service)
    batch.create_namespaced_job(NS, manifest)
    status = until(
        lambda: (j := batch.read_namespaced_job_status("peers", NS).status).conditions and j, what="the Job to end"
    )
    assert [(c.type, c.reason) for c in status.conditions] == [
        ("SuccessCriteriaMet", "SuccessPolicy"),
        ("Complete", "SuccessPolicy"),
    ]
    pods = {
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods_of(core, "job-name=peers")
    }
    until(
        lambda: core.read_namespaced_pod(pods["1"].metadata.name, NS).status.phase == "Failed",
        what="the lingering pod to be stopped",
    )  # SIGTERM: exit code 143
    time.sleep(1.5)  # past the lines: sinceSeconds=1 leaves them out
    for index, pod in pods.items():
        log = core.read_namespaced_pod_log(pod.metadata.name, NS, timestamps=True, _preload_content=False).data.decode()
        stamp, _, text = log.splitlines()[0].partition(" ")
        assert (
            stamp.endswith("Z")
            and text
            == f"{index} found peers-{1 - int(index)}.peers {pods[str(1 - int(index))].status.pod_ip} as peers-{index}"
        )
        assert not core.read_namespaced_pod_log(pod.metadata.name, NS, since_seconds=1, _preload_content=False).data
    assert cluster.created == [("Service", "peers"), ("Job", "peers")]


def test_job_pods_fail_by_the_failure_policy_or_wait_unschedulable(cluster):
    """The Job controller's messages are the real one's. An evicted pod, and a pod deleted (this one ignores
    SIGTERM: SIGKILL after the grace period), stay marked for deletion until the controller counted them
    (the job-tracking finalizer), then are gone; a crashed pod stays."""
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(NS, indexed_job_objects("evicted", "import time; time.sleep(60)", 1)[1])
    batch.create_namespaced_job(
        NS,
        indexed_job_objects(
            "deleted", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)", 1
        )[1],
    )
    batch.create_namespaced_job(NS, indexed_job_objects("crash", "raise SystemExit(3)", 1)[1])
    unschedulable = job("pending", "print('never')")
    unschedulable["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    batch.create_namespaced_job(NS, unschedulable)
    running = running_pods(core, ("evicted", "deleted"))
    evict(core, running["evicted"])
    deleting = core.delete_namespaced_pod(running["deleted"].metadata.name, NS)
    assert deleting.metadata.deletion_timestamp and deleting.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]
    time.sleep(1)
    assert core.read_namespaced_pod(deleting.metadata.name, NS).status.phase == "Running"  # in its grace period
    check_failed_by_policy(
        core,
        batch,
        running,
        {
            "evicted": "Pod {} has condition DisruptionTarget matching FailJob rule at index 0",
            "deleted": "Container main for pod {} failed with exit code 137 matching FailJob rule at index 1",
            "crash": "Container main for pod {} failed with exit code 3 matching FailJob rule at index 1",
        },
    )
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_pod(running["evicted"].metadata.name, NS)
    assert gone.value.status == 404
    pending = check_unschedulable(core, "pending")
    assert pending.status.phase == "Pending"


def tfjob(name: str, replicas: dict[str, tuple[int, str]], **run_policy) -> dict:
    """A TFJob: replica type → (replicas, python code of its ``tensorflow`` container)."""
    pods = {rtype: (count, container(code, "tensorflow"), {"app": name}) for rtype, (count, code) in replicas.items()}
    return clients.tfjob(name, pods, {"run": name}, **run_policy)


SERVE = "import socket; s = socket.create_server(('', 2222)); [s.accept()[0].close() for _ in iter(int, 1)]"
"""A TF server stand-in: accept on the tfjob-port forever."""
CHIEF = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
peers = [a for addresses in config["cluster"].values() for a in addresses if not a.startswith(os.environ["HOSTNAME"])]
deadline = time.time() + 20
while True:
    try:
        seen = {a: socket.create_connection(tuple(a.rsplit(":", 1)), 2).getpeername()[0] for a in peers}
        break
    except OSError:
        assert time.time() < deadline, peers
        time.sleep(0.2)
open("/dev/termination-log", "w").write(json.dumps({"task": config["task"], "seen": seen}))
time.sleep(0.5)  # a moment running, for the Running condition
"""
"""The chief: reach every peer of TF_CONFIG by its Service's name, and report what it saw."""


@pytest.mark.parametrize("cluster", [{"crds": ("tfjobs",)}], indirect=True)
def test_a_tfjob_runs_as_the_training_operator_runs_it(cluster):
    core, _, custom = apis(cluster)
    args = ("kubeflow.org", "v1", NS, "tfjobs")
    custom.create_namespaced_custom_object(
        *args, tfjob("tf", {"Chief": (1, CHIEF), "PS": (1, SERVE), "Worker": (2, SERVE)}, cleanPodPolicy="Running")
    )
    assert ("TFJob", "tf") in cluster.created
    status = until(
        lambda: (
            (s := custom.get_namespaced_custom_object(*args, "tf")["status"])
            and conditions(s).get("Succeeded") == "True"
            and s["replicaStatuses"].get("PS") == {"succeeded": 1}
            and s
        ),
        what="the TFJob to succeed",
    )
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    assert conditions(status) == {"Created": "True", "Running": "False", "Succeeded": "True"}
    assert status["conditions"][-1]["reason"] == "TFJobSucceeded" and status["startTime"] and status["completionTime"]
    assert status["replicaStatuses"] == {"Chief": {"succeeded": 1}, "PS": {"succeeded": 1}, "Worker": {"succeeded": 2}}
    until(lambda: len(pods_of(core, "training.kubeflow.org/job-name=tf")) == 1, what="cleanPodPolicy Running")
    (chief,) = pods_of(core, "training.kubeflow.org/job-name=tf")
    assert chief.metadata.name == "tf-chief-0" and chief.metadata.labels == {
        "app": "tf",
        "training.kubeflow.org/job-name": "tf",
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": "chief",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    tf_config = json.loads(next(e.value for e in chief.spec.containers[0].env if e.name == "TF_CONFIG"))
    assert tf_config == {
        "cluster": {
            "chief": ["tf-chief-0.ml.svc:2222"],
            "ps": ["tf-ps-0.ml.svc:2222"],
            "worker": ["tf-worker-0.ml.svc:2222", "tf-worker-1.ml.svc:2222"],
        },
        "task": {"type": "chief", "index": 0},
        "environment": "cloud",
    }
    seen = json.loads(chief.status.container_statuses[0].state.terminated.message)
    assert seen["task"] == {"type": "chief", "index": 0} and set(seen["seen"]) == {
        "tf-ps-0.ml.svc:2222",
        "tf-worker-0.ml.svc:2222",
        "tf-worker-1.ml.svc:2222",
    }
    service = core.read_namespaced_service("tf-chief-0", NS)
    assert service.spec.cluster_ip == "None" and service.spec.selector["training.kubeflow.org/replica-type"] == "chief"
    assert [(p.name, p.port) for p in service.spec.ports] == [("tfjob-port", 2222)]
    assert [s.metadata.name for s in core.list_namespaced_service(NS).items] == ["tf-chief-0"]
    assert custom.list_namespaced_custom_object(*args, label_selector="run=tf")["items"][0]["metadata"]["name"] == "tf"
    custom.delete_namespaced_custom_object(*args, "tf")
    assert not pods_of(core, "training.kubeflow.org/job-name=tf") and not core.list_namespaced_service(NS).items


@pytest.mark.parametrize("cluster", [{"crds": ("tfjobs",)}], indirect=True)
def test_a_failed_tfjob_replica_fails_the_tfjob(cluster):
    core, _, custom = apis(cluster)
    args = ("kubeflow.org", "v1", NS, "tfjobs")
    worker = f"import os, time\ntime.sleep(0.5)\nif os.environ['HOSTNAME'].endswith('-1'): raise SystemExit(3)\n{SERVE}"
    custom.create_namespaced_custom_object(
        *args, tfjob("limited", {"PS": (1, SERVE), "Worker": (2, worker)}, backoffLimit=0, cleanPodPolicy="None")
    )
    custom.create_namespaced_custom_object(*args, tfjob("unlimited", {"Worker": (2, worker)}, cleanPodPolicy="None"))
    custom.create_namespaced_custom_object(*args, tfjob("solo", {"Worker": (1, "print('alone')")}))

    def ended(name):
        status = custom.get_namespaced_custom_object(*args, name)["status"]
        return (conditions(status).get("Failed") == "True" or conditions(status).get("Succeeded") == "True") and status

    limited = until(lambda: ended("limited"), what="limited to end")
    assert limited["conditions"][-1] == {
        **limited["conditions"][-1],
        "type": "Failed",
        "reason": "TFJobFailed",
        "message": "Job limited has failed because it has reached the specified backoff limit",
    }
    until(lambda: not pods_of(core, "training.kubeflow.org/job-name=limited"), what="every pod deleted")
    unlimited = until(lambda: ended("unlimited"), what="unlimited to end")
    assert unlimited["conditions"][-1]["message"] == "TFJob ml/unlimited has failed because 1 Worker replica(s) failed."
    assert unlimited["replicaStatuses"] == {"Worker": {"active": 1, "failed": 1}}
    time.sleep(1)  # cleanPodPolicy None: the running worker keeps running
    assert sorted(p.status.phase for p in pods_of(core, "training.kubeflow.org/job-name=unlimited")) == [
        "Failed",
        "Running",
    ]
    solo = until(lambda: ended("solo"), what="solo to end")
    assert conditions(solo)["Succeeded"] == "True"
    pod = core.read_namespaced_pod("solo-worker-0", NS)
    assert not [e for e in pod.spec.containers[0].env or [] if e.name == "TF_CONFIG"]  # one replica: not distributed
    assert pod.metadata.labels["training.kubeflow.org/job-role"] == "master"  # worker 0 without a chief


@pytest.mark.parametrize("cluster", [{"crds": ("mpijobs",)}], indirect=True)
def test_discovery_names_the_installed_crds_and_serves_their_objects(cluster):
    api = config.new_client_from_config_dict(cluster.kubeconfig)
    custom = client.CustomObjectsApi(api)
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert set(groups) == {"batch", "kubeflow.org"}
    assert [v.version for v in groups["kubeflow.org"].versions] == ["v2beta1"]
    assert groups["kubeflow.org"].preferred_version.version == "v2beta1"
    names = [r.name for r in custom.get_api_resources("kubeflow.org", "v2beta1").resources]
    assert names == ["mpijobs", "mpijobs/status"]
    with pytest.raises(ApiException) as missing:
        custom.get_api_resources("kubeflow.org", "v1")
    assert missing.value.status == 404
    with pytest.raises(ApiException) as missing:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs", tfjob("x", {"Worker": (1, "")}))
    assert missing.value.status == 404
    args = ("kubeflow.org", "v2beta1", NS, "mpijobs")
    mpijob = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi", "namespace": NS, "labels": {"run": "a"}},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [container("print('launcher')", "launcher")]}},
                }
            }
        },
    }
    created = custom.create_namespaced_custom_object(*args, mpijob)
    assert created["metadata"]["uid"] and ("MPIJob", "mpi") in cluster.created
    with pytest.raises(ApiException) as exists:
        custom.create_namespaced_custom_object(*args, mpijob)
    assert exists.value.status == 409
    listed = custom.list_namespaced_custom_object(*args, label_selector="run=a")["items"]
    assert [o["metadata"]["name"] for o in listed] == ["mpi"]
    assert not custom.list_namespaced_custom_object(*args, label_selector="run=b")["items"]
    custom.delete_namespaced_custom_object(*args, "mpi", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*args, "mpi")
    assert gone.value.status == 404
    assert not client.CoreV1Api(api).list_namespaced_pod(NS).items  # its launcher Job's pod, if any, with it


def mpijob(name: str, launcher: str, workers: int = 0, **spec) -> dict:
    """An MPIJob as the Kubernetes launcher makes one, run as the worker image's user: ``workers`` worker pods
    running the image's sshd, a launcher running python code."""
    user = {"securityContext": {"runAsUser": 1000}}
    sshd = {
        "name": "worker",
        "image": "python:3.11",
        "command": ["/usr/sbin/sshd", "-De", "-f", "/home/tfdist/.sshd_config"],
        **user,
    }
    replicas = {
        "Launcher": {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container(launcher, "launcher", **user)]},
            },
        }
    }
    if workers:
        replicas["Worker"] = {
            "replicas": workers,
            "restartPolicy": "Never",
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [sshd]}},
        }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"sshAuthMountPath": "/home/tfdist/.ssh", "mpiReplicaSpecs": replicas, **spec},
    }


LAUNCHER = """
import json, os, socket, subprocess, time
hosts = [line.split()[0] for line in open("/etc/mpi/hostfile")]
while not all(subprocess.run(["getent", "hosts", h], capture_output=True).returncode == 0 for h in hosts):
    time.sleep(0.1)
seen = {h: subprocess.run(["ssh", "-o", "ConnectionAttempts=10", h, "id -un; hostname; echo $HOME; env | grep OMPI_"],
                          capture_output=True, text=True).stdout.split() for h in hosts}
report = {"seen": seen, "user": subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip(),
          "ssh": sorted(os.listdir(os.path.expanduser("~/.ssh"))), "home": os.environ["HOME"],
          "env": {k: v for k, v in os.environ.items() if k.startswith(("OMPI_", "K_MPI_", "NVIDIA_"))}}
open("/dev/termination-log", "w").write(json.dumps(report))
time.sleep(0.5)  # a moment running, for the Running condition
"""
"""The launcher: wait until the hostfile's workers resolve, run a command on each over ssh, report."""


@pytest.mark.parametrize("cluster", [{"crds": ("mpijobs",)}], indirect=True)
def test_an_mpijob_runs_as_the_mpi_operator_runs_it(cluster):
    """The operator's objects, and ssh from the launcher to each worker's sshd, as the image's user."""
    core, batch, custom = apis(cluster)
    args = ("kubeflow.org", "v2beta1", NS, "mpijobs")
    custom.create_namespaced_custom_object(
        *args, mpijob("mpi", LAUNCHER, 2, slotsPerWorker=2, runPolicy={"cleanPodPolicy": "Running", "backoffLimit": 0})
    )
    status = until(
        lambda: (
            (s := custom.get_namespaced_custom_object(*args, "mpi")["status"])
            and conditions(s).get("Succeeded") == "True"
            and s["replicaStatuses"]["Worker"] == {}
            and s
        ),
        what="the MPIJob to succeed and its workers to be cleaned up",
    )
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    assert conditions(status) == {"Created": "True", "Running": "False", "Succeeded": "True"}
    assert status["conditions"][-1]["reason"] == "MPIJobSucceeded" and status["startTime"] and status["completionTime"]
    assert status["replicaStatuses"] == {"Launcher": {"succeeded": 1}, "Worker": {}}
    assert cluster.created == [("MPIJob", "mpi")]
    config = core.read_namespaced_config_map("mpi-config", NS)
    assert config.data["hostfile"] == "mpi-worker-0.mpi.ml.svc slots=2\nmpi-worker-1.mpi.ml.svc slots=2\n"
    secret = core.read_namespaced_secret("mpi-ssh", NS)
    assert secret.type == "kubernetes.io/ssh-auth" and set(secret.data) == {"ssh-privatekey", "ssh-publickey"}
    service = core.read_namespaced_service("mpi", NS)
    assert service.spec.cluster_ip == "None" and service.spec.selector == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "mpi",
    }
    job = batch.read_namespaced_job("mpi-launcher", NS)
    assert job.spec.backoff_limit == 0 and job.metadata.owner_references[0].kind == "MPIJob"
    (launcher,) = pods_of(core, "training.kubeflow.org/job-role=launcher")  # the workers are gone: Running policy
    assert launcher.spec.hostname == "mpi-launcher" and launcher.spec.subdomain == "mpi"
    report = json.loads(launcher.status.container_statuses[0].state.terminated.message)
    assert report["user"] == "tfdist" and report["home"] == "/home/tfdist"
    assert report["ssh"] == ["authorized_keys", "id_rsa", "id_rsa.pub"]
    assert report["env"] == {
        "K_MPI_JOB_ROLE": "launcher",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": "2",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }
    assert report["seen"] == {
        f"mpi-worker-{i}.mpi.ml.svc": ["tfdist", f"mpi-worker-{i}", "/home/tfdist"] for i in range(2)
    }  # an ssh session has none of its pod's environment
    custom.delete_namespaced_custom_object(*args, "mpi", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert not pods_of(core, "training.kubeflow.org/job-name=mpi") and not core.list_namespaced_service(NS).items
    assert not core.list_namespaced_config_map(NS).items and not core.list_namespaced_secret(NS).items
    assert not batch.list_namespaced_job(NS).items


@pytest.mark.parametrize("cluster", [{"crds": ("mpijobs",)}], indirect=True)
def test_an_mpijob_fails_once_its_launcher_job_exceeds_the_backoff_limit(cluster):
    core, _, custom = apis(cluster)
    args = ("kubeflow.org", "v2beta1", NS, "mpijobs")
    custom.create_namespaced_custom_object(
        *args, mpijob("mpifail", "raise SystemExit(3)", runPolicy={"backoffLimit": 1})
    )
    status = until(
        lambda: (
            (s := custom.get_namespaced_custom_object(*args, "mpifail")["status"])
            and conditions(s).get("Failed") == "True"
            and s
        ),
        what="the MPIJob to fail",
    )
    assert status["conditions"][-1] == {
        **status["conditions"][-1],
        "reason": "BackoffLimitExceeded/",
        "message": "Job has reached the specified backoff limit: ",
    }
    assert status["replicaStatuses"] == {"Launcher": {"failed": 2}, "Worker": {}}
    assert [p.status.phase for p in pods_of(core, "training.kubeflow.org/job-name=mpifail")] == ["Failed", "Failed"]


@pytest.mark.parametrize("cluster", [{}], indirect=True)
def test_without_crds_discovery_has_batch_only(cluster):
    api = config.new_client_from_config_dict(cluster.kubeconfig)
    assert [g.name for g in client.ApisApi(api).get_api_versions().groups] == ["batch"]
    assert [r.name for r in client.CustomObjectsApi(api).get_api_resources("batch", "v1").resources] == [
        "jobs",
        "jobs/status",
    ]
    with pytest.raises(ApiException) as missing:
        client.CustomObjectsApi(api).get_api_resources("kubeflow.org", "v2beta1")
    assert missing.value.status == 404


TF_WORKER = """
import json, os
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.distribute.Server(resolver.cluster_spec(), job_name="worker", task_index=config["task"]["index"])
if config["task"]["index"] == 1:
    server.join()
tf.config.experimental_connect_to_cluster(resolver.cluster_spec())
with tf.device("/job:worker/replica:0/task:1"):
    product = tf.constant(6) * tf.constant(7)
open("/dev/termination-log", "w").write(str(int(product)))
"""


@pytest.mark.parametrize("cluster", [{"crds": ("tfjobs",)}], indirect=True)
def test_tensorflow_servers_of_a_tfjob_find_each_other_by_tf_config(cluster):
    """Worker 0 runs an op on worker 1 over gRPC, both placed by the operator's TF_CONFIG."""
    core, _, custom = apis(cluster)
    args = ("kubeflow.org", "v1", NS, "tfjobs")
    custom.create_namespaced_custom_object(*args, tfjob("tfreal", {"Worker": (2, TF_WORKER)}, cleanPodPolicy="Running"))
    status = until(
        lambda: (
            (s := custom.get_namespaced_custom_object(*args, "tfreal")["status"])
            and (conditions(s).get("Succeeded") == "True" or conditions(s).get("Failed") == "True")
            and s
        ),
        timeout=180,
        what="the TFJob to end",
    )
    assert conditions(status)["Succeeded"] == "True", status
    pod = until(
        lambda: (
            pods_of(core, "training.kubeflow.org/job-name=tfreal")
            == [p := core.read_namespaced_pod("tfreal-worker-0", NS)]
            and p
        ),
        what="cleanPodPolicy Running",
    )
    assert pod.status.container_statuses[0].state.terminated.message == "42"
