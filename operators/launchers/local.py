"""Local launcher: the stage's processes run on this machine, TF cluster members on 127.0.0.1 ports."""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import queue
import signal
import socket
import subprocess
import threading
import time

from operators.launchers.base import Launcher, StageFailed
from operators.plan import Process, Stage, tf_config

TAIL_LINES = 40
STOP_GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    """Runs in the child before exec: if the launching process dies (even by SIGKILL), the child gets SIGTERM."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _gpu_env(process: Process) -> dict[str, str]:
    devices = range(process.index * process.gpus, (process.index + 1) * process.gpus)
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}


class LocalLauncher(Launcher):
    def __init__(self) -> None:
        self.processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def environments(self, stage: Stage) -> dict[str, dict[str, str]]:
        """Extra environment of each process: its own, GPU visibility, and TF_CONFIG for cluster members."""
        envs = {p.name: {**p.env, **_gpu_env(p)} for p in stage.processes}
        if stage.tf_cluster:
            ports = free_ports(len(stage.processes))
            addresses = {p.name: f"127.0.0.1:{port}" for p, port in zip(stage.processes, ports)}
            for p in stage.processes:
                envs[p.name]["TF_CONFIG"] = tf_config(stage, addresses, p)
        return envs

    def run(self, stage: Stage, log: logging.Logger) -> None:
        lines: queue.Queue = queue.Queue()
        tails = {p.name: collections.deque(maxlen=TAIL_LINES) for p in stage.processes}
        envs = self.environments(stage)
        try:
            for p in stage.processes:
                env = {**os.environ, "PYTHONUNBUFFERED": "1", **envs[p.name]}
                log.info("starting %s: %s", p.name, " ".join(p.argv))
                with self._lock:
                    self.processes[p.name] = subprocess.Popen(
                        p.argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                    )
            pumps = [
                threading.Thread(target=self._pump, args=(name, proc, lines), daemon=True)
                for name, proc in self.processes.items()
            ]
            for t in pumps:
                t.start()
            self._wait(lines, tails, log)
            for t in pumps:
                t.join()
            self._relay(lines, tails, log)
        finally:
            self.stop()

    @staticmethod
    def _pump(name: str, proc: subprocess.Popen, lines: queue.Queue) -> None:
        for raw in proc.stdout:
            lines.put((name, raw.decode(errors="replace").rstrip()))

    @staticmethod
    def _relay(lines: queue.Queue, tails: dict, log: logging.Logger, timeout: float | None = None) -> None:
        try:
            item = lines.get(timeout=timeout) if timeout else lines.get_nowait()
            while True:
                name, line = item
                tails[name].append(line)
                log.info("[%s] %s", name, line)
                item = lines.get_nowait()
        except queue.Empty:
            pass

    def _wait(self, lines: queue.Queue, tails: dict, log: logging.Logger) -> None:
        while True:
            self._relay(lines, tails, log, timeout=0.2)
            codes = {name: proc.poll() for name, proc in self.processes.items()}
            failed = [name for name, code in codes.items() if code not in (None, 0)]
            if failed:
                name = failed[0]
                self.stop()
                time.sleep(0.2)  # let the pump threads deliver the failed process's last lines
                self._relay(lines, tails, log)
                raise StageFailed(name, codes[name], list(tails[name]))
            if all(code == 0 for code in codes.values()):
                return

    def stop(self) -> None:
        with self._lock:
            running = [p for p in self.processes.values() if p.poll() is None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in running:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while running and time.monotonic() < deadline:
                running = [p for p in running if p.poll() is None]
                time.sleep(0.05)
            if not running:
                return
