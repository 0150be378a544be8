"""How a stage's pods ended, in words: the result record the result pod handed back, the pod a failed stage
failed for and how (exit code, OOMKilled, eviction, a hang it found, deleted), and a pod that never started."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from typing import Any

from tfdist.operators.launchers.base import StageFailed, failed_first
from tfdist.operators.launchers.k8s_api import Watch
from tfdist.trainer.contract import EXIT_HUNG

FAIL_JOB_POD = re.compile(r"(?:Container \S+ for pod|Pod) [^/\s]+/(?P<pod>\S+) "
                          r"(?:failed with exit code (?P<code>-?\d+)|has condition \w+) matching FailJob rule")
"""The pod a Job's pod failure policy failed it for, as the Job controller's condition message names it."""


def termination(pod: Any) -> Any | None:
    """The container's terminated state, None while it runs."""
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses and statuses[0].state else None


def result_record(watch: Watch, pods: list, tails: dict) -> dict[str, Any]:
    """The result record the result pod handed back as its termination message."""
    pod = next((p for p in pods if watch.member(p) == watch.result_member and termination(p)), None)
    message = termination(pod).message if pod else None
    try:
        return json.loads(message)
    except (TypeError, ValueError):
        raise StageFailed(f"{watch.result_member}" + (f" (pod {pod.metadata.name})" if pod else ""), None, dict(tails),
                          how="ended without handing back the stage's result record",
                          detail=f"termination message {message!r}") from None


def failure(watch: Watch, ended: dict, pods: list, tails: dict) -> StageFailed:
    """The pod the Job's failure names (else the first that failed), how it ended (exit code, OOMKilled,
    eviction, the hang it found, deleted) and the job's reason; a pod disrupted (evicted, preempted, its node
    gone), deleted, stopped by a signal other than for memory, or hung counts as lost (an elastic stage may
    continue without it)."""
    job = f"{watch.kind} {watch.name} failed: {ended.get('reason')}: {ended.get('message')}"
    failed = [p for p in pods if p.status.phase == "Failed" and termination(p)]
    named = FAIL_JOB_POD.search(ended.get("message") or "") if watch.kind == "Job" else None
    if named and not any(p.metadata.name == named["pod"] for p in failed):
        # the pod was deleted (by a user, a drain, the pod garbage collector for a lost node), then counted and
        # let go by the Job controller: the Job's message is what is left of it
        member = watch.named_member(named["pod"])
        return StageFailed(f"{member} (pod {named['pod']})", int(named["code"]) if named["code"] else None,
                           failed_first(tails, member), how="was deleted (it is gone)",
                           detail=job, lost=(member,))
    if not failed:
        return StageFailed(f"{watch.kind} {watch.name}", None, dict(tails), how="failed",
                           detail=f"{ended.get('reason')}: {ended.get('message')}")
    pod = next((p for p in failed if named and p.metadata.name == named["pod"]), None) or min(
        failed, key=lambda p: termination(p).finished_at or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    terminated, member = termination(pod), watch.member(pod)
    ordered = failed_first(tails, member)
    why = f", {terminated.reason}" if terminated.reason not in (None, "Error", "Completed") else ""
    if terminated.reason == "OOMKilled":
        limit = (pod.spec.containers[0].resources.limits or {}).get("memory")
        why += f": it used more than its memory limit {limit} (kubernetes.pods.memory or roles.<role>.memory)"
    disrupted = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget" and c.status == "True"),
                     None)
    how = f"was disrupted ({disrupted.reason}: {disrupted.message})" if disrupted else None
    if terminated.exit_code == EXIT_HUNG:
        how = f"stopped the hung stage: {terminated.message.strip()}"
    killed = terminated.exit_code in (128 + signal.SIGKILL, 128 + signal.SIGTERM) and terminated.reason != "OOMKilled"
    return StageFailed(f"{member} (pod {pod.metadata.name}{why})", terminated.exit_code, ordered, how=how, detail=job,
                       lost=(member,) if disrupted or killed or terminated.exit_code == EXIT_HUNG else ())
