"""The entrypoint of every training pod on Kubernetes: from the pod's completion index (an Indexed Job's
``JOB_COMPLETION_INDEX``) it finds its place in the cluster, waits until every peer's name resolves, then runs
the training command: as one TF cluster member with its ``TF_CONFIG``, or as this pod's Horovod ranks over
Gloo, pod 0 serving Horovod's rendezvous (no SSH, no mpirun).

    python -m trainer.pod --job J --service S (--cluster chief=1,ps=1,worker=2 | --horovod-slots 2 --pods 3) \\
        -- python -m trainer.train ...

Peers are ``<job>-<index>.<service>``: an Indexed Job's pod hostnames under its headless Service. The
Airflow side builds this argv with ``pod_argv`` below, so both sides share one definition of it. Imports no
Airflow and no TensorFlow (Horovod only in the Horovod pods)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

TF_PORT = 2222
RENDEZVOUS_PORT = 2223
PEER_TIMEOUT_SECONDS = 600
GLOO_TIMEOUT_SECONDS = 600
"""Horovod's Gloo rendezvous waits this long for every rank: pods of one Job may start minutes apart."""


def pod_argv(python: str, job: str, service: str, command: tuple[str, ...], *,
             cluster: dict[str, int] | None = None, horovod_slots: int = 0, pods: int = 0) -> list[str]:
    """The argv of a training pod: this module, its place in the cluster, then the training command."""
    argv = [python, "-m", "trainer.pod", "--job", job, "--service", service]
    if cluster:
        argv += ["--cluster", ",".join(f"{role}={count}" for role, count in cluster.items())]
    else:
        argv += ["--horovod-slots", str(horovod_slots), "--pods", str(pods)]
    return [*argv, "--", *command]


def peer(job: str, service: str, index: int) -> str:
    return f"{job}-{index}.{service}"


def members(cluster: str) -> list[tuple[str, int]]:
    """(role, index within role) of each completion index, in order: 'chief=1,ps=1,worker=2' →
    chief 0, ps 0, worker 0, worker 1."""
    out = []
    for part in cluster.split(","):
        role, count = part.split("=")
        out += [(role, i) for i in range(int(count))]
    return out


def tf_config(job: str, service: str, cluster: str, index: int, port: int = TF_PORT) -> str:
    """TF_CONFIG of the pod with completion index ``index``."""
    spec: dict[str, list[str]] = {}
    for k, (role, _) in enumerate(members(cluster)):
        spec.setdefault(role, []).append(f"{peer(job, service, k)}:{port}")
    role, i = members(cluster)[index]
    return json.dumps({"cluster": spec, "task": {"type": role, "index": i}})


def wait_for_peers(hosts: list[str], timeout: float) -> None:
    """Return once every host name resolves (a headless Service publishes not-ready pods, so each pod's
    name appears as soon as the pod has an address); exit naming the missing ones after ``timeout``."""
    deadline, missing = time.monotonic() + timeout, list(hosts)
    while missing:
        missing = [h for h in missing if not _resolves(h)]
        if missing and time.monotonic() > deadline:
            print(f"ERROR: peers not resolvable after {timeout:.0f} s: {', '.join(missing)}", file=sys.stderr,
                  flush=True)
            raise SystemExit(1)
        if missing:
            time.sleep(0.5)


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except socket.gaierror:
        return False


def run_tf_member(args: argparse.Namespace, index: int) -> int:
    env = dict(os.environ)
    if "TF_CONFIG" not in env:  # Kubeflow's TFJob sets it itself
        env["TF_CONFIG"] = tf_config(args.job, args.service, args.cluster, index)
        wait_for_peers([peer(args.job, args.service, k) for k in range(len(members(args.cluster)))],
                       args.peer_timeout)
    return _run([(None, args.command, env)])


def run_horovod_ranks(args: argparse.Namespace, index: int) -> int:
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    hosts = [peer(args.job, args.service, k) for k in range(args.pods)]
    wait_for_peers(hosts, args.peer_timeout)
    plan = get_host_assignments(parse_hosts(",".join(f"{h}:{args.horovod_slots}" for h in hosts)),
                                args.pods * args.horovod_slots)
    if index == 0:
        server = RendezvousHTTPServer(("", args.rendezvous_port), RendezvousHandler, 0)
        server.init(plan)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    common = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": hosts[0], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(args.rendezvous_port),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": args.iface,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_SECONDS),
    }
    ranks = [slot for slot in plan if slot.hostname == hosts[index]]
    return _run([(slot.rank, args.command, {**os.environ, **common, **create_slot_env_vars(slot)})
                 for slot in ranks])


def _run(processes: list[tuple[int | None, list[str], dict[str, str]]]) -> int:
    """Start the processes; relay output (Horovod ranks tagged '[rank]<stdout>:' as horovodrun does); when
    one fails, stop the rest and return its exit code."""
    started = [(rank, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
               for rank, argv, env in processes]
    pumps = [threading.Thread(target=_relay, args=(rank, proc), daemon=True) for rank, proc in started]
    for t in pumps:
        t.start()
    signal.signal(signal.SIGTERM, lambda *_: [proc.terminate() for _, proc in started])
    def first_failure() -> int:
        return next((proc.returncode for _, proc in started if proc.returncode), 0)

    while any([proc.poll() is None for _, proc in started]) and not first_failure():  # a list: poll every one
        time.sleep(0.2)
    code = first_failure()
    for _, proc in started:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()
    for t in pumps:
        t.join()
    return code if code >= 0 else 128 - code


def _relay(rank: int | None, proc: subprocess.Popen) -> None:
    tag = "" if rank is None else f"[{rank}]<stdout>:"
    for raw in proc.stdout:
        sys.stdout.write(tag + raw.decode(errors="replace"))
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--cluster", help="TF cluster roles in completion-index order: chief=1,ps=1,worker=2")
    parser.add_argument("--horovod-slots", type=int, default=0, help="Horovod ranks per pod")
    parser.add_argument("--pods", type=int, default=0, help="Horovod: pods of the Job")
    parser.add_argument("--rendezvous-port", type=int, default=RENDEZVOUS_PORT)
    parser.add_argument("--iface", default=os.environ.get("TFDIST_IFACE", "eth0"), help="Gloo's network interface")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_SECONDS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command or bool(args.cluster) == bool(args.horovod_slots):
        parser.error("give a command after '--' and either --cluster or --horovod-slots with --pods")
    index = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    return run_tf_member(args, index) if args.cluster else run_horovod_ranks(args, index)


if __name__ == "__main__":
    sys.exit(main())
