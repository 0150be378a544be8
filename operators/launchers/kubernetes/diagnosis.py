"""How a stage's pods ended, in words: the result record the result pod handed back, the pod a failed stage
failed for and how (exit code, OOMKilled, eviction, a hang it found, deleted), and a pod that never started.
Pods are the API's JSON objects, as a watch delivers them."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from typing import Any

from tfdist.contract.launch import EXIT_HUNG
from tfdist.operators.launchers.base import StageFailed, failed_first
from tfdist.operators.launchers.kubernetes.api import Watch

FAIL_JOB_POD = re.compile(
    r"(?:Container \S+ for pod|Pod) [^/\s]+/(?P<pod>\S+) "
    r"(?:failed with exit code (?P<code>-?\d+)|has condition \w+) matching FailJob rule"
)
"""The pod a Job's pod failure policy failed it for, as the Job controller's condition message names it."""


def termination(pod: dict) -> dict | None:
    """The container's terminated state, None while it runs."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state") or {}).get("terminated") if statuses else None


def name_of(pod: dict) -> str:
    return pod["metadata"]["name"]


def result_record(watch: Watch, pods: list[dict], tails: dict) -> dict[str, Any]:
    """The result record the result pod handed back as its termination message."""
    pod = next((p for p in pods if watch.member(p) == watch.result_member and termination(p)), None)
    message = (termination(pod) or {}).get("message") if pod else None
    try:
        return json.loads(message or "")  # none: a ValueError
    except (TypeError, ValueError):
        raise StageFailed(
            f"{watch.result_member}" + (f" (pod {name_of(pod)})" if pod else ""),
            None,
            dict(tails),
            how="ended without handing back the stage's result record",
            detail=f"termination message {message!r}",
        ) from None


def culprit(watch: Watch, ended: dict, pods: list[dict]) -> dict | None:
    """The failed pod the stage failed for: the one the Job's failure names, else the first that failed."""
    failed = [p for p in pods if p["status"].get("phase") == "Failed" and termination(p)]
    named = FAIL_JOB_POD.search(ended.get("message") or "") if watch.kind == "Job" else None
    if named:
        return next((p for p in failed if name_of(p) == named["pod"]), None)
    return min(failed, key=lambda p: (termination(p) or {}).get("finishedAt") or "9999", default=None)


def failure(watch: Watch, ended: dict, pods: list[dict], tails: dict) -> StageFailed:
    """The culprit pod, how it ended (exit code, OOMKilled, eviction, the hang it found, deleted) and the job's
    reason; a pod disrupted (evicted, preempted, its node gone), deleted, stopped by a signal other than for
    memory, or hung counts as lost (an elastic stage may continue without it)."""
    job = f"{watch.kind} {watch.name} failed: {ended.get('reason')}: {ended.get('message')}"
    named = FAIL_JOB_POD.search(ended.get("message") or "") if watch.kind == "Job" else None
    pod = culprit(watch, ended, pods)
    if named and pod is None:
        # the pod was deleted (by a user, a drain, the pod garbage collector for a lost node), then counted and
        # let go by the Job controller: the Job's message is what is left of it
        member = watch.named_member(named["pod"])
        return StageFailed(
            f"{member} (pod {named['pod']})",
            int(named["code"]) if named["code"] else None,
            failed_first(tails, member),
            how="was deleted (it is gone)",
            detail=job,
            lost=(member,),
        )
    if pod is None:
        return StageFailed(
            f"{watch.kind} {watch.name}",
            None,
            dict(tails),
            how="failed",
            detail=f"{ended.get('reason')}: {ended.get('message')}",
        )
    return _pod_failure(watch, pod, tails, job)


def _pod_failure(watch: Watch, pod: dict, tails: dict, job: str) -> StageFailed:
    terminated, member = termination(pod) or {}, watch.member(pod)
    ordered = failed_first(tails, member)
    reason, code = terminated.get("reason"), terminated.get("exitCode")
    why = f", {reason}" if reason not in (None, "Error", "Completed") else ""
    if reason == "OOMKilled":
        limit = (pod["spec"]["containers"][0].get("resources", {}).get("limits") or {}).get("memory")
        why += f": it used more than its memory limit {limit} (kubernetes.pods.memory or roles.<role>.memory)"
    disrupted = next(
        (c for c in pod["status"].get("conditions") or [] if c["type"] == "DisruptionTarget" and c["status"] == "True"),
        None,
    )
    how = f"was disrupted ({disrupted.get('reason')}: {disrupted.get('message')})" if disrupted else None
    if code == EXIT_HUNG:
        how = f"stopped the hung stage: {(terminated.get('message') or '').strip()}"
    killed = code in (128 + signal.SIGKILL, 128 + signal.SIGTERM) and reason != "OOMKilled"
    return StageFailed(
        f"{member} (pod {name_of(pod)}{why})",
        code,
        ordered,
        how=how,
        detail=job,
        lost=(member,) if disrupted or killed or code == EXIT_HUNG else (),
    )


def not_started(watch: Watch, pods: list[dict]) -> dict | None:
    """A pod still Pending startup_timeout_seconds after it was created, if any."""
    now = dt.datetime.now(dt.UTC)
    return next(
        (
            p
            for p in pods
            if p["status"].get("phase") == "Pending"
            and (
                now - dt.datetime.fromisoformat(p["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
            ).total_seconds()
            > watch.following.startup_timeout_seconds
        ),
        None,
    )


def start_failure(watch: Watch, pod: dict, events: list[dict], tails: dict) -> StageFailed:
    """The stage failed as its pod did not start: why it waits, and the warnings about it."""
    waiting = [
        f"{w['reason']}: {w.get('message')}"
        for s in pod["status"].get("containerStatuses") or []
        if (w := (s.get("state") or {}).get("waiting")) and w.get("reason")
    ]
    reasons = "; ".join(
        dict.fromkeys(
            waiting + [f"{e.get('reason')}: {e.get('message')}" for e in events if e.get("type") == "Warning"]
        )
    )
    return StageFailed(
        f"{watch.member(pod)} (pod {name_of(pod)})",
        None,
        dict(tails),
        how=f"was not running after {watch.following.startup_timeout_seconds} s (kubernetes.startup_timeout_seconds)",
        detail=reasons or "no warning event",
    )
