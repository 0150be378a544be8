"""The Job controller (batch/v1, Indexed and NonIndexed Jobs): it creates a Job's pods, counts them through the
job-tracking finalizer, replaces failed ones up to backoffLimit (no back-off), and ends the Job by its pod
failure policy (FailJob rules), its backoff limit, its success policy or its completions."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tests.k8s_standin.common import INDEX, JOB_TRACKING, now, together

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster
    from tests.k8s_standin.pods import Pod


def index_of(pod: Pod) -> int:
    """The completion index of an Indexed Job's pod."""
    return int(pod.obj["metadata"]["annotations"][INDEX])


def rule_matches(rule: dict, pod: Pod) -> str | None:
    """The real Job controller's message for a FailJob rule the pod matches (FailJob is the only action
    modelled), or None."""
    rule_text = f"matching {rule['action']} rule"
    if "onPodConditions" in rule:
        patterns = {(c["type"], c.get("status", "True")) for c in rule["onPodConditions"]}
        condition = next(
            (c["type"] for c in pod.obj["status"].get("conditions", []) if (c["type"], c["status"]) in patterns),
            None,
        )
        return condition and f"Pod {pod.namespace}/{pod.obj['metadata']['name']} has condition {condition} {rule_text}"
    code = (pod.terminated or {}).get("exitCode", 0)  # a pod stopped before its container ran has none
    codes, op = rule["onExitCodes"]["values"], rule["onExitCodes"]["operator"]
    if code != 0 and (code in codes) == (op == "In"):
        return (
            f"Container {pod.container['name']} for pod {pod.namespace}/{pod.obj['metadata']['name']} "
            f"failed with exit code {code} {rule_text}"
        )
    return None


def _pod_template(job: dict, index: int) -> tuple[dict, dict, dict]:
    """(labels, annotations, spec) of the Job's pod at ``index`` (an Indexed Job's: its host name and index)."""
    meta, spec = job["metadata"], job["spec"]
    template, indexed = spec["template"], spec["completionMode"] == "Indexed"
    labels = {
        **(template.get("metadata") or {}).get("labels", {}),
        "batch.kubernetes.io/job-name": meta["name"],
        "job-name": meta["name"],
        **({INDEX: str(index)} if indexed else {}),
    }
    annotations = {
        **(template.get("metadata") or {}).get("annotations", {}),
        **({INDEX: str(index)} if indexed else {}),
    }
    pod_spec = copy.deepcopy(template["spec"])
    if indexed:
        pod_spec["hostname"] = f"{meta['name']}-{index}"
        for c in pod_spec["containers"]:
            c["env"] = [
                *c.get("env", []),
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}},
                },
            ]
    return labels, annotations, pod_spec


class JobController:
    def __init__(self, cluster: StandInCluster) -> None:
        self.cluster = cluster

    def create_pods(self, job: dict, indexes: Iterable[int] | None = None) -> None:
        """Create the Job's pods: an Indexed Job's for its completion indexes (``indexes``: those to replace),
        each named ``<job>-<index>-<random>`` with host name ``<job>-<index>`` and its index; a NonIndexed
        Job's as many as it still needs, named ``<job>-<random>``."""
        meta, spec, c = job["metadata"], job["spec"], self.cluster
        indexed = spec["completionMode"] == "Indexed"
        if indexes is None:
            indexes = range(spec["completions"] if indexed else min(spec["parallelism"], spec["completions"]))
        pods = []
        for index in indexes:
            name = f"{meta['name']}-{f'{index}-' if indexed else ''}{uuid.uuid4().hex[:5]}"
            if pod := c.add_pod(job, name, *_pod_template(job, index)):
                pods.append(pod)
        for pod in pods:
            pod.schedule()
        with c.lock:
            job["status"].update(active=job["status"].get("active", 0) + len(pods))
            job["status"].setdefault("startTime", now())

    def reconcile(self, job: dict) -> None:
        """A pod failure matching a FailJob rule of the pod failure policy, or more failed pods than
        backoffLimit, fails the Job; fewer are replaced; the Job completes by its success policy or its
        completions."""
        status, spec, c = job["status"], job["spec"], self.cluster
        self.count_terminated(job)
        if any(cond["type"] in ("Complete", "Failed") for cond in status.get("conditions", [])):
            return
        pods = c.owned(job) + c.counted.get(job["metadata"]["uid"], [])
        indexed = spec["completionMode"] == "Indexed"
        failed = [p for p in pods if p.phase == "Failed"]
        running = [p for p in pods if p.phase not in ("Succeeded", "Failed")]
        succeeded = [p for p in pods if p.phase == "Succeeded"]
        done = sorted({index_of(p) for p in succeeded}) if indexed else []  # the completed indexes
        with c.lock:
            status.update(
                succeeded=len(succeeded),
                failed=len(failed),
                active=len(running),
                **({"completedIndexes": ",".join(map(str, done))} if indexed else {}),
            )
        conditions = self._failed(spec, failed) or self._completed(spec, done if indexed else succeeded)
        if conditions:
            self._finish(job, pods, conditions)
        elif failed:  # within backoffLimit: the failed pods are replaced
            wanted = min(spec["parallelism"], spec["completions"] - len(succeeded)) - len(running)
            self.create_pods(
                job,
                sorted(set(range(spec["completions"])) - set(done) - {index_of(p) for p in running})
                if indexed
                else range(wanted),
            )

    @staticmethod
    def _failed(spec: dict, failed: list[Pod]) -> list[dict]:
        """FailureTarget and Failed, when a failed pod matches a FailJob rule or the backoff limit is passed."""
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        hit = next(
            ((k, pod, why) for pod in failed for k, rule in enumerate(rules) if (why := rule_matches(rule, pod))), None
        )
        if not hit and len(failed) <= spec["backoffLimit"]:
            return []
        reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        if hit:
            k, _, why = hit
            reason, message = "PodFailurePolicy", f"{why} at index {k}"
        return [
            {"type": "FailureTarget", "status": "True", "reason": reason, "message": message},
            {"type": "Failed", "status": "True", "reason": reason, "message": message},
        ]

    @staticmethod
    def _completed(spec: dict, done: list) -> list[dict]:
        """SuccessCriteriaMet and Complete by the success policy, else Complete by the completions."""
        wanted = [r["succeededIndexes"] for r in spec.get("successPolicy", {}).get("rules", [])]
        if any(set(map(int, w.split(","))) <= set(done) for w in wanted):
            return [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"},
                {"type": "Complete", "status": "True", "reason": "SuccessPolicy"},
            ]
        if len(done) >= spec["completions"]:
            return [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]
        return []

    def _finish(self, job: dict, pods: list[Pod], conditions: list[dict]) -> None:
        """Lingering pods are terminated once the Job is finished; then its conditions are set."""
        c = self.cluster
        together(p.stop for p in pods)
        for cond in conditions:
            cond["lastTransitionTime"] = now()
        with c.lock:
            job["status"].update(
                conditions=conditions, completionTime=now() if conditions[-1]["type"] == "Complete" else None
            )
        c.event(
            job,
            conditions[-1]["reason"],
            conditions[-1].get("message", ""),
            "Warning" if conditions[-1]["type"] == "Failed" else "Normal",
        )

    def count_terminated(self, job: dict) -> None:
        """The job-tracking finalizer: a terminated pod is counted and its finalizer removed; one being deleted
        is then gone from the API (the controller keeps counting it)."""
        c = self.cluster
        with c.lock:
            for pod in c.owned(job):
                meta = pod.obj["metadata"]
                if pod.phase not in ("Succeeded", "Failed") or JOB_TRACKING not in meta.get("finalizers", []):
                    continue
                meta["finalizers"].remove(JOB_TRACKING)
                if meta.get("deletionTimestamp"):
                    c.counted.setdefault(job["metadata"]["uid"], []).append(pod)
                    c.objects.pop(("Pod", pod.namespace, meta["name"]), None)
                    c.pods.pop(meta["name"], None)
