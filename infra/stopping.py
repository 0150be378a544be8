"""Stopping processes, the same way on both sides: the local launcher stops a stage's processes, and a pod's
entrypoint its own, by SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import psutil

STOP_GRACE_SECONDS = 3.0
"""How long a process told to stop (SIGTERM) may take before it is killed: TF's MultiWorkerMirrored workers
catch SIGTERM (its preemption notifier) and train on; well within a pod's 30 s termination grace period."""


def end_with_parent(poll: float = 0.5) -> None:
    """End this process ``STOP_GRACE_SECONDS`` after its parent does (a daemon thread sees it re-parented). The
    launcher's death signal (SIGTERM) comes first, but TF's MultiWorkerMirrored workers catch it and would train
    on, orphaned, until a write to their closed output failed."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        time.sleep(STOP_GRACE_SECONDS)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def is_stopped(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP; a debugger's tracing stop is not counted)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def stop_processes(
    children: Sequence[subprocess.Popen[Any]] = (),
    others: Sequence[psutil.Process] = (),
    grace: float = STOP_GRACE_SECONDS,
    first: int = signal.SIGTERM,
) -> None:
    """Send ``first`` to our ``children``, every process they started and ``others``, then SIGKILL whatever is
    still alive after ``grace`` seconds (SIGKILL first: a stopped process acts on no other signal). A child that
    leads its own process group is signalled as a group. Children are waited for through their Popen, which
    keeps their exit status (psutil would reap them and lose it)."""
    victims = [*others, *_descendants(children)]  # found before any is signalled: ending ones orphan theirs
    for child in children:
        if child.poll() is None:
            _signal_child(child, first)
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.send_signal(first)
    deadline = time.monotonic() + grace
    _, alive = psutil.wait_procs(victims, timeout=grace)
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_child(child, signal.SIGKILL)
            child.wait()
    for victim in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    psutil.wait_procs(alive, timeout=grace)


def _descendants(children: Sequence[subprocess.Popen[Any]]) -> list[psutil.Process]:
    found = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += psutil.Process(child.pid).children(recursive=True)
    return found


def _signal_child(child: subprocess.Popen[Any], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, signum)
        else:
            child.send_signal(signum)
