"""The entrypoint of every pod on Kubernetes. It records the run (spec.json, run.json from the pod's
environment), starts the stage's command, and, once the command succeeded, hands the stage's result record
back as the container's termination message, so the Airflow side needs no access to the artifact volume.

TF cluster and Horovod pods first find their place from their completion index (an Indexed Job's
``JOB_COMPLETION_INDEX``) and wait until every peer's name resolves: a TF cluster member gets its
``TF_CONFIG`` (unless Kubeflow's TFJob set one), a Horovod pod starts its ranks over Gloo, pod 0 serving
Horovod's rendezvous (no SSH, no mpirun). The launcher pod of an MPIJob waits until every host of the
hostfile the MPI operator mounts resolves before it starts ``mpirun`` (the workers' names appear once their
pods are ready, and ssh does not retry a name that does not resolve).

    python -m tfdist.trainer.pod --run-dir D --result F [--job J (--cluster chief=1,ps=1,worker=2 |
        --horovod-slots 2 --pods 3) | --hostfile /etc/mpi/hostfile] -- python -m tfdist.trainer.train ...

Peers are ``<job>-<index>.<job>``: an Indexed Job's pod hostnames under its headless Service. The Airflow
side builds this argv with ``tfdist.contract.pod_argv``. Imports no Airflow and no TensorFlow (Horovod only
in the Horovod pods)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from tfdist.contract.launch import (
    EXIT_HUNG,
    EXIT_REFUSED,
    RENDEZVOUS_PORT,
    RUN_ENV,
    SPEC_ENV,
    TERMINATION_LOG,
    TF_PORT,
    encode_result,
    rank_tag,
    tf_config,
)
from tfdist.contract.layout import RunLayout, RunMismatch, record_run
from tfdist.contract.progress import Beat, last_beats, longest_silent, stalled
from tfdist.contract.records import RecordError
from tfdist.contract.train_records import RunRecord
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.infra.stopping import is_stopped, stop_processes
from tfdist.trainer import scratch

PEER_TIMEOUT_SECONDS = 600
GLOO_TIMEOUT_SECONDS = 600
"""Horovod's Gloo rendezvous waits this long for every rank: pods of one Job may start minutes apart."""
STOPPED_SECONDS = 3
"""A training process stopped (SIGSTOP) this long fails its pod, whatever the hang timeout: TF's coordination
service gives up on a stopped MultiWorkerMirrored worker after 10 s and fails a peer instead, hiding the cause."""
HEARTBEAT_SCAN_SECONDS = 2.0
"""How often a pod reads the stage's heartbeats: every pod reads every member's file from the shared volume."""
REMOTE_SCAN_SECONDS = 10.0
"""How often an MPIJob's launcher pod reads its ranks' heartbeats in their worker pods (over SSH)."""
NOT_FORWARDED = ("HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", SPEC_ENV, RUN_ENV)
NOT_FORWARDED_PREFIXES = ("OMPI_", "PMIX_", "KUBERNETES_")
"""What mpirun does not pass on from an MPIJob's launcher pod to the ranks: the pod's own host and shell, the run's
records (the launcher writes them), mpirun's settings (it passes them itself) and the cluster's service address."""


class HangWatch:
    """Every pod of a training stage watches its own processes and the heartbeats of all the stage's members
    (``read_beats``: on the shared artifact volume; with an object-store root, its own members', in its scratch; an
    MPIJob's launcher, those in its worker pods): the pod whose process is stopped reports it after
    STOPPED_SECONDS; once no member has stepped for ``timeout`` seconds, a pod reports the member silent longest
    (the others wait for it in a collective). Beat times are the files' modification times: the nodes' clocks must
    agree to well within ``timeout``."""

    def __init__(
        self, read_beats: Callable[[], dict[str, Beat]], timeout: int, scan_seconds: float = HEARTBEAT_SCAN_SECONDS
    ) -> None:
        self.read_beats, self.timeout, self.scan_seconds, self.since = read_beats, timeout, scan_seconds, time.time()
        self.stopped_since: dict[int, float] = {}
        self.scanned = 0.0
        self.report: str | None = None

    def hung(self, own: dict[str, int]) -> bool:
        """Whether the stage hung, given this pod's processes (member → pid); ``report`` then says who and why."""
        now = time.time()
        self.stopped_since = {pid: self.stopped_since.get(pid, now) for pid in own.values() if is_stopped(pid)}
        stopped = [(m, pid) for m, pid in own.items() if now - self.stopped_since.get(pid, now) >= STOPPED_SECONDS]
        if stopped:
            member, pid = stopped[0]
            self.report = f"{member} is stopped: its process {pid} has been stopped (SIGSTOP) for {STOPPED_SECONDS} s"
            return True
        if now - self.scanned < self.scan_seconds:
            return False
        self.scanned = now
        beats = stalled(self.read_beats(), self.since, self.timeout)
        if beats is None:
            return False
        who, why = longest_silent(beats)
        self.report = f"{who} made no training progress for {self.timeout} s (training.hang_timeout_seconds): {why}"
        return True


def peer(job: str, index: int) -> str:
    """The name of the Job's pod ``index``: its host name under the Job's headless Service (named as the Job)."""
    return f"{job}-{index}.{job}"


def members(cluster: str) -> list[tuple[str, int]]:
    """(role, index within role) of each completion index, in order: 'chief=1,ps=1,worker=2' →
    chief 0, ps 0, worker 0, worker 1."""
    out = []
    for part in cluster.split(","):
        role, count = part.split("=")
        out += [(role, i) for i in range(int(count))]
    return out


def pod_tf_config(job: str, cluster: str, index: int, port: int = TF_PORT) -> str:
    """TF_CONFIG of the pod with completion index ``index``."""
    ordered = members(cluster)
    addresses: dict[str, list[str]] = {}
    for k, (role, _) in enumerate(ordered):
        addresses.setdefault(role, []).append(f"{peer(job, k)}:{port}")
    return tf_config(addresses, *ordered[index])


def wait_for_peers(hosts: list[str], timeout: float) -> None:
    """Return once every host name resolves (a headless Service publishes not-ready pods, so each pod's
    name appears as soon as the pod has an address); exit naming the missing ones after ``timeout``."""
    deadline, missing = time.monotonic() + timeout, list(hosts)
    while missing:
        missing = [h for h in missing if not _resolves(h)]
        if missing and time.monotonic() > deadline:
            print(
                f"ERROR: peers not resolvable after {timeout:.0f} s: {', '.join(missing)}", file=sys.stderr, flush=True
            )
            raise SystemExit(1)
        if missing:
            time.sleep(0.5)


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except socket.gaierror:
        return False


def remote_beats(hosts: list[str], heartbeats: str) -> Callable[[], dict[str, Beat]]:
    """The beats of an MPIJob's ranks in their worker pods' scratch (``heartbeats``), read over the SSH mpirun starts
    them through, every worker at once; a worker not reached, or not answering in time, adds none."""
    command = shlex.join([sys.executable, "-m", "tfdist.contract.progress", heartbeats])  # ssh hands a shell a line

    def read_one(host: str) -> dict[str, Beat]:
        try:
            done = subprocess.run(
                ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host, command],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return {m: Beat(*b) for m, b in json.loads(done.stdout).items()} if done.returncode == 0 else {}
        except (subprocess.TimeoutExpired, ValueError, TypeError):
            return {}

    def read() -> dict[str, Beat]:
        with ThreadPoolExecutor(min(len(hosts), 16) or 1) as pool:
            return {m: b for found in pool.map(read_one, hosts) for m, b in found.items()}

    return read


def forwarding_environment(mpirun: list[str], environ: Mapping[str, str]) -> list[str]:
    """``mpirun`` passing on the launcher pod's environment to every rank (``-x``, by name: no value in argv), as
    the pods' own environment (sshd starts the ranks with none of it): the stage's settings, and the identity a
    worker reaches the store with (a Secret's variables, a service account's web identity)."""
    names = sorted(n for n in environ if n not in NOT_FORWARDED and not n.startswith(NOT_FORWARDED_PREFIXES))
    return [mpirun[0], *(arg for name in names for arg in ("-x", name)), *mpirun[1:]]


def hostfile_hosts(path: str) -> list[str]:
    """The hosts of an MPI hostfile (``<host> slots=<n>`` lines; comments and blank lines skipped)."""
    with open(path) as f:
        return [line.split()[0] for line in f if line.split() and not line.lstrip().startswith("#")]


def run_command(args: argparse.Namespace, index: int, watch: HangWatch | None) -> int:
    """The stage's one process; a TF cluster member gets its TF_CONFIG first (unless a TFJob set it), an
    MPIJob's launcher waits for the hostfile's hosts."""
    env = dict(os.environ)
    if args.cluster and "TF_CONFIG" not in env:
        env["TF_CONFIG"] = pod_tf_config(args.job, args.cluster, index)
        wait_for_peers([peer(args.job, k) for k in range(len(members(args.cluster)))], args.peer_timeout)
    command = args.command
    if args.hostfile:
        wait_for_peers(hostfile_hosts(args.hostfile), args.peer_timeout)
        command = forwarding_environment(command, env)
    member = "-".join(map(str, members(args.cluster)[index])) if args.cluster else "launcher"
    return _run([(None, member, command, env)], watch)


def run_horovod_ranks(args: argparse.Namespace, index: int, watch: HangWatch | None) -> int:
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    hosts = [peer(args.job, k) for k in range(args.pods)]
    wait_for_peers(hosts, args.peer_timeout)
    plan = get_host_assignments(
        parse_hosts(",".join(f"{h}:{args.horovod_slots}" for h in hosts)), args.pods * args.horovod_slots
    )
    if index == 0:
        server = RendezvousHTTPServer(("", args.rendezvous_port), RendezvousHandler, 0)
        server.init(plan)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    common = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": hosts[0],
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(args.rendezvous_port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": args.iface,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_SECONDS),
    }
    ranks = [slot for slot in plan if slot.hostname == hosts[index]]
    return _run(
        [
            (slot.rank, f"rank-{slot.rank}", args.command, {**os.environ, **common, **create_slot_env_vars(slot)})
            for slot in ranks
        ],
        watch,
    )


def _run(processes: list[tuple[int | None, str, list[str], dict[str, str]]], watch: HangWatch | None) -> int:
    """Start the processes (rank, member, argv, env); relay output (Horovod ranks tagged '[rank]<stdout>:' as
    horovodrun does); when one fails, stop the rest and return its exit code; when the pod is told to stop
    (the kubelet's SIGTERM: deleted, evicted), stop them and return 128 + SIGTERM; when ``watch`` finds the stage
    hung, kill them and return EXIT_HUNG."""
    started = [
        (rank, member, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for rank, member, argv, env in processes
    ]
    pumps = [threading.Thread(target=_relay, args=(rank, proc), daemon=True) for rank, _, proc in started]
    for t in pumps:
        t.start()
    told_to_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: told_to_stop.set())

    def first_failure() -> int:
        return next((proc.returncode for _, _, proc in started if proc.returncode), 0)

    hung = False
    while None in [proc.poll() for _, _, proc in started] and not first_failure():  # polls every one
        if told_to_stop.is_set():
            break
        if watch and watch.hung({member: proc.pid for _, member, proc in started}):
            hung = True
            print(f"ERROR: {watch.report}; stopping this pod's processes", file=sys.stderr, flush=True)
            break
        time.sleep(0.2)
    code = EXIT_HUNG if hung else 128 + signal.SIGTERM if told_to_stop.is_set() else first_failure()
    stop_processes([proc for _, _, proc in started], first=signal.SIGKILL if hung else signal.SIGTERM)
    for t in pumps:
        t.join()
    return code if code >= 0 else 128 - code


def _relay(rank: int | None, proc: subprocess.Popen[bytes]) -> None:
    tag = "" if rank is None else rank_tag(rank)
    for raw in proc.stdout or ():  # a pipe (stdout=PIPE)
        sys.stdout.write(tag + raw.decode(errors="replace"))
        sys.stdout.flush()


def hang_watch(args: argparse.Namespace) -> HangWatch:
    """With an object-store root each member beats in its pod's scratch: a pod watches its own members, an MPIJob's
    launcher those in its worker pods."""
    heartbeats = scratch.local_path(args.heartbeats)
    if args.hostfile and storage.is_object_store(args.heartbeats):
        return HangWatch(
            remote_beats(hostfile_hosts(args.hostfile), heartbeats), args.hang_timeout, REMOTE_SCAN_SECONDS
        )
    return HangWatch(functools.partial(last_beats, heartbeats), args.hang_timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, help="the run's directory: spec.json and run.json go there")
    parser.add_argument("--result", required=True, help="the stage's result record, relayed as termination message")
    parser.add_argument("--message", default=TERMINATION_LOG, help="the container's terminationMessagePath")
    parser.add_argument("--job", help="the Job (and its headless Service): peers are <job>-<index>.<job>")
    parser.add_argument("--cluster", help="TF cluster roles in completion-index order: chief=1,ps=1,worker=2")
    parser.add_argument("--horovod-slots", type=int, default=0, help="Horovod ranks per pod")
    parser.add_argument("--pods", type=int, default=0, help="Horovod: pods of the Job")
    parser.add_argument("--rendezvous-port", type=int, default=RENDEZVOUS_PORT)
    parser.add_argument("--iface", default=os.environ.get("TFDIST_IFACE", "eth0"), help="Gloo's network interface")
    parser.add_argument("--hostfile", help="an MPI hostfile: start the command once every host in it resolves")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_SECONDS)
    parser.add_argument("--heartbeats", help="the training members' heartbeat directory (on the shared volume)")
    parser.add_argument("--hang-timeout", type=int, help="fail once no member has beaten for this many seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if (
        not args.command
        or (args.cluster and args.horovod_slots)
        or bool(args.cluster or args.horovod_slots) != bool(args.job)
        or (args.hostfile and args.job)
    ):
        parser.error(
            "give a command after '--', and --job with either --cluster or --horovod-slots and --pods, or --hostfile"
        )
    try:
        run = RunRecord.parse(json.loads(os.environ[RUN_ENV]), RUN_ENV)
        record_run(RunLayout(args.run_dir), json.loads(os.environ[SPEC_ENV]), run)
    except KeyError as exc:
        return _error(f"the pod's environment lacks {exc}: the run's spec and record come from there")
    except RecordError as exc:
        return _error(str(exc))
    except RunMismatch as exc:
        return _error(str(exc), EXIT_REFUSED)
    index = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    watch = hang_watch(args) if args.heartbeats and args.hang_timeout else None
    code = run_horovod_ranks(args, index, watch) if args.horovod_slots else run_command(args, index, watch)
    if watch and watch.report:
        with open(args.message, "w") as f:
            f.write(watch.report)
    if code == 0 and storage.exists(args.result):
        try:
            message = encode_result(read_json(args.result))
        except ValueError as exc:
            return _error(str(exc))
        with open(args.message, "w") as f:
            f.write(message)
    return code


def _error(message: str, code: int = 1) -> int:
    print(f"ERROR: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
