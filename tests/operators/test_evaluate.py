"""operators/evaluate.py: the gate's decision is explicit: blessed → XCom; not → fail without a retry, or skip."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from tests.support.plans import plan_for
from tests.support.specs import make_spec
from tfdist.contract.publish_records import EvaluateResult
from tfdist.operators.evaluate import EvaluateOperator


def result(blessed: bool) -> dict:
    """evaluate's result record, as the stage writes it."""
    failures = [] if blessed else ["accuracy 0.5 is below its lower bound 0.9"]
    return EvaluateResult(
        blessed=blessed,
        gate="thresholds",
        run_id="manual__1",
        checkpoint="ckpt-40",
        step=40,
        eval_examples=360,
        metrics={"accuracy": 0.95 if blessed else 0.5},
        deltas={},
        failures=failures,
        baseline_version=None,
    ).payload()


def test_a_blessed_model_is_the_tasks_xcom_value(tmp_path):
    plan = plan_for(str(tmp_path), "manual__1")
    task = EvaluateOperator(task_id="evaluate", spec=make_spec(str(tmp_path)))
    assert task.return_value(result(True), plan, {}) == result(True)


@pytest.mark.parametrize("on_failure, raised", [("fail", AirflowFailException), ("skip", AirflowSkipException)])
def test_a_model_not_blessed_ends_the_task_as_the_spec_says_naming_the_failures(tmp_path, on_failure, raised):
    sections = {"validation": {"thresholds": {"accuracy": {"lower": 0.9}}, "on_failure": on_failure}}
    plan = plan_for(str(tmp_path), "manual__1", **sections)
    task = EvaluateOperator(task_id="evaluate", spec=make_spec(str(tmp_path), **sections))
    with pytest.raises(raised, match=r"model not blessed: accuracy 0\.5 is below its lower bound 0\.9"):
        task.return_value(result(False), plan, {})
