"""operators/launchers/kubernetes/trigger.py: the trigger a deferred stage is stored as, and resumed from."""

from __future__ import annotations

import json

from airflow.sdk.module_loading import import_string

from tests.operators.launchers.kubernetes.test_api import train_watch
from tfdist.operators.launchers.kubernetes.api import Watch
from tfdist.operators.launchers.kubernetes.trigger import StageTrigger


def test_a_trigger_deferred_by_tfdist_0_2_0_still_resumes_after_an_upgrade():
    """A deferred task's trigger is stored by its class path; 0.2.0 stored StageTrigger's at launchers.kubernetes."""
    assert import_string("tfdist.operators.launchers.kubernetes.StageTrigger") is StageTrigger
    assert import_string(StageTrigger({}).serialize()[0]) is StageTrigger


def test_a_serialized_trigger_is_json_and_rebuilds_the_same_trigger_following_the_same_watch():
    watch = train_watch("parameter_server")
    restarts = [{"restart": 1, "lost": ["worker-1"], "why": "worker-1 was evicted", "workers_before": 2}]
    path, kwargs = StageTrigger(watch.to_dict(), restarts).serialize()
    stored = json.loads(json.dumps(kwargs))  # what the triggerer's table holds
    rebuilt = import_string(path)(**stored)
    assert rebuilt.serialize() == (path, kwargs) and Watch.from_dict(rebuilt.watch) == watch
    assert rebuilt.restarts == restarts
