"""Local launcher: the stage's processes run on this machine, TF cluster members on 127.0.0.1 ports."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import psutil

from tfdist.contract.launch import SCRATCH_ENV, split_rank_tags
from tfdist.contract.progress import checkpoint_step, last_beats, longest_silent, stalled
from tfdist.contract.stages import worker_command
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.infra.stopping import is_stopped, stop_processes
from tfdist.operators.artifact_store import HandedOptions, connect
from tfdist.operators.launchers.base import (
    TAIL_LINES,
    ElasticRestart,
    Launcher,
    StageFailed,
    StageLog,
    StageStopped,
    failed_first,
)
from tfdist.operators.launchers.processes import Process, local_processes
from tfdist.operators.plan import Elastic, Plan, StagePlan

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if the launching process dies (even by SIGKILL), the child gets SIGTERM."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalLauncher(Launcher):
    def __init__(self, plan: Plan, try_number: int = 1) -> None:
        super().__init__(plan, try_number)
        self.processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stop_requested = threading.Event()
        self._pumps: list[threading.Thread] = []
        # the local copies of an object store's artifacts and the heartbeats, shared by the stage's processes (which
        # make what they write in it: nothing for a local root)
        self.scratch = os.path.join(tempfile.gettempdir(), f"tfdist-scratch-{uuid.uuid4().hex}")
        self.store_roots = tuple(r for r in (plan.spec.artifact_root, plan.model_dir) if storage.is_object_store(r))
        self.store_env = connect(*self.store_roots)
        if self.store_roots:  # the processes' storage options, renewed from the connection while they run
            self.store_env[storage.OPTIONS_FILE_ENV] = os.path.join(self.scratch, "store-options.json")

    def stop_leftovers(self, stage: StagePlan, log: StageLog) -> None:
        """Stop processes of this stage left by an earlier attempt of the task (same module, same run's
        spec), so a retry never runs a second set of workers beside the first."""
        signature = " ".join([*worker_command("", stage.args.worker_module)[1:], "--spec", stage.args.spec, ""])
        ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        leftovers = [
            proc
            for proc in psutil.process_iter(["pid", "cmdline"])
            if proc.pid not in ours and signature in " ".join(proc.info["cmdline"] or []) + " "
        ]
        if leftovers:
            log.warning(
                "stopping %d process(es) left by an earlier attempt: %s",
                len(leftovers),
                ", ".join(str(p.pid) for p in leftovers),
            )
            stop_processes(others=leftovers)

    def run(self, stage: StagePlan, log: StageLog) -> dict:
        self.stop_leftovers(stage, log)
        try:
            return super().run(stage, log)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def heartbeats(self, stage: StagePlan) -> str:
        """Where the stage's processes beat: its heartbeat directory, or with an object store its scratch copy."""
        return storage.mirror_path(stage.heartbeat_dir, self.scratch)

    def furthest_step(self, stage: StagePlan) -> int:
        """The furthest step any training process of the stage has beaten."""
        return max((b.step for b in last_beats(self.heartbeats(stage)).values()), default=0)

    def restart_policy(self, stage: StagePlan) -> Elastic | None:
        """Elastic Horovod restarts within horovodrun's elastic mode, not by the launcher (launchers.processes)."""
        return None if stage.sync == "horovod" else stage.elastic

    def measure_loss(self, stage: StagePlan) -> dict:
        return {
            "lost_at_step": self.furthest_step(stage),
            "resumed_at_step": checkpoint_step(stage.checkpoint_dir),
            "stopped_at": time.time(),
        }

    def run_once(self, stage: StagePlan, log: StageLog, restarts: list[ElasticRestart]) -> dict:
        self.run_processes(stage, local_processes(stage), log, restarts)
        return read_json(stage.result_file)

    def run_processes(
        self, stage: StagePlan, processes: list[Process], log: StageLog, restarts: list[ElasticRestart] | None = None
    ) -> None:
        """Start the stage's processes and wait for them; ``restarts``: the restarts of this run of the stage so far
        (the last one, if elastic, is the one this start follows), where a worker restarted in place is added."""
        lines: queue.Queue = queue.Queue()
        tails: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=TAIL_LINES))
        with self._lock:
            self.processes = {}
        self._pumps = []
        handed = (
            HandedOptions(self.store_env[storage.OPTIONS_FILE_ENV], self.store_roots, log)
            if self.store_roots
            else contextlib.nullcontext()
        )
        try:
            with handed:
                for p in processes:
                    self._start(p, lines, log)
                self._wait(
                    stage, {p.name: p for p in processes}, lines, tails, log, [] if restarts is None else restarts
                )
                self._terminate()  # servers, once everything else is done
                for t in self._pumps:
                    t.join()
                self._relay(lines, tails, log)
        finally:
            self._terminate()

    def _start(self, p: Process, lines: queue.Queue, log: StageLog) -> None:
        """Start process ``p`` and a thread pumping its output lines into ``lines``."""
        log.info("starting %s: %s", p.name, " ".join(p.argv))
        with self._lock:
            proc = self.processes[p.name] = subprocess.Popen(
                p.argv,
                env={**os.environ, **self.store_env, SCRATCH_ENV: self.scratch, "PYTHONUNBUFFERED": "1", **p.env},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        pump = threading.Thread(target=self._pump, args=(p.name, proc, p.rank_tagged, lines), daemon=True)
        pump.start()
        self._pumps.append(pump)

    @staticmethod
    def _pump(name: str, proc: subprocess.Popen, rank_tagged: bool, lines: queue.Queue) -> None:
        for raw in proc.stdout or ():  # a pipe (stdout=PIPE)
            line = raw.decode(errors="replace").rstrip()
            for source, text in split_rank_tags(name, line) if rank_tagged else [(name, line)]:
                lines.put((source, text))

    @staticmethod
    def _relay(lines: queue.Queue, tails: dict, log: StageLog, timeout: float | None = None) -> None:
        try:
            item = lines.get(timeout=timeout) if timeout else lines.get_nowait()
            while True:
                name, line = item
                tails[name].append(line)
                log.info("[%s] %s", name, line)
                item = lines.get_nowait()
        except queue.Empty:
            pass

    def _wait(
        self,
        stage: StagePlan,
        processes: dict[str, Process],
        lines: queue.Queue,
        tails: dict,
        log: StageLog,
        restarts: list[ElasticRestart],
    ) -> None:
        started = time.time()
        roles = {name: p.role for name, p in processes.items()}
        recovering = len(restarts) - 1 if restarts else None  # the cluster restart this attempt follows
        while True:
            self._relay(lines, tails, log, timeout=0.2)
            if self._stop_requested.is_set():
                raise StageStopped(f"{stage.task_id}: stopped on request; every process was ended")
            if recovering is not None and self._noted_recovery(stage, started, restarts, recovering, log):
                recovering = None
            if hung := self._hung(stage, started):
                self._terminate()
                self._relay(lines, tails, log)
                name, detail = hung
                raise StageFailed(
                    name,
                    None,
                    failed_first(tails, name),
                    how=f"made no training progress for {stage.hang_timeout_seconds} s (training.hang_timeout_seconds)",
                    detail=detail,
                    lost=(name,),
                )
            codes = {name: proc.poll() for name, proc in self.processes.items()}
            failed = [
                name
                for name, code in codes.items()
                if code not in (None, 0) or (code == 0 and roles[name] in stage.servers)
            ]
            lost = [
                name
                for name in failed
                if not self._restarted_in_place(stage, processes[name], codes[name], lines, log, restarts)
            ]
            if lost:
                self._fail(stage, roles, lost, codes, lines, tails, log)
            if all(codes[name] == 0 for name, role in roles.items() if role not in stage.servers):
                return

    def _restarted_in_place(
        self,
        stage: StagePlan,
        p: Process,
        code: int | None,
        lines: queue.Queue,
        log: StageLog,
        restarts: list[ElasticRestart],
    ) -> bool:
        """Whether ``p``, which ended with ``code``, was a parameter-server worker killed by a signal (not by ``stop``)
        and is started again (``StagePlan.worker_restarts``), the restart logged and added to ``restarts``."""
        if p.role != "worker" or code is None or code >= 0:
            return False
        if self._stop_requested.is_set() or len(restarts) >= stage.worker_restarts:
            return False
        why = f"{p.name} was killed by signal {-code}"
        restarts.append(
            ElasticRestart(
                restart=len(restarts) + 1,
                lost=[p.name],
                why=why,
                in_place=True,
                lost_at_step=self.furthest_step(stage),
                restarted_at=time.time(),
            )
        )
        log.warning(
            "%s: %s; restarting it in place (restart %d of %d, training.max_restarts): the chief's coordinator runs "
            "its closures on the other workers meanwhile and takes it back once it serves",
            stage.task_id,
            why,
            len(restarts),
            stage.worker_restarts,
        )
        self._start(p, lines, log)
        return True

    def _fail(
        self,
        stage: StagePlan,
        roles: dict[str, str],
        failed: list[str],
        codes: dict[str, int | None],
        lines: queue.Queue,
        tails: dict,
        log: StageLog,
    ) -> None:
        """Stop every process and raise StageFailed naming the one of ``failed`` that caused the failure (a
        parameter server's: where training resumes, its variables being lost)."""
        killed = tuple(name for name in failed if (codes[name] or 0) < 0)
        name, stopped = (killed or failed)[0], self._stopped(stage)
        if stopped:  # its peers gave up on it (TF's coordination service): the stopped one is the cause
            name, pid = stopped
            self._terminate()
            self._relay(lines, tails, log)
            raise StageFailed(
                name,
                None,
                failed_first(tails, name),
                how=f"was stopped (process {pid}: SIGSTOP, or a debugger)",
                detail=f"{failed[0]} then exited with code {codes[failed[0]]}",
                lost=(name,),
            )
        self._terminate()
        time.sleep(0.2)  # let the pump threads deliver the last lines
        self._relay(lines, tails, log)
        code = codes[name] if codes[name] else None
        detail = None
        if roles[name] == "ps":
            detail = (
                "the variables it held are lost: training resumes from the latest checkpoint "
                f"(step {checkpoint_step(stage.checkpoint_dir)}), on the task's retry or an elastic restart"
            )
        raise StageFailed(name, code, failed_first(tails, name), detail=detail, lost=killed)

    def _noted_recovery(
        self, stage: StagePlan, started: float, restarts: list[ElasticRestart], index: int, log: StageLog
    ) -> bool:
        """Whether the restarted cluster has stepped; then its restart (``restarts[index]``) gets how long after
        the lost cluster was stopped (``seconds_to_recover``)."""
        beats = [b for b in last_beats(self.heartbeats(stage)).values() if b.time >= started]
        change = restarts[index]
        if not beats or change.stopped_at is None:
            return bool(beats)
        first = min(beats, key=lambda b: b.time)
        restarts[index] = change.model_copy(update={"seconds_to_recover": round(first.time - change.stopped_at, 2)})
        log.info(
            "%s: training again at step %d, %.1f s after the lost cluster was stopped",
            stage.task_id,
            first.step,
            restarts[index].seconds_to_recover,
        )
        return True

    def _hung(self, stage: StagePlan, started: float) -> tuple[str, str] | None:
        """(who, why) once no training process of this attempt has beaten for hang_timeout_seconds: a stopped
        process (by its member name where it beats, else its stage process) or the longest silent member."""
        if not stage.hang_timeout_seconds:
            return None
        beats = stalled(last_beats(self.heartbeats(stage)), started, stage.hang_timeout_seconds)
        if beats is None:
            return None
        if stopped := self._stopped(stage):
            return stopped[0], f"its process {stopped[1]} is stopped (SIGSTOP, or a debugger)"
        return longest_silent(beats)

    def _stopped(self, stage: StagePlan) -> tuple[str, int] | None:
        """(name, pid) of a stopped process of the stage: by its heartbeat member name (``rank-1`` under
        horovodrun), else by the stage process it belongs to."""
        members = {b.pid: member for member, b in last_beats(self.heartbeats(stage)).items()}
        for name, proc in self.processes.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                for pid in (proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))):
                    if is_stopped(pid):
                        return members.get(pid, name), pid
        return None

    def stop(self) -> None:
        self._stop_requested.set()
        self._terminate()

    def _terminate(self) -> None:
        with self._lock:
            started = list(self.processes.values())
        stop_processes(started)
