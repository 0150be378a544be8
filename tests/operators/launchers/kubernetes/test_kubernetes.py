"""operators/launchers/kubernetes/__init__.py: what the package exports, loaded when asked for (a trigger is stored
by the package's path: test_trigger.py)."""

from __future__ import annotations

import pytest

from tfdist.operators.launchers import kubernetes
from tfdist.operators.launchers.kubernetes import launcher, trigger


def test_the_package_hands_out_the_launcher_its_store_key_and_the_trigger_and_nothing_else():
    assert (kubernetes.KubernetesLauncher, kubernetes.STORE_KEY) == (launcher.KubernetesLauncher, launcher.STORE_KEY)
    assert kubernetes.StageTrigger is trigger.StageTrigger and kubernetes.__all__ == [
        "KubernetesLauncher",
        "STORE_KEY",
        "StageTrigger",
    ]
    with pytest.raises(AttributeError, match="has no attribute 'Watch'"):
        kubernetes.Watch  # noqa: B018
