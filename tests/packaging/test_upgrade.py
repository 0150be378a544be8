"""An upgrade keeps what the last release left behind working: its deferred tasks resume, its records read
(tests/fixtures/records/README.md says how they were made)."""

from __future__ import annotations

import json
import os

import pytest
from airflow._shared.module_loading import import_string  # what the triggerer rebuilds a trigger with

from tests.conftest import REPO

RELEASE = os.path.join(REPO, "tests", "fixtures", "records", "0.2.0")


def deferred_triggers() -> dict[str, dict]:
    with open(os.path.join(RELEASE, "deferred_triggers.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("mode", sorted(deferred_triggers()))
def test_a_train_task_deferred_by_the_last_release_resumes_following_the_same_objects(mode):
    """The triggerer rebuilds a stored trigger from its class path and kwargs: it must take the last release's
    kwargs and follow the same objects (the Watch), storing them again as they were."""
    from tfdist.operators.launchers.kubernetes.api import Watch

    stored = deferred_triggers()[mode]
    trigger = import_string(stored["classpath"])(**stored["kwargs"])
    watch = Watch.from_dict(trigger.watch)
    assert (watch.kind, watch.name, watch.uid) == (
        stored["kwargs"]["watch"]["kind"],
        stored["kwargs"]["watch"]["name"],
        stored["kwargs"]["watch"]["uid"],
    )
    assert watch.selector.endswith("=" + watch.name)
    assert trigger.serialize() == (stored["classpath"], stored["kwargs"])
    assert Watch.from_dict(watch.to_dict()) == watch
