"""The Kubernetes side of a stage: the kinds of object that run one, what following a started stage needs
(``Watch``), the synchronous calls the launcher makes (``ClusterApi``, through the cncf provider's hook and its
retry) and the deletion of a stage's objects."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from tfdist.operators.launchers.base import StageFailed, StageLog
from tfdist.operators.plan import Following


@dataclass(frozen=True)
class Kind:
    """A kind of object whose conditions end a stage, reached through the API's custom-objects calls (which serve
    any group's resources, batch/v1 Jobs included)."""

    group: str
    version: str
    plural: str
    job_label: str
    """The label naming the job on its pods."""

    def path(self, namespace: str) -> tuple[str, str, str, str]:
        """(group, version, namespace, plural): the leading arguments of every custom-objects call."""
        return self.group, self.version, namespace, self.plural


KINDS = {
    "Job": Kind("batch", "v1", "jobs", "batch.kubernetes.io/job-name"),
    "TFJob": Kind("kubeflow.org", "v1", "tfjobs", "training.kubeflow.org/job-name"),
    "MPIJob": Kind("kubeflow.org", "v2beta1", "mpijobs", "training.kubeflow.org/job-name"),
}
DONE = {
    "SuccessCriteriaMet": "success",
    "Complete": "success",
    "Succeeded": "success",
    "FailureTarget": "failed",
    "Failed": "failed",
}
"""The conditions ending a stage: a Job's (SuccessCriteriaMet and FailureTarget come first, then Complete or
Failed once its pods are gone) or a Kubeflow job's (Succeeded, Failed)."""


STORED_BEFORE_LOG_MEMBERS = {"log_members": None}
"""A watch stored before ``kubernetes.log_members`` (by the 0.2.0 release; nor a uid or a spec hash then) has
none: it relayed every member's log."""


@dataclass(frozen=True, kw_only=True)
class Watch:
    """What following a started stage needs; plain data, so that a trigger carries it."""

    following: Following
    """The plan's: the stage's connection and namespace, its startup timeout, how many logs are relayed."""
    task_id: str
    kind: str
    """Job, TFJob or MPIJob: the object whose conditions end the stage."""
    name: str
    objects: tuple[tuple[str, str], ...]
    """(kind, name) of every object of the stage, in creation order."""
    members: tuple[str, ...]
    """Job: the stage's member at each completion index."""
    rank_tagged: bool
    """Horovod pods (and an MPIJob's launcher) print rank-tagged lines."""
    result_member: str
    """The member whose termination message is the stage's result record."""
    uid: str = ""
    """The uid the cluster gave the object that ends the stage (none before it is created): a retry follows only
    that object."""
    spec_hash: str = ""
    """A hash of the stage's objects as this task made them (SPEC_HASH_ANNOTATION on the ending object)."""

    def to_dict(self) -> dict[str, Any]:
        """As JSON values (what the task state store and a trigger's kwargs hold): the following's fields beside
        the watch's own, in one mapping, as every version since 0.2.0 stored a watch."""
        own = asdict(self)
        return json.loads(json.dumps({**own.pop("following"), **own}))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Watch:
        """The watch ``to_dict`` stored, or one an earlier version stored (STORED_BEFORE_LOG_MEMBERS)."""
        own = {**STORED_BEFORE_LOG_MEMBERS, **data}
        following = Following(**{f.name: own.pop(f.name) for f in fields(Following)})
        objects, members = tuple(map(tuple, own.pop("objects"))), tuple(own.pop("members"))
        return cls(following=following, objects=objects, members=members, **own)

    @property
    def selector(self) -> str:
        return f"{KINDS[self.kind].job_label}={self.name}"

    def member(self, pod: dict) -> str:
        """Which member of the stage the pod is."""
        meta = pod["metadata"]
        if self.kind == "Job":
            return self.members[int(meta["annotations"]["batch.kubernetes.io/job-completion-index"])]
        labels = meta["labels"]
        if self.kind == "MPIJob":  # the MPI operator labels a role, and an index on workers only
            return f"{labels['training.kubeflow.org/job-role']}-{labels.get('training.kubeflow.org/replica-index', 0)}"
        return f"{labels['training.kubeflow.org/replica-type'].lower()}-{labels['training.kubeflow.org/replica-index']}"

    def relayed(self, member: str) -> bool:
        """Whether the member's whole log reaches the task log: the result member and the first others, up to
        log_members."""
        most = self.following.log_members
        if most is None or member == self.result_member:
            return True
        return member in [m for m in self.members if m != self.result_member][: most - 1]

    def named_member(self, pod_name: str) -> str:
        """The Job's member whose pod had this name (``<job>-<index>-<suffix>``, as Indexed Jobs name pods)."""
        return self.members[int(pod_name.removeprefix(f"{self.name}-").split("-", 1)[0])]

    def tagged(self, member: str) -> bool:
        return self.rank_tagged and (self.kind == "Job" or member.startswith("launcher"))


class ClusterApi:
    """The synchronous API calls of a launcher in one namespace, on one client made from the pipeline's
    connection, each retried on transient errors (the provider's ``generic_api_retry``)."""

    def __init__(self, following: Following) -> None:
        self.following = following

    @functools.cached_property
    def api_client(self) -> client.ApiClient:
        return KubernetesHook(conn_id=self.following.connection_id).api_client

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @functools.cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def installed(self, kind: str) -> bool:
        """Whether the cluster serves the Kubeflow kind (API discovery: its CRD is installed)."""
        found = KINDS[kind]
        try:
            resources = self.custom.get_api_resources(found.group, found.version).resources
            return any(r.name == found.plural for r in resources)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    @generic_api_retry
    def read(self, kind: str, name: str) -> dict | None:
        """The object as the cluster has it, or None when there is no such object."""
        try:
            return self.custom.get_namespaced_custom_object(*KINDS[kind].path(self.following.namespace), name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def labelled(self, kind: str, selector: str) -> list[str]:
        """The names of the objects of ``kind`` carrying the labels of ``selector``."""
        listed = generic_api_retry(self.custom.list_namespaced_custom_object)(
            *KINDS[kind].path(self.following.namespace), label_selector=selector
        )
        return [o["metadata"]["name"] for o in listed["items"]]

    def submit(self, objects: list[dict], log: StageLog) -> str:
        """Create the stage's objects, in order; the uid the cluster gave the last (the one that ends the stage)."""
        ns, uid = self.following.namespace, ""
        for obj in objects:
            if obj["kind"] == "Service":
                generic_api_retry(self.core.create_namespaced_service)(ns, obj)
            else:
                created = generic_api_retry(self.custom.create_namespaced_custom_object)(
                    *KINDS[obj["kind"]].path(ns), obj
                )
                uid = created["metadata"]["uid"]
            log.info("created %s %s/%s", obj["kind"], ns, obj["metadata"]["name"])
        return uid

    def wait_gone(self, watch: Watch, timeout: float = 120) -> None:
        """Return once the deleted object is gone (a foreground deletion waits for its pods), so that its
        name is free again."""
        deadline = time.monotonic() + timeout
        while self.read(watch.kind, watch.name) is not None:
            if time.monotonic() > deadline:
                raise StageFailed(f"{watch.kind} {watch.name}", None, {}, how=f"was not deleted within {timeout:.0f} s")
            time.sleep(1)


async def delete_objects(watch: Watch, log: StageLog | None = None, api: Any = None) -> None:
    """Delete the stage's objects (their pods with them), newest first; those already gone are skipped. ``api``:
    the client to use, else one from the stage's connection."""
    if api is None:
        async with AsyncKubernetesHook(conn_id=watch.following.connection_id).get_conn() as own:
            return await delete_objects(watch, log, own)
    namespace = watch.following.namespace
    for kind, name in reversed(watch.objects):
        try:
            if kind == "Service":
                await async_client.CoreV1Api(api).delete_namespaced_service(name, namespace)
            else:
                await async_client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    *KINDS[kind].path(namespace), name, propagation_policy="Foreground"
                )
        except AsyncApiException as exc:
            if exc.status != 404:
                raise
            continue
        if log:
            log.info("deleted %s %s/%s", kind, namespace, name)


def run_in_thread(coroutine: Any) -> None:
    """Run a coroutine to its end from synchronous code, even code called inside a running event loop."""
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: failure.extend(_outcome(coroutine)))
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _outcome(coroutine: Any) -> list[BaseException]:
    try:
        asyncio.run(coroutine)
    except Exception as exc:
        return [exc]
    return []
