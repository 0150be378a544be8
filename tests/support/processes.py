"""Waiting for things, and checking that processes a test started have ended."""

from __future__ import annotations

import time

import psutil

from tfdist.operators.launchers.local import LocalLauncher


def ended(process: psutil.Process) -> bool:
    """Gone, or a zombie its new parent has yet to reap (nothing reaps orphans in some containers)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_all_stopped(launcher: LocalLauncher) -> None:
    """Every process the launcher started has ended (and been reaped: ``poll``)."""
    for name, proc in launcher.processes.items():
        assert proc.poll() is not None, f"{name} still running"


def assert_no_process_of(plan) -> None:
    """No process anywhere (orphans included) still works on this run."""
    left = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and plan.layout.run_dir in " ".join(proc.info["cmdline"] or []):
            left.append(proc)
    assert not left, f"processes left behind: {left}"


def wait_for(predicate, timeout: float, what: str):
    """The predicate's first true value, asked every 0.1 s until ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value
