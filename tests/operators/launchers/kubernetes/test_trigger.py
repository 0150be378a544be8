"""operators/launchers/kubernetes/trigger.py: the trigger a deferred stage is stored as, and resumed from."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.module_loading import import_string

from tests.operators.launchers.kubernetes.test_api import train_watch
from tfdist.contract.records import MalformedRecord
from tfdist.operators.launchers.base import ElasticRestart, StageEvent, StageFailed
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
    assert kwargs["restarts"] == restarts and rebuilt.restarts == [ElasticRestart.model_validate(restarts[0])]


def test_the_trigger_event_is_one_record_and_one_a_trigger_of_0_2_0_reported_still_reads():
    """The TriggerEvent's payload is a StageEvent's JSON: a failure (with the restarts before it) or the result."""
    lost = StageFailed("worker-1", -9, {"worker-1": ["step 40"]}, lost=("worker-1",))
    failed = StageEvent.failed(lost, [ElasticRestart(restart=1, lost=["worker-2"], why="worker-2 was evicted")])
    payload = failed.payload()
    assert json.loads(json.dumps(payload)) == payload and StageEvent.parse(payload, "the event") == failed
    assert (payload["summary"], payload["lost"], payload["returncode"]) == (
        "worker-1 was killed by signal 9",
        ["worker-1"],
        -9,
    )
    reported = {
        "status": "failed",
        "returncode": -9,
        "message": "m",
        "summary": "s",
        "lost": ["worker-1"],
        "restarts": [],
    }
    assert StageEvent.parse(reported, "the event").lost == ["worker-1"]  # as 0.2.0's trigger reported it
    restart = {"restart": 1, "lost": ["worker-2"], "why": "worker-2 was evicted", "workers_before": 2}
    succeeded = StageEvent.succeeded({"final_step": 5}, [ElasticRestart.model_validate(restart)])
    reported = {"status": "success", "result": {"final_step": 5, "elastic_restarts": [restart]}}
    assert StageEvent.parse(reported, "the event") == succeeded
    with pytest.raises(MalformedRecord) as raised:
        StageEvent.parse({**reported, "status": "lost"}, "the event")
    assert (raised.value.source, raised.value.field) == ("the event", "status")
