"""operators/launchers/kubernetes/diagnosis.py, on pods and events shaped as the API delivers them: the pods of a
real plan's Job (their container as the launcher makes it), with the statuses, conditions and messages the kubelet,
the eviction API and the Job controller write (the stand-in cluster produces them too:
tests/k8s_standin/pods.py, jobs.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.operators.launchers.kubernetes.test_objects import k8s_plan
from tfdist.contract.launch import EXIT_HUNG
from tfdist.operators.launchers.base import StageFailed
from tfdist.operators.launchers.kubernetes.diagnosis import (
    failure,
    not_started,
    result_record,
    start_failure,
)
from tfdist.operators.launchers.kubernetes.launcher import KubernetesLauncher
from tfdist.operators.launchers.kubernetes.objects import stage_objects

_, PLAN = k8s_plan(None, "mirrored")  # a Job of 4 workers, 8Gi each
OBJECTS = stage_objects(PLAN, PLAN.stage("train"))
WATCH = KubernetesLauncher(PLAN).watch_for(PLAN.stage("train"), "Job", OBJECTS, "4c2a9e1b7d3f5a60")
TAILS = {"worker-0": ["step 40"], "worker-1": ["step 41"], "worker-2": ["Traceback", "MemoryError"]}


def pod_name(index: int) -> str:
    return f"{WATCH.name}-{index}-x7k2q"


def pod(index: int, phase: str = "Running", state: dict | None = None, created: str = "2026-11-20T00:00:01Z") -> dict:
    """The Job's pod of completion ``index``: its template's spec, and a status with its container's state."""
    template = OBJECTS[-1]["spec"]["template"]
    container = template["spec"]["containers"][0]["name"]
    return {
        "metadata": {
            "name": pod_name(index),
            "namespace": "ml",
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/job-name": WATCH.name},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": template["spec"],
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [{"name": container, "ready": False, "restartCount": 0, "state": state or {}}],
        },
    }


def ended(index: int, code: int, reason: str = "Error", finished: str = "2026-11-20T00:05:00Z", **more) -> dict:
    """The pod after its container ended with ``code``, as the kubelet reports it."""
    terminated = {"exitCode": code, "reason": reason, "startedAt": "2026-11-20T00:00:05Z", "finishedAt": finished}
    return pod(index, "Succeeded" if code == 0 else "Failed", {"terminated": {**terminated, **more}})


def fail_job(index: int, code: int | None = None) -> dict:
    """The Job's FailureTarget condition for a FailJob rule of its pod failure policy, worded as the controller does."""
    container = OBJECTS[-1]["spec"]["template"]["spec"]["containers"][0]["name"]
    matched = (
        f"Container {container} for pod ml/{pod_name(index)} failed with exit code {code}"
        if code is not None
        else f"Pod ml/{pod_name(index)} has condition DisruptionTarget"
    )
    return {
        "type": "FailureTarget",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": f"{matched} matching FailJob rule at index 0",
    }


def test_the_result_record_is_the_result_pods_termination_message():
    pods = [ended(1, 0), ended(0, 0, "Completed", message='{"status": "ok", "steps": 88}')]
    assert result_record(WATCH, pods, TAILS) == {"status": "ok", "steps": 88}


@pytest.mark.parametrize("message", [None, "Killed", '{"status": "ok"'])
def test_a_result_pod_without_a_json_termination_message_fails_the_stage_saying_what_it_handed_back(message):
    more = {"message": message} if message else {}
    with pytest.raises(StageFailed) as failed:
        result_record(WATCH, [ended(0, 0, "Completed", **more)], TAILS)
    assert failed.value.summary == (
        f"worker-0 (pod {pod_name(0)}) ended without handing back the stage's result record; "
        f"termination message {message!r}"
    )
    with pytest.raises(StageFailed, match=r"^worker-0 ended without handing back"):
        result_record(WATCH, [pod(0)], TAILS)  # still running: no pod to name


def test_the_pod_the_jobs_failure_names_is_the_culprit_not_the_first_that_failed():
    pods = [ended(0, 1, finished="2026-11-20T00:01:00Z"), ended(2, 3), pod(1)]
    found = failure(WATCH, fail_job(2, 3), pods, dict(TAILS))
    assert found.summary == (
        f"worker-2 (pod {pod_name(2)}) exited with code 3; Job {WATCH.name} failed: PodFailurePolicy: "
        f"{fail_job(2, 3)['message']}"
    )
    assert (found.returncode, found.lost, list(found.tails)) == (3, (), ["worker-2", "worker-0", "worker-1"])


def test_without_a_named_pod_the_first_pod_to_have_failed_is_the_culprit():
    backoff = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    pods = [ended(3, 2, finished="2026-11-20T00:07:00Z"), ended(1, 1, finished="2026-11-20T00:02:00Z")]
    assert failure(WATCH, backoff, pods, dict(TAILS)).process == f"worker-1 (pod {pod_name(1)})"


def test_an_oom_killed_pod_names_its_memory_limit_and_is_not_lost():
    found = failure(WATCH, fail_job(2, 137), [ended(2, 137, "OOMKilled")], dict(TAILS))
    assert found.process == (
        f"worker-2 (pod {pod_name(2)}, OOMKilled: it used more than its memory limit 8Gi "
        "(kubernetes.pods.memory or roles.<role>.memory))"
    )
    assert "was killed" not in found.summary and "exited with code 137" in found.summary and found.lost == ()


@pytest.mark.parametrize("code", [137, 143])
def test_a_pod_killed_by_a_signal_not_for_its_memory_is_lost(code):
    assert failure(WATCH, fail_job(1, code), [ended(1, code)], dict(TAILS)).lost == ("worker-1",)


def test_a_disrupted_pod_says_why_and_is_lost():
    evicted = ended(3, 143)
    evicted["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    )
    found = failure(WATCH, fail_job(3), [evicted], dict(TAILS))
    disrupted = "was disrupted (EvictionByEvictionAPI: Eviction API: evicting); "
    assert found.summary.startswith(f"worker-3 (pod {pod_name(3)}) {disrupted}")
    assert found.lost == ("worker-3",)


def test_a_pod_that_found_the_stage_hung_says_who_hung_and_is_lost():
    hung = ended(0, EXIT_HUNG, message="no training process stepped for 300 s; worker-2 silent longest\n")
    found = failure(WATCH, fail_job(0, EXIT_HUNG), [hung], dict(TAILS))
    assert found.summary.startswith(
        f"worker-0 (pod {pod_name(0)}) stopped the hung stage: "
        "no training process stepped for 300 s; worker-2 silent longest; Job"
    )
    assert found.lost == ("worker-0",)


@pytest.mark.parametrize("code", [1, None])
def test_a_named_pod_that_is_gone_was_deleted_and_is_lost(code):
    found = failure(WATCH, fail_job(2, code), [pod(0), ended(1, 0)], dict(TAILS))
    assert found.summary.startswith(f"worker-2 (pod {pod_name(2)}) was deleted (it is gone); Job {WATCH.name} failed")
    assert (found.returncode, found.lost, next(iter(found.tails))) == (code, ("worker-2",), "worker-2")


def test_a_job_failed_with_no_failed_pod_says_the_jobs_reason():
    deadline = {
        "type": "Failed",
        "status": "True",
        "reason": "DeadlineExceeded",
        "message": "Job was active longer than specified deadline",
    }
    found = failure(WATCH, deadline, [pod(0)], dict(TAILS))
    assert found.summary == f"Job {WATCH.name} failed; DeadlineExceeded: Job was active longer than specified deadline"
    assert found.lost == ()


def rfc3339(ago: dt.timedelta) -> str:
    return (dt.datetime.now(dt.UTC) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_pod_pending_past_the_startup_timeout_has_not_started():
    timeout = dt.timedelta(seconds=WATCH.following.startup_timeout_seconds)
    late = pod(1, "Pending", created=rfc3339(timeout + dt.timedelta(seconds=5)))
    assert not_started(WATCH, [pod(0, "Pending", created=rfc3339(dt.timedelta(0))), late]) is late
    assert not_started(WATCH, [pod(1, "Running", created=rfc3339(2 * timeout))]) is None


def test_a_pod_that_did_not_start_says_why_it_waits_and_the_warnings_about_it_once_each():
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.example.com/x"'}}
    events = [
        {"type": "Normal", "reason": "Pulling", "message": 'Pulling image "registry.example.com/x"'},
        {"type": "Warning", "reason": "Failed", "message": "Error: ImagePullBackOff"},
        {"type": "Warning", "reason": "Failed", "message": "Error: ImagePullBackOff"},
    ]
    found = start_failure(WATCH, pod(2, "Pending", waiting), events, dict(TAILS))
    timeout = WATCH.following.startup_timeout_seconds
    assert found.summary == (
        f"worker-2 (pod {pod_name(2)}) was not running after {timeout} s (kubernetes.startup_timeout_seconds); "
        'ImagePullBackOff: Back-off pulling image "registry.example.com/x"; Failed: Error: ImagePullBackOff'
    )
    unschedulable = pod(0, "Pending")
    del unschedulable["status"]["containerStatuses"]
    scheduler = [
        {"type": "Warning", "reason": "FailedScheduling", "message": "0/3 nodes are available: 3 Insufficient cpu."}
    ]
    assert start_failure(WATCH, unschedulable, scheduler, {}).summary.endswith(
        "; FailedScheduling: 0/3 nodes are available: 3 Insufficient cpu."
    )
    assert start_failure(WATCH, unschedulable, [], {}).summary.endswith("; no warning event")
