"""Launchers start a stage's processes, stream their prefixed logs, wait, and stop them all on failure or kill."""

from __future__ import annotations

from operators.launchers.base import Launcher, StageFailed, StageStopped


def get_launcher(name: str) -> Launcher:
    if name == "local":
        from operators.launchers.local import LocalLauncher

        return LocalLauncher()
    raise ValueError(f"unknown launcher {name!r}")


__all__ = ["Launcher", "StageFailed", "StageStopped", "get_launcher"]
