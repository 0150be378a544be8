"""The data gate end to end on real Airflow (``airflow dags test``, consecutive dates of one pipeline): the
first day publishes; a breakage of the next day, made from the example digits data, is refused at validate_data
naming the feature and the statistic, with nothing trained; so is each other breakage by the prepare and
validate_data stages themselves (the same processes, through the local launcher); an ordinary day passes; in
warn mode a drifted day goes through and is recorded."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.publishing.versions import published_metadata
from tests.support.dags import dags_folder
from tests.support.logs import collecting_logger
from tests.support.plans import plan_for, run
from tests.support.specs import make_spec
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import RunLayout, run_path
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import airflow_dags_test, write_digits_partitions
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry
from tfdist.publishing.data_gate import DATA_VALIDATION

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
FIRST = dt.date(2026, 11, 10)
AFTER_THE_GATE = "train|evaluate|export"
"""The tasks a day that only checks the gate's decision marks successful without running."""


def broken(path: str, how: str) -> None:
    """The day's digits partition, broken as named."""
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    header = open(path).readline().strip()
    if how == "constant":
        table[:, 20] = 5
    elif how == "scaled":
        table[:, 20] *= 10
    elif how == "class_removed":
        table = table[table[:, -1] != 3]
    elif how == "tenth_of_rows":
        table = table[::10]
    elif how == "columns_swapped":
        table[:, [5, 30]] = table[:, [30, 5]]
    np.savetxt(path, table, fmt="%g", delimiter=",", header=header, comments="")


BREAKAGES = {
    "constant": "constant: pixel[20] share of rows off the most common value 0",
    "scaled": "drift: pixel[20] Jensen–Shannon divergence",
    "class_removed": "labels: class 3 rows of the class 0",
    "tenth_of_rows": "rows: rows rows over the baseline's",
    "columns_swapped": "drift: pixel[5] Jensen–Shannon divergence",
}


def gate_spec(root: str, name: str) -> dict:
    """A pipeline of the data gate tests: its model is the same for every name, published without thresholds, trained
    by one process (the gate is before training)."""
    spec = make_spec(
        root,
        name=name,
        training={"epochs": 2, "num_workers": 1},
        validation={"thresholds": {}},
        export={"model_name": "data_gate"},
    )
    spec["validation"]["allow_unvalidated"] = True
    return spec


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    """Two DAGs on one artifact root and one model: refusing (the defaults) and warning."""
    root, dags = str(tmp_path_factory.mktemp("data_gate")), tmp_path_factory.mktemp("data_gate_dags")
    specs = [gate_spec(root, "data_gate"), gate_spec(root, "data_gate_warn")]
    specs[1]["data"] = {**specs[1]["data"], "checks": {"mode": "warn"}}
    with dags_folder(dags, specs, "Airflow DAGs of the data gate tests."):
        yield root


def partition(root: str, day: dt.date, how: str | None) -> None:
    """``day``'s digits partition, broken as ``how`` says."""
    (path,) = write_digits_partitions(os.path.join(root, "raw", "digits"), day, 1)
    if how:
        broken(path, how)


def day_run(root: str, dag_id: str, day: dt.date, how: str | None, logs, skip: str | None = None) -> tuple:
    """One DAG run on ``day``'s partition (broken as ``how`` says; the tasks matching ``skip`` not run): its
    outcome, task states and log."""
    partition(root, day, how)
    # a manual run's data interval is the day before its logical date
    outcome = airflow_dags_test(
        dag_id, day + dt.timedelta(days=1), str(logs / f"{dag_id}-{day}.log"), echo=False, skip=skip
    )
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run(
        [airflow, "tasks", "states-for-dag-run", dag_id, outcome.run_id, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = {row["task_id"]: row["state"] for row in json.loads(out[out.index("[") :])}
    return outcome, states, open(outcome.log_path).read()


def stage_refusal(root: str, day: dt.date, how: str) -> tuple[str, RunLayout]:
    """``day``'s partition broken as ``how`` says, prepared and refused by validate_data (EXIT_REFUSED) through
    the local launcher: the stage's log and the run's layout."""
    partition(root, day, how)
    plan = plan_for(root, f"gate_{how}", day, **gate_spec(root, "data_gate"))
    run(plan, "prepare_data")
    logger, lines = collecting_logger(f"gate_{how}")
    with pytest.raises(StageFailed) as refused:
        LocalLauncher(plan).run(plan.stage("validate_data"), logger)
    assert refused.value.returncode == EXIT_REFUSED, how
    return "\n".join(lines.lines), plan.layout


def test_each_breakage_is_refused_before_training_and_an_ordinary_day_passes(pipelines, tmp_path):
    root = pipelines
    outcome, states, log = day_run(root, "data_gate", FIRST, None, tmp_path)
    assert outcome.state == "success", log[-4000:]
    assert "no baseline: nothing published as of this data interval" in log
    (first,) = published_metadata(os.path.join(root, "models", "data_gate"))
    assert os.path.exists(os.path.join(first["path"], registry.DATA_STATISTICS))
    for n, (how, named) in enumerate(BREAKAGES.items(), start=1):
        day = FIRST + dt.timedelta(days=n)
        if n == 1:  # through Airflow: the task states
            outcome, states, log = day_run(root, "data_gate", day, how, tmp_path)
            assert (states["validate_data"], states["train"]) == ("failed", "upstream_failed"), (how, states)
            layout = RunLayout(run_path(root, "data_gate", outcome.run_id))
        else:
            log, layout = stage_refusal(root, day, how)
        assert "the data gate refused this run's data, nothing was trained" in log and named in log, (how, log[-3000:])
        assert not os.path.exists(layout.checkpoint_dir), how
        record = read_json(os.path.join(layout.data_validation_dir, DATA_VALIDATION))
        assert record["decision"] == "refused" and record["baseline_version"] == first["version"], how
        assert "JS(P, Q)" in record["formulas"]["drift"] and record["baseline_statistics"]["features"]
    outcome, states, log = day_run(root, "data_gate", FIRST + dt.timedelta(days=6), None, tmp_path, AFTER_THE_GATE)
    assert outcome.state == "success" and "data gate passed" in log, log[-4000:]


def test_in_warn_mode_a_drifted_day_goes_through_and_is_recorded(pipelines, tmp_path):
    root = pipelines
    if not registry.versions(os.path.join(root, "models", "data_gate")):  # a baseline (when run alone)
        assert day_run(root, "data_gate", FIRST, None, tmp_path)[0].state == "success"
    outcome, _states, log = day_run(
        root, "data_gate_warn", FIRST + dt.timedelta(days=8), "scaled", tmp_path, AFTER_THE_GATE
    )
    assert outcome.state == "success", log[-4000:]
    assert "WARNING (data.checks mode warn): drift: pixel[20] Jensen–Shannon divergence" in log
    record = read_json(
        os.path.join(RunLayout(run_path(root, "data_gate_warn", outcome.run_id)).data_validation_dir, DATA_VALIDATION)
    )
    assert record["decision"] == "passed" and any(line.startswith("drift: pixel[20]") for line in record["warned"])
