"""operators/outcomes.py: a stage that refused ends its task without a retry; a lost or failed one is retried."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tfdist.contract.launch import EXIT_REFUSED
from tfdist.operators.outcomes import StageFailedRetryable, StageLost, StageRefused, stage_outcome


def test_a_refused_exit_fails_the_task_without_a_retry_even_with_members_lost():
    outcome = stage_outcome("train", EXIT_REFUSED, "the data gate refused", ["worker-1"])
    assert type(outcome) is StageRefused and isinstance(outcome, AirflowFailException)
    assert str(outcome) == "train refused: the data gate refused"


def test_lost_members_are_named_and_retried():
    outcome = stage_outcome("train", -9, "killed", ("worker-0", "ps-1"))
    assert type(outcome) is StageLost and not isinstance(outcome, AirflowFailException)
    assert str(outcome) == "train lost worker-0, ps-1: killed"


@pytest.mark.parametrize("returncode", [1, None])
def test_any_other_end_is_a_failure_the_retries_run_again(returncode):
    outcome = stage_outcome("evaluate", returncode, "exit 1")
    assert type(outcome) is StageFailedRetryable and not isinstance(outcome, AirflowFailException)
    assert str(outcome) == "evaluate failed: exit 1"
