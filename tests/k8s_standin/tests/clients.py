"""What both test files of the stand-in use: its clients, waiting on it, and the objects they create. What a
pod runs is each file's own: a ``python -c`` command for the process kubelet, a script's name for the scripted
one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.k8s_standin import StandInCluster

NS = "ml"


def until(get, timeout: float = 20, what: str = "the cluster"):
    """Poll ``get`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while not (value := get()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def apis(cluster: StandInCluster) -> tuple[client.CoreV1Api, client.BatchV1Api, client.CustomObjectsApi]:
    api = config.new_client_from_config_dict(cluster.kubeconfig)
    return client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)


def pods_of(core: client.CoreV1Api, selector: str) -> list:
    return core.list_namespaced_pod(NS, label_selector=selector).items


def terminated(core: client.CoreV1Api, job_name: str):
    """The terminated state of the Job's one pod, once it ended."""

    def get():
        pods = pods_of(core, f"job-name={job_name}")
        statuses = pods and pods[0].status.container_statuses
        return statuses and statuses[0].state.terminated

    return until(get, what=f"{job_name} to end")


def conditions(status: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions", [])}


def indexed_job(name: str, container: dict, completions: int = 1, labels: dict | None = None, **spec: Any) -> dict:
    """An Indexed Job of ``completions`` pods running ``container``, its pods labelled ``app: <name>``."""
    template = {
        "metadata": {"labels": {"app": name, **(labels or {})}},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": 0,
            "template": template,
            **spec,
        },
    }


def tfjob(name: str, replicas: dict[str, tuple[int, dict, dict]], labels: dict | None = None, **run_policy) -> dict:
    """A TFJob: replica type → (replicas, its ``tensorflow`` container, its pods' labels)."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS, **({"labels": labels} if labels else {})},
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {
                rtype: {
                    "replicas": count,
                    "restartPolicy": "Never",
                    "template": {"metadata": {"labels": pod_labels}, "spec": {"containers": [container]}},
                }
                for rtype, (count, container, pod_labels) in replicas.items()
            },
        },
    }


def check_watches_resume_and_a_lost_version_is_gone(
    cluster: StandInCluster, job: Callable[[str, bool], dict], more: int
) -> None:
    """Through the real client's watch (kubernetes.watch.Watch): every change of a Job's pod from the list's
    resourceVersion on, the end of the stream at timeoutSeconds, and 410 Gone for a version the history lost.
    ``job(name, talks)``: a Job whose pod ends at once, or after printing a line; ``more`` such Jobs make more
    changes than the history holds."""
    core, batch, _ = apis(cluster)
    batch.create_namespaced_job(NS, job("before", False))
    until(lambda: cluster.revision, what="a first change")
    listed = core.list_namespaced_pod(NS, label_selector="app=w")
    batch.create_namespaced_job(NS, job("w", True))
    phases = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        NS,
        label_selector="app=w",
        timeout_seconds=30,
        resource_version=listed.metadata.resource_version,
    ):
        phases.append((event["type"], event["object"].status.phase))
        if event["object"].status.phase == "Succeeded":
            break
    assert int(listed.metadata.resource_version) > 0
    assert phases[0][0] == "ADDED" and phases[-1] == ("MODIFIED", "Succeeded") and len(phases) >= 2
    (pod,) = pods_of(core, "app=w")
    assert int(pod.metadata.resource_version) > int(listed.metadata.resource_version)
    started = time.monotonic()
    assert not list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            NS,
            label_selector="app=none",
            timeout_seconds=1,
            resource_version=pod.metadata.resource_version,
        )
    )
    assert time.monotonic() - started < 10
    for n in range(more):
        batch.create_namespaced_job(NS, job(f"more-{n}", False))
    until(lambda: cluster.history[0][0] > int(listed.metadata.resource_version) + 1, what="the history to move on")
    with pytest.raises(ApiException) as gone:
        next(
            iter(
                watch.Watch().stream(
                    core.list_namespaced_pod, NS, timeout_seconds=5, resource_version=listed.metadata.resource_version
                )
            )
        )
    assert gone.value.status == 410


def running_pods(core: client.CoreV1Api, jobs: tuple[str, ...]) -> dict[str, Any]:
    """The running pod of each Job named, once it runs."""
    return {
        name: until(lambda name=name: [p for p in pods_of(core, f"job-name={name}") if p.status.phase == "Running"])[0]
        for name in jobs
    }


def evict(core: client.CoreV1Api, pod: Any) -> None:
    name = pod.metadata.name
    core.create_namespaced_pod_eviction(
        name, NS, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
    )


def check_failed_by_policy(
    core: client.CoreV1Api, batch: client.BatchV1Api, running: dict[str, Any], messages: dict[str, str]
) -> None:
    """Each Job of ``messages`` failed by its pod failure policy, with the message the Job controller writes
    (``{}``: its pod); the pods of ``running`` are gone, the others kept."""
    for name, message in messages.items():
        failed = until(
            lambda name=name: [
                c for c in batch.read_namespaced_job_status(name, NS).status.conditions or [] if c.type == "Failed"
            ],
            what=f"{name} to fail",
        )[0]
        pod = running.get(name) or pods_of(core, f"job-name={name}")[0]
        assert failed.reason == "PodFailurePolicy" and failed.message == message.format(f"{NS}/{pod.metadata.name}")
        assert batch.read_namespaced_job_status(name, NS).status.failed == 1
        assert [p.metadata.name for p in pods_of(core, f"job-name={name}")] == (
            [] if name in running else [pod.metadata.name]
        )


def check_unschedulable(core: client.CoreV1Api, job_name: str) -> Any:
    """The Job's one pod waits unschedulable, with the scheduler's event; the pod."""
    (pending,) = pods_of(core, f"job-name={job_name}")
    assert [(c.type, c.status, c.reason) for c in pending.status.conditions] == [
        ("PodScheduled", "False", "Unschedulable")
    ]
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pending.metadata.name}").items
    assert [(e.type, e.reason) for e in events] == [("Warning", "FailedScheduling")]
    assert events[0].message.startswith("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector")
    return pending
