"""How both sides stop processes (tfdist.trainer.stopping): real processes, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.support.processes import ended
from tfdist.infra.stopping import STOP_GRACE_SECONDS, is_stopped, stop_processes

pytestmark = pytest.mark.e2e  # starts processes to stop

STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)"
)
"""Ignores SIGTERM, and starts a process that leaves its process group (as horovodrun's ranks do)."""


def start(code: str, **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kwargs)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period_and_its_strays_go_with_it():
    child = start(STUBBORN, start_new_session=True)
    (stray,) = psutil.Process(child.pid).children()
    started = time.monotonic()
    stop_processes([child], grace=1.0)
    assert 1.0 <= time.monotonic() - started < 10
    assert child.returncode == -signal.SIGKILL  # waited for through its Popen: the exit status is kept
    assert ended(stray)


def test_a_child_that_obeys_sigterm_ends_without_waiting_out_the_grace_period():
    child = start("import time; print('ready', flush=True); time.sleep(60)")
    started = time.monotonic()
    stop_processes([child], grace=30)
    assert time.monotonic() - started < 10 and child.returncode == -signal.SIGTERM


def test_stopped_processes_are_seen_and_killed_at_once_when_asked():
    child = start("import time; print('ready', flush=True); time.sleep(60)")
    child.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not is_stopped(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert is_stopped(child.pid)
    stop_processes([child], grace=30, first=signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL and not is_stopped(child.pid)


ORPHANED_STAGE = (
    "import signal, subprocess, sys, time\n"
    "from tfdist.infra.stopping import end_with_parent\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "end_with_parent(poll=0.1)\n"
    "print('watching', flush=True)\n"
    "time.sleep(60)"
)
"""A stage process as a MultiWorkerMirrored worker is: SIGTERM caught, nothing written to its output."""


def test_a_stage_process_ends_after_its_launching_process_is_killed_though_it_ignores_sigterm():
    launcher = start(
        "import subprocess, sys, time\n"
        f"stage = subprocess.Popen([sys.executable, '-c', {ORPHANED_STAGE!r}])\n"
        "print('ready', stage.pid, sep='\\n', flush=True)\n"
        "time.sleep(60)",
        start_new_session=True,
    )
    stage = psutil.Process(int(launcher.stdout.readline()))
    assert launcher.stdout.readline() == "watching\n"
    launcher.kill()
    launcher.wait()
    killed = time.monotonic()
    while not ended(stage) and time.monotonic() - killed < STOP_GRACE_SECONDS + 10:
        time.sleep(0.1)
    assert ended(stage), "the orphaned stage process outlived its launcher"
    assert time.monotonic() - killed >= STOP_GRACE_SECONDS  # the grace its own stopping could use
