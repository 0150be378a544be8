"""A run whose data interval ends after the run was created is refused by its first task, for good, before
anything is written: through the operator, and on real Airflow (``airflow dags test`` with a future logical date,
a run Airflow creates now). The pure rule is tabled in tests/operators/plan/test_windows.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import types

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.support.dags import dags_folder, task_instance
from tests.support.specs import make_spec
from tfdist.operators.dag import build_dag
from tfdist.operators.demo import airflow_dags_test
from tfdist.publishing import registry

DAG_ID = "future_nightly"


def test_the_first_task_refuses_a_future_interval_before_writing_anything(tmp_path):
    prepare = build_dag(make_spec(str(tmp_path), name=DAG_ID)).get_task("prepare_data")
    now = dt.datetime.now(dt.UTC)
    context = {
        "run_id": "manual__future",
        "data_interval_start": now + dt.timedelta(days=365),
        "data_interval_end": now + dt.timedelta(days=366),
        "dag_run": types.SimpleNamespace(conf={}, run_after=now),
        "ti": task_instance(DAG_ID, "manual__future"),
    }
    with pytest.raises(AirflowFailException, match=r"data_interval_end .* is later than the run's creation"):
        prepare.execute(context)
    assert os.listdir(tmp_path) == []  # no run directory, no run.json, nothing published


@pytest.mark.e2e
def test_airflow_runs_a_future_logical_date_and_its_first_task_fails_without_retry(tmp_path):
    root = tmp_path / "artifacts"
    spec = make_spec(str(root), name=DAG_ID, export={"model_name": DAG_ID})
    with dags_folder(tmp_path / "dags", [spec], "The Airflow DAG of the future interval test."):
        future = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=365)
        outcome = airflow_dags_test(DAG_ID, future, str(tmp_path / "dags-test.log"), echo=False)
        states = task_states(outcome.run_id)
    log = open(outcome.log_path).read()
    assert outcome.state == "failed", log[-4000:]
    assert (states["prepare_data"], states["train"]) == ("failed", "upstream_failed"), states
    assert "new_state=failed" in log and "up_for_retry" not in log  # failed for good, no retry
    assert f"data_interval_end {future.isoformat()}T00:00:00+00:00 (its data interval) is later than" in log
    assert not root.exists() or os.listdir(root) == []  # no run directory, no run.json
    assert registry.versions(os.path.join(root, "models", DAG_ID)) == []


def task_states(run_id: str) -> dict[str, str]:
    """The state of each task of the run, as Airflow recorded it."""
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run(
        [airflow, "tasks", "states-for-dag-run", DAG_ID, run_id, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {row["task_id"]: row["state"] for row in json.loads(out[out.index("[") :])}
