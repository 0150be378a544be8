"""The Kubernetes launcher, the only place that knows Kubernetes.

``objects`` builds a stage's objects (pure functions, no client) · ``api`` the kinds and the API calls ·
``follow`` follows a stage (watches, log streams) · ``diagnosis`` tells how its pods ended · ``trigger``
defers to the triggerer · ``launcher`` realizes a stage.

``KubernetesLauncher`` and ``StageTrigger`` are loaded lazily, so that ``objects`` imports without a client.
A trigger is stored by the path ``tfdist.operators.launchers.kubernetes.StageTrigger`` (as tfdist 0.2.0 stored
it), so a task deferred under any version resumes after an upgrade."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"KubernetesLauncher": "launcher", "STORE_KEY": "launcher", "StageTrigger": "trigger"}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
