"""Launchers start a stage's processes, stream their prefixed logs, wait, and stop them all on failure or kill."""

from __future__ import annotations

from tfdist.operators.launchers.base import Launcher, StageFailed, StageStopped
from tfdist.operators.plan import Plan


def get_launcher(plan: Plan, try_number: int = 1) -> Launcher:
    """The launcher the plan names, for one try of a stage of the run."""
    if plan.launcher == "kubernetes":
        from tfdist.operators.launchers.kubernetes import KubernetesLauncher

        return KubernetesLauncher(plan, try_number)
    from tfdist.operators.launchers.local import LocalLauncher

    return LocalLauncher(plan, try_number)


__all__ = ["Launcher", "StageFailed", "StageStopped", "get_launcher"]
