"""What following a Kubernetes stage costs at N pods (``make bench``, issue 26): a Job of N cheap pods (a shell
loop printing a numbered line a second) on the stand-in cluster (tests/k8s_standin/), followed by the
project's own ``follow`` in a process of its own, as the triggerer runs it, with the default
``kubernetes.log_members`` (2). Per N: requests per minute by verb and resource and response bytes, counted by
the stand-in in a steady window; log bytes fetched against bytes relayed; the follower's CPU seconds per minute
and its event loop's lag; then the API drops every connection for a second (watches and log streams cut off),
and one pod is killed: the seconds until the follow fails naming it, and the relayed lines lost or duplicated.

The stand-in is not a kube-apiserver: a real one serves watches from its watch cache, proxies ``pods/log``
through each node's kubelet, and keeps long-running requests outside its max-inflight limits. Needs root."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import psutil
from kubernetes import client, config

from tests.k8s_standin import StandInCluster
from tests.support.processes import wait_for
from tfdist.operators.launchers.kubernetes.api import Watch
from tfdist.operators.plan.stages import Following

CONNECTION = "bench_k8s_standin"
NAMESPACE = "ml"
LOG_MEMBERS = 2
LINE = re.compile(r"^\[(?P<member>[\w-]+)\] (?P=member) line (?P<n>\d+):")
ENDED = re.compile(r"^Job \S+ ended \(")
"""The follow's line once it knows how the stage ended (before it deletes the objects: the stand-in deletes
synchronously, pods and processes included, where a real API server answers at once)."""
POD_LOOP = (
    'i=0; while true; do i=$((i+1)); printf "%s line %d: step %d, loss 0.%04d, 1234.5 examples/s\\n" '
    '"worker-$JOB_COMPLETION_INDEX" $i $((i*10)) $((i*37%10000)); sleep 1; done'
)
"""A cheap pod's container: one numbered line a second, about as long as a training step's log line."""


def job(name: str, pods: int) -> dict:
    """An Indexed Job of cheap pods that fails at once when one fails, as the launcher's Jobs do."""
    container = {"name": "trainer", "image": "busybox:1", "command": ["sh", "-c", POD_LOOP]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]},
                    }
                ]
            },
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def watch_of(name: str, pods: int) -> Watch:
    following = Following(
        connection_id=CONNECTION, namespace=NAMESPACE, startup_timeout_seconds=120, log_members=LOG_MEMBERS
    )
    return Watch(
        following=following,
        task_id="bench",
        kind="Job",
        name=name,
        objects=(("Job", name),),
        members=tuple(f"worker-{i}" for i in range(pods)),
        rank_tagged=False,
        result_member="worker-0",
    )


async def follow_and_time(watch: Watch, log: logging.Logger) -> dict:
    """Follow the stage, sampling the event loop's lag every 50 ms: how it ended, and the lags."""
    from tfdist.operators.launchers.kubernetes.follow import follow

    lags, running = [], True

    async def ticker() -> None:
        while running:
            before = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append(time.monotonic() - before - 0.05)

    ticking = asyncio.ensure_future(ticker())
    try:
        await follow(watch, log)
        outcome = "success"
    except Exception as exc:
        outcome = str(exc).splitlines()[0]
    running = False
    await ticking
    return {
        "outcome": outcome,
        "lag_p99_ms": 1000 * sorted(lags)[int(len(lags) * 0.99)],
        "lag_max_ms": 1000 * max(lags),
    }


def child(watch_file: str, lines_file: str, out_file: str) -> None:
    """The follower's process: relayed lines to ``lines_file`` (arrival time, line), the figures to
    ``out_file``."""
    with open(watch_file) as f:
        watch = Watch.from_dict(json.load(f))
    log = logging.getLogger("bench.follow")
    log.propagate, log.level = False, logging.INFO
    with open(lines_file, "w", buffering=1) as lines:
        handler = logging.StreamHandler(lines)
        handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
        log.addHandler(handler)
        figures = asyncio.run(follow_and_time(watch, log))
    with open(out_file, "w") as f:
        json.dump(figures, f)


def relayed(lines_file: str) -> list[tuple[float, str]]:
    with open(lines_file) as f:
        return [(float(at), line) for at, _, line in (raw.rstrip("\n").partition(" ") for raw in f)]


def counted(lines: list[tuple[float, str]]) -> dict:
    """Lines lost (numbers skipped) and duplicated, over the relayed members' numbered lines."""
    numbers: dict[str, list[int]] = {}
    for _, line in lines:
        if m := LINE.match(line):
            numbers.setdefault(m["member"], []).append(int(m["n"]))
    lost = sum(max(n) - len(set(n)) for n in numbers.values())
    return {
        "members_relayed": sorted(numbers),
        "lines": sum(map(len, numbers.values())),
        "lost": lost,
        "duplicated": sum(len(n) - len(set(n)) for n in numbers.values()),
    }


def condition_set_at(cluster, name: str, condition: str = "FailureTarget") -> float:
    """When the stand-in's Job controller set the Job's condition (from the stand-in's change history)."""
    with cluster.lock:
        changes = [json.loads(text) for _, _, key, text in cluster.history if key == ("Job", NAMESPACE, name)]
    stamps = [
        c["lastTransitionTime"]
        for job in changes
        for c in job.get("status", {}).get("conditions") or []
        if c["type"] == condition and c["status"] == "True"
    ]
    return dt.datetime.fromisoformat(stamps[0].replace("Z", "+00:00")).timestamp()


def steady(cluster, follower: psutil.Process, lines_file: str, seconds: float) -> dict:
    """Over ``seconds`` of a follow with nothing to tell: requests by kind, log bytes fetched and relayed, the
    follower's CPU."""
    requests, sent, cpu, started = dict(cluster.requests), dict(cluster.bytes_sent), follower.cpu_times(), time.time()
    time.sleep(seconds)
    ended, cpu_after, minutes = time.time(), follower.cpu_times(), seconds / 60
    window = {k: v - requests.get(k, 0) for k, v in sorted(cluster.requests.items()) if v - requests.get(k, 0)}
    return {
        "steady_requests_per_minute": {k: v / minutes for k, v in window.items()},
        "log_bytes_fetched": cluster.bytes_sent["get pods/log"] - sent.get("get pods/log", 0),
        "log_bytes_relayed": sum(
            len(line.split("] ", 1)[1]) + 1
            for at, line in relayed(lines_file)
            if started <= at < ended and LINE.match(line)
        ),
        "cpu_seconds_per_minute": (sum(cpu_after[:2]) - sum(cpu[:2])) / minutes,
    }


def one(cluster, work: str, pods: int, seconds: float) -> dict:
    """Follow a Job of ``pods`` cheap pods: a steady window of ``seconds``, a dropped API, a killed pod."""
    name = f"bench-{pods}"
    api = client.CustomObjectsApi(config.new_client_from_config_dict(cluster.kubeconfig))
    api.create_namespaced_custom_object("batch", "v1", NAMESPACE, "jobs", job(name, pods))

    def running() -> list:
        return [p for p in cluster.pods.values() if p.obj["metadata"]["name"].startswith(name) and p.phase == "Running"]

    wait_for(lambda: len(running()) == pods, 60 + pods, f"{pods} pods to run")
    files = {k: os.path.join(work, f"{name}.{k}") for k in ("watch", "lines", "out")}
    with open(files["watch"], "w") as f:
        json.dump(watch_of(name, pods).to_dict(), f)
    before, began = dict(cluster.requests), time.time()
    follower = subprocess.Popen([sys.executable, "-m", "bench.follow", "--child", *files.values()])
    wait_for(
        lambda: os.path.exists(files["lines"]) and len(relayed(files["lines"])) >= 2 * LOG_MEMBERS,
        120,
        "the follower to relay",
    )
    time.sleep(2)
    figures = steady(cluster, psutil.Process(follower.pid), files["lines"], seconds)
    cluster.drop_connections(1.0)
    time.sleep(max(5.0, seconds / 3))
    killed_at = time.time()
    os.killpg(cluster.pods[running()[-1].obj["metadata"]["name"]].proc.pid, signal.SIGKILL)
    follower.wait(120)
    finished = time.time()
    total = {k: v - before.get(k, 0) for k, v in sorted(cluster.requests.items()) if v - before.get(k, 0)}
    with open(files["out"]) as f:
        out = json.load(f)
    seen = next(at for at, line in relayed(files["lines"]) if ENDED.match(line))
    wait_for(
        lambda: not [p for p in cluster.pods.values() if p.obj["metadata"]["name"].startswith(name)],
        120,
        "the pods to be deleted",
    )
    return {
        "pods": pods,
        **figures,
        **out,
        "requests_of_the_follow": total,
        "requests_per_minute": sum(total.values()) / ((finished - began) / 60),
        "kill_to_failure_seconds": seen - killed_at,
        "condition_to_failure_seconds": seen - condition_set_at(cluster, name),
        **counted(relayed(files["lines"])),
    }


def measure(work: str, counts: tuple[int, ...], seconds: float) -> dict:
    """One row per pod count; a note instead where the stand-in cannot run (not root)."""
    if os.geteuid() != 0:
        return {"skipped": "needs root (the stand-in cluster gives each pod a network namespace)"}
    os.makedirs(work, exist_ok=True)
    cluster = StandInCluster(work).start()
    os.environ[f"AIRFLOW_CONN_{CONNECTION.upper()}"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(cluster.kubeconfig)}}
    )
    try:
        return {"rows": [one(cluster, work, pods, seconds) for pods in counts], "seconds": seconds}
    finally:
        cluster.close()


def rows(results: dict, ratio_row) -> list[dict]:
    """The table's rows: the costs at the largest N against N=8 (or the smallest N), then per N the bytes
    fetched against relayed and the seconds from a pod's kill to the stage's failure."""
    if "rows" not in results:
        return []
    by = {r["pods"]: r for r in results["rows"]}
    top = max(by)
    base = 8 if 8 in by and top > 8 else min(by)
    out = [
        ratio_row(
            f"follow {top} pods / {base} pods: {figure}",
            [by[top][key]],
            [max(by[base][key], 1e-9)],
            "≤ 1.5",
            lambda m: m <= 1.5,
        )
        for figure, key in (
            ("API requests per minute of the follow", "requests_per_minute"),
            ("follower CPU seconds per minute", "cpu_seconds_per_minute"),
        )
    ]
    for r in results["rows"]:
        n = r["pods"]
        out += [
            ratio_row(
                f"follow {n} pods: log bytes fetched / relayed",
                [r["log_bytes_fetched"]],
                [r["log_bytes_relayed"]],
                "≤ 1.2",
                lambda m: m <= 1.2,
            ),
            ratio_row(
                f"follow {n} pods: seconds from a pod's kill to the stage's failure",
                [r["kill_to_failure_seconds"]],
                [1],
                "≤ 2",
                lambda m: m <= 2,
            ),
        ]
    return out


def absolutes(results: dict) -> list[tuple[str, str]]:
    if "rows" not in results:
        return [("following a Kubernetes stage", results["skipped"])]
    out = []
    for r in results["rows"]:
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in r["steady_requests_per_minute"].items()) or "none"
        every = ", ".join(f"{k} {v}" for k, v in r["requests_of_the_follow"].items())
        out += [
            (f"follow {r['pods']} pods: requests per minute in the steady window", kinds),
            (f"follow {r['pods']} pods: requests of the whole follow (a drop included)", every),
            (
                f"follow {r['pods']} pods: follower CPU, event-loop lag",
                f"{r['cpu_seconds_per_minute']:.2f} s/min, p99 {r['lag_p99_ms']:.0f} ms, max {r['lag_max_ms']:.0f} ms",
            ),
            (
                f"follow {r['pods']} pods: log bytes fetched, relayed (steady)",
                f"{r['log_bytes_fetched']:,}, {r['log_bytes_relayed']:,}",
            ),
            (f"follow {r['pods']} pods: how the stage ended", r["outcome"][:120]),
            (
                f"follow {r['pods']} pods: the Job's FailureTarget → the follow knew it",
                f"{r['condition_to_failure_seconds']:.3f} s (the rest of the kill → failure time is the stand-in's "
                "kubelet and Job controller)",
            ),
            (
                f"follow {r['pods']} pods: relayed lines lost / duplicated through a dropped API (goal 0 / 0)",
                f"{r['lost']} / {r['duplicated']} of {r['lines']} from {', '.join(r['members_relayed'])}",
            ),
        ]
    return out


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    child(*sys.argv[2:5])
