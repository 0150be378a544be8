"""What the stand-in's parts share: the cluster's constants, Kubernetes quantities, label and field selectors,
and the condition bookkeeping of pods and of the Kubeflow operators."""

from __future__ import annotations

import datetime as dt
import fractions
import math
import re
import threading
from collections.abc import Callable, Iterable

NODE_LABELS = {"kubernetes.io/hostname": "standin", "kubernetes.io/os": "linux"}
"""The one node's labels: a pod whose nodeSelector asks for others stays Pending (FailedScheduling)."""
NODE = NODE_LABELS["kubernetes.io/hostname"]
MESSAGE_MAX_BYTES, LOG_MESSAGE_LINES, LOG_MESSAGE_MAX_BYTES = 4096, 80, 2048
"""The kubelet's termination message: the file's last 4096 bytes, or the log's last 80 lines, 2048 bytes."""
CRDS = {"tfjobs": ("kubeflow.org", "v1", "TFJob"), "mpijobs": ("kubeflow.org", "v2beta1", "MPIJob")}
"""The custom resources a cluster may have installed: plural → (group, version, kind)."""
API_VERSIONS = {
    "Job": "batch/v1",
    "Service": "v1",
    "Pod": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    **{k: f"{g}/{v}" for g, v, k in CRDS.values()},
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
TF = "training.kubeflow.org/"
INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING = "batch.kubernetes.io/job-tracking"
"""The finalizer the Job controller puts on its pods until it has counted them."""
IMAGE_USER = ("tfdist", 1000, 1000, "/home/tfdist")
"""The worker image's user (docker/Dockerfile.worker: ``useradd --uid 1000 --create-home tfdist``): name, uid,
gid, home."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def matches(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",") if term))


def flag(query: dict, name: str) -> bool:
    """A boolean query parameter: clients send true, True or 1."""
    return query.get(name, "").lower() in ("true", "1")


def selected(obj: dict, query: dict) -> bool:
    """Whether a list or watch with this query's labelSelector and fieldSelector (``metadata.name=``) has it."""
    fields = dict(term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if term)
    return (
        matches(obj, query.get("labelSelector", ""))
        and fields.get("metadata.name", obj["metadata"]["name"]) == obj["metadata"]["name"]
    )


def log_lines(lines: list[str], query: dict, first: bool) -> list[str]:
    """The log lines (as the kubelet stores them: '<RFC 3339 time> <text>') a pods/log query gets, each ending in a
    newline: those within sinceSeconds, then, in the first answer, the last tailLines of them; without their
    time unless timestamps=true."""
    if "sinceSeconds" in query:
        since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(query["sinceSeconds"]))
        lines = [
            line
            for line in lines
            if dt.datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC) >= since
        ]
    if first and "tailLines" in query:
        lines = lines[len(lines) - min(len(lines), int(query["tailLines"])) :]
    if not flag(query, "timestamps"):
        lines = [line.split(" ", 1)[1] if " " in line else "" for line in lines]
    return [line + "\n" for line in lines]


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes quantity (``512Mi``, ``1Gi``, ``500M``, ``1e9``, ``1073741824``) in bytes, rounded up."""
    m = re.fullmatch(r"([0-9.]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?", str(quantity).strip())
    if not m:
        raise ValueError(f"not a quantity: {quantity!r}")
    binary = {f"{p}i": 2 ** (10 * (n + 1)) for n, p in enumerate("KMGTPE")}
    decimal = {p: 10 ** (3 * (n + 1)) for n, p in enumerate("kMGTPE")}
    scale = (
        fractions.Fraction(10) ** int(m[2])
        if m[2]
        else {**binary, **decimal, "m": fractions.Fraction(1, 1000), None: 1}[m[3]]
    )
    return math.ceil(fractions.Fraction(m[1]) * scale)


def together(calls: Iterable[Callable[[], object]]) -> None:
    """Make the calls at once, each in a thread of its own (as a kubelet stops its pods), and wait for all."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def set_condition(
    conditions: list[dict], type_: str, status: str, reason: str | None = None, message: str | None = None
) -> None:
    """Set a pod's condition: its lastTransitionTime changes with its status only."""
    current = next((c for c in conditions if c["type"] == type_), None)
    condition = {
        "type": type_,
        "status": status,
        "lastTransitionTime": now(),
        **({"reason": reason} if reason else {}),
        **({"message": message} if message else {}),
    }
    if current is None:
        conditions.append(condition)
    else:
        if current["status"] == status:
            condition["lastTransitionTime"] = current["lastTransitionTime"]
        current.clear()
        current.update(condition)


def true(status: dict, type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in status.get("conditions") or [])


def set_job_condition(status: dict, type_: str, reason: str, message: str) -> None:
    """The training operator's setCondition: nothing changes once the job failed; Running and Restarting
    replace each other; Succeeded and Failed turn Running False."""
    conditions = status.setdefault("conditions", [])
    current = next((c for c in conditions if c["type"] == type_), None)
    if true(status, "Failed") or (current and (current["status"], current["reason"]) == ("True", reason)):
        return
    stamp = now()
    kept = [
        {**c, "status": "False"} if type_ in ("Succeeded", "Failed") and c["type"] == "Running" else c
        for c in conditions
        if c["type"] != type_ and {c["type"], type_} != {"Running", "Restarting"}
    ]
    status["conditions"] = [
        *kept,
        {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": current["lastTransitionTime"] if current and current["status"] == "True" else stamp,
        },
    ]


def owner_reference(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
