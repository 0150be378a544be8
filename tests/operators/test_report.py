"""operators/report.py: what each run produced, for the training-runs page and the CLI: how Airflow's runs and
the run directories are joined (series per backfill experiment, durations, the gate's checks, the current baseline,
live progress, a task's metrics and directions), curves, warm starts. The page itself is driven in Chromium on a live
Airflow in tests/live/test_live_airflow.py, and on a binary task's runs in web/test_runs_page_browser.py; the API
that serves these records: web/test_api.py; `tfdist runs` and `tfdist models`: test_cli.py."""

from __future__ import annotations

import os
import time

import pytest

from tests.contract.test_train_records import train_result, warm_start_record
from tests.publishing.test_data_gate import COUNTRIES, LABELS, as_read, classes, settings, tabular
from tests.support.specs import make_spec
from tfdist.contract.data_records import BaselineRef, DataValidation
from tfdist.contract.layout import RunLayout, run_key
from tfdist.contract.progress import CurveWrite, TrainProgress, curve_line
from tfdist.contract.records import write_record
from tfdist.contract.train_records import CurvePoint
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.report import (
    AirflowRun,
    Backfill,
    Progress,
    curve,
    data_validation,
    format_runs,
    list_runs,
    overview,
    progress,
)
from tfdist.publishing import data_gate, registry
from tfdist.publishing.gate import checks, failures
from tfdist.spec.validation import ChangeThreshold, Threshold

DAG = "digits"
THRESHOLDS = {"accuracy": {"lower": 0.9, "upper": None}}
CHANGE = {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}}


def rules_of(thresholds: dict, change: dict) -> tuple[dict[str, Threshold], dict[str, ChangeThreshold]]:
    """The gate's rules as the spec gives them, from their JSON."""
    return (
        {m: Threshold.model_validate(t) for m, t in thresholds.items()},
        {m: ChangeThreshold.model_validate(c) for m, c in change.items()},
    )


def spec_json(root: str, task: dict) -> dict:
    """A run's spec.json whose label has the task and whose model the metrics of ``task`` ({task, metrics})."""
    first = task["metrics"][0]
    spec = make_spec(root, model={"metrics": task["metrics"]}, validation={"thresholds": {first: {"lower": 0.5}}})
    spec["data"]["label"] = {"name": "y", "task": task["task"]} | ({"positive": 1} if task["task"] == "binary" else {})
    return spec


def write_run(
    root: str,
    key: str,
    run_id: str,
    end: str,
    accuracy: float | None,
    version: int | None = None,
    baseline: dict | None = None,
    with_checks: bool = True,
    warm_start: dict | None = None,
    lineage: dict | None = None,
    metrics: dict | None = None,
    task: dict | None = None,
) -> RunLayout:
    """A run directory as the stages leave it (run record, train result, blessing, export result); ``warm_start``
    (what the train result keeps of it) into the chief's warm-start record, ``lineage`` (parent, warm_start) into the
    published version's metadata; ``metrics`` (default: accuracy and loss) the evaluation's, ``task`` the spec's
    label task and metrics ({task, metrics}) in its spec.json (none without)."""
    layout = RunLayout(os.path.join(root, DAG, "runs", key))
    write_json_atomic(
        layout.run_file,
        {
            "run_id": run_id,
            "data_interval_start": end.replace("17", "16"),
            "data_interval_end": end,
            "overrides": {"training.epochs": 8},
        },
    )
    if task:
        write_json_atomic(layout.spec_file, spec_json(root, task))
    if accuracy is None:
        return layout
    write_record(layout.result("train"), train_result(final_step=180, examples_per_sec=9000.0, train_seconds=20))
    if warm_start:
        write_warm_start(layout, warm_start)
    thresholds, change = (THRESHOLDS, CHANGE) if metrics is None else ({"auc": {"lower": 0.7, "upper": None}}, {})
    metrics = metrics or {"accuracy": accuracy, "loss": 0.1}
    rules = rules_of(thresholds, change)
    rows = checks(metrics, *rules, baseline and baseline["metrics"])
    blessing = {
        "blessed": not failures(rows),
        "run_id": run_id,
        "checkpoint": os.path.join(layout.checkpoint_dir, "ckpt-180"),
        "gate": "value thresholds",
        "metrics": metrics,
        "thresholds": thresholds,
        "change_thresholds": change,
        "baseline": baseline and {"path": f"/models/digits/{baseline['version']}", "run_id": "earlier", **baseline},
        "failures": failures(rows),
        "report": ["validated"],
    }
    dumped = [row.model_dump(mode="json") for row in rows]
    write_json_atomic(layout.blessing_file, blessing | ({"checks": dumped} if with_checks else {}))
    if version:
        path = os.path.join(root, "models", "digits", str(version))
        write_json_atomic(
            layout.result("export"), {"version": version, "path": path, "model_name": "digits", "metrics": metrics}
        )
        write_json_atomic(
            registry.metadata_file(path),
            {"version": version, "run_id": run_id, "data_interval_end": end, "metrics": metrics, **(lineage or {})},
        )
    return layout


def test_airflow_runs_and_run_directories_are_joined_for_the_page(tmp_path):
    root = str(tmp_path)
    write_run(root, "scheduled__2026-11-17", "scheduled__2026-11-17", "2026-11-17T00:00:00+00:00", 0.95, 1)
    # an older blessing.json without its checks: they are derived from its thresholds and baseline
    write_run(
        root,
        "backfill__2026-11-18",
        "backfill__2026-11-18",
        "2026-11-18T00:00:00+00:00",
        0.93,
        2,
        baseline={"version": 1, "metrics": {"accuracy": 0.95, "loss": 0.1}},
        with_checks=False,
    )
    running = write_run(root, "manual__now", "manual__now", "2026-11-19T00:00:00+00:00", None)
    progress_record = TrainProgress(
        step=100,
        total_steps=400,
        epoch=1.25,
        epochs=5,
        loss=0.4,
        metrics={"accuracy": 0.8},
        examples_per_sec=6400.0,
        workers=2,
        global_batch_size=64,
        elapsed_seconds=3.0,
        updated_at=time.time(),
    )
    write_record(running.progress_file, progress_record)
    airflow_runs = {
        "scheduled__2026-11-17": AirflowRun(
            "scheduled", "success", None, None, "2026-11-24T10:00:00+00:00", "2026-11-24T10:01:07+00:00"
        ),
        "backfill__2026-11-18": AirflowRun(
            "backfill", "success", None, None, "2026-11-24T11:00:00+00:00", "2026-11-24T11:00:30+00:00", backfill_id=3
        ),
        "manual__now": AirflowRun("manual", "running", None, None, "2026-11-24T12:00:00+00:00", None),
        "queued__later": AirflowRun(
            "manual", "queued", "2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00", None, None
        ),
    }
    backfills = {3: Backfill(3, "2026-11-18T00:00:00+00:00", "2026-11-18T00:00:00+00:00", {"training.epochs": 8})}

    page = overview(DAG, [root], [os.path.join(root, "models", "digits")], airflow_runs, backfills).model_dump()

    runs = {r["run_id"]: r for r in page["runs"]}
    assert [r["run_id"] for r in page["runs"]] == [
        "queued__later",
        "manual__now",
        "backfill__2026-11-18",
        "scheduled__2026-11-17",
    ]  # newest data interval first
    assert runs["backfill__2026-11-18"]["series"] == "backfill 3"
    assert runs["backfill__2026-11-18"]["series_label"] == "backfill 3: 2026-11-18 → 2026-11-18, training.epochs=8"
    assert runs["scheduled__2026-11-17"]["series"] == "scheduled"
    assert runs["scheduled__2026-11-17"]["duration_seconds"] == 67.0
    # the change check: 0.93 against the baseline's 0.95 misses the allowed 0.01 by 0.01
    value, change = runs["backfill__2026-11-18"]["checks"]
    assert (value["rule"], value["passed"]) == ("≥ 0.9", True)
    assert (change["rule"], round(change["delta"], 4), round(change["margin"], 4), change["passed"]) == (
        "≥ baseline − 0.01",
        -0.02,
        -0.01,
        False,
    )
    assert runs["backfill__2026-11-18"]["baseline"] == {"version": 1, "metrics": {"accuracy": 0.95, "loss": 0.1}}
    live = runs["manual__now"]["progress"]
    assert live["record"]["step"] == 100 and (live["seconds_left"], live["finished"]) == (3.0, False)  # 300 × 64 / 6400
    assert runs["queued__later"]["metrics"] is None and runs["queued__later"]["data_interval_end"].startswith(
        "2026-11-21"
    )
    assert page["metrics"] == ["accuracy", "loss"] and page["thresholds"] == THRESHOLDS
    assert [(v["version"], v["baseline"]) for v in page["versions"]] == [(2, True), (1, False)]


def test_run_directories_written_under_the_old_run_key_are_still_listed(tmp_path):
    """Before 0.2.0 a run's directory was its run id with unsafe characters replaced: such directories are
    found by their run record, not by their name."""
    old = "scheduled__2026-11-17T00_00_00_00_00"
    write_run(str(tmp_path), old, "scheduled__2026-11-17T00:00:00+00:00", "2026-11-17T00:00:00+00:00", 0.95, 1)
    new = write_run(str(tmp_path), run_key("manual__x"), "manual__x", "2026-11-18T00:00:00+00:00", 0.96, 2)
    listed = {r.run_id: r.run_dir for r in list_runs(DAG, [str(tmp_path)])}
    assert listed == {
        "scheduled__2026-11-17T00:00:00+00:00": os.path.join(tmp_path, DAG, "runs", old),
        "manual__x": new.run_dir,
    }


NO_BASELINE = "no baseline: nothing published as of this data interval"


def write_warm_start(layout: RunLayout, summary: dict) -> None:
    """The chief's warm-start record, as it writes it when training starts, of which ``summary`` is the part kept."""
    write_record(
        layout.warm_start_file,
        warm_start_record(
            summary["parent_version"],
            summary["cold_start"],
            parent_run_id=summary["parent_run_id"],
            parent_final=summary["parent_final"],
        ),
    )


MISMATCH = "variables do not match: dense/kernel (64, 32) in the checkpoint, (64, 64) in the model"


def write_lineage(root: str) -> str:
    """Versions 1 to 4 of one model and their runs: 1 from before the warm-start record, 2 started cold (its
    variables did not match its baseline's), 3 warm from 2, 4 warm from 3; returns the model directory."""
    for version, parent, cold_start in ((1, None, None), (2, None, MISMATCH), (3, 2, None), (4, 3, None)):
        run_id, end = f"scheduled__2026-11-1{version}", f"2026-11-1{version}T00:00:00+00:00"
        start = {
            "parent_version": parent,
            "parent_run_id": parent and f"scheduled__2026-11-1{parent}",
            "cold_start": cold_start,
            "parent_final": parent and {"loss": 0.2, "accuracy": 0.95},
        }
        published = {
            "parent": parent and {"version": parent, "run_id": start["parent_run_id"]},
            "warm_start": {"from": "baseline", "cold_start": cold_start, "mismatched": []},
        }
        write_run(
            root,
            run_id,
            run_id,
            end,
            0.95,
            version,
            warm_start=version > 1 and start,
            lineage=version > 1 and published,
        )
    return os.path.join(root, "models", "digits")


def test_a_runs_training_curve_by_step_and_its_parents_final_values(tmp_path):
    layout = write_run(str(tmp_path), "manual__warm", "manual__warm", "2026-11-18T00:00:00+00:00", None)
    assert curve(layout.run_dir) is None  # not a step trained yet
    points = [
        {
            "step": step,
            "loss": loss,
            "accuracy": round(1 - loss / 3, 4),
            "examples_per_sec": 8000.0,
            "learning_rate": 0.003,
        }
        for step, loss in ((0, 2.3), (20, 0.9), (40, 0.5), (40, 0.45), (60, 0.3))  # from step 40 again: resumed
    ]
    CurveWrite(layout.curve_file, b"".join(curve_line(CurvePoint.model_validate(p)) for p in points))()
    with open(layout.curve_file, "a") as f:
        f.write('{"step": 80, "loss": 0.2')  # the chief died while writing

    before = curve(layout.run_dir).model_dump()  # a run older than the warm-start record: no parent known
    assert [(p["step"], p["loss"]) for p in before["points"]] == [(0, 2.3), (20, 0.9), (40, 0.45), (60, 0.3)]
    assert tuple(before["points"][0]) == ("step", "loss", "accuracy", "examples_per_sec", "learning_rate")
    assert (before["parent_version"], before["parent_final"]) == (None, None)
    write_warm_start(
        layout,
        {
            "parent_version": 3,
            "parent_run_id": "scheduled__2026-11-13",
            "cold_start": None,
            "parent_final": {"loss": 0.21, "accuracy": 0.94},
        },
    )
    training = curve(layout.run_dir).model_dump()  # known while it trains: the chief's record as training starts
    assert (training["parent_version"], training["parent_final"]) == (3, {"loss": 0.21, "accuracy": 0.94})
    assert training["points"] == before["points"]


def test_each_run_and_version_says_how_it_started_warm_from_its_parent_or_cold_and_why(tmp_path):
    model_dir = write_lineage(str(tmp_path))
    runs = {r.run_id[-2:]: r.model_dump() for r in list_runs(DAG, [str(tmp_path)])}
    assert [
        (runs[d]["parent_version"], runs[d]["parent_run_id"], runs[d]["cold_start"]) for d in ("11", "12", "13")
    ] == [(None, None, None), (None, None, MISMATCH), (2, "scheduled__2026-11-12", None)]

    page = overview(DAG, [str(tmp_path)], [model_dir], {}, {}).model_dump()
    versions = {v["version"]: v for v in page["versions"]}
    assert [(v, versions[v]["parent"], versions[v]["cold_start"]) for v in (1, 2, 3, 4)] == [
        (1, None, None),
        (2, None, MISMATCH),
        (3, 2, None),
        (4, 3, None),
    ]
    # the page follows the parents for a version's lineage (4 ← 3 ← 2, cold start): what the registry says
    chain, version = [], 4
    while version in versions:
        chain.append(version)
        version = versions[version]["parent"]
    assert chain == [m.version for m in registry.lineage(model_dir, 4)] == [4, 3, 2]

    table = format_runs(list_runs(DAG, [str(tmp_path)])).splitlines()
    column = table[0].index("parent")
    assert [row[column:].split("  ")[0] for row in table[1:]] == ["v3", "v2", "cold: variables do not match", "-"]


BINARY = {"task": "binary", "metrics": ["auc", "accuracy", "calibration"]}


def write_binary_runs(root: str) -> tuple[RunLayout, RunLayout]:
    """Two runs of a binary task: the first published as version 1, the second compared with it."""
    first = {"loss": 0.45, "calibration": 1.02, "accuracy": 0.75, "auc": 0.8}  # not in the spec's order
    end = "2026-11-1{}T00:00:00+00:00"
    one = write_run(root, "scheduled__1", "scheduled__1", end.format(7), 0.75, 1, metrics=first, task=BINARY)
    baseline = {"version": 1, "metrics": first}
    second = {"loss": 0.43, "calibration": 0.97, "accuracy": 0.74, "auc": 0.82}
    two = write_run(root, "scheduled__2", "scheduled__2", end.format(8), 0.74, 2, baseline, metrics=second, task=BINARY)
    return one, two


def write_data_gate(layout: RunLayout, mode: str = "warn") -> dict:
    """The data gate's record of a day whose country shares moved and that brought two countries the baseline's
    vocabulary lacks, a new feature (city), and a positive rate up from 0.3 to 0.4."""
    base = tabular(classes(LABELS, ["no", "yes"], "binary"), country=COUNTRIES)
    moved = ["DE"] * 45 + ["FR"] * 20 + ["US"] * 15 + ["IT"] * 12 + ["PL"] * 5 + ["CZ"] * 3
    now = tabular(classes(LABELS[10:] + ["yes"] * 10, ["no", "yes"], "binary"), country=moved + [None] * 2, city=moved)
    vocabularies, rules = {"country": ["DE", "FR", "US", "IT", "ES"]}, settings(mode=mode)
    now_read, base_read = as_read(now), as_read(base)
    rows = data_gate.checks(now_read, base_read, rules, vocabularies)
    failed = {m: [data_gate.failure_line(r) for r in rows if not r.passed and r.mode == m] for m in ("refuse", "warn")}
    record = DataValidation(
        decision="refused" if failed["refuse"] else "passed",
        run_id=os.path.basename(layout.run_dir),
        data_interval_end=None,
        baseline=BaselineRef(version=1, run_id="scheduled__1", path="/models/churn/1"),
        baseline_version=1,
        compared=True,
        why_not_compared=None,
        not_compared=data_gate.not_compared(now_read, base_read, vocabularies),
        settings=rules.model_dump(mode="json"),
        formulas=data_gate.FORMULAS,
        checks=rows,
        checks_run=len(rows),
        failed=sum(not r.passed for r in rows),
        refused=failed["refuse"],
        warned=failed["warn"],
        statistics=now_read,
        baseline_statistics=base_read,
    )
    write_record(os.path.join(layout.data_validation_dir, data_gate.DATA_VALIDATION), record)
    return record.payload()


def test_the_data_route_answers_the_data_gate_record_in_the_shape_of_its_file(tmp_path):
    """The route's response_model (DataValidation) serializes the record as validate_data wrote it: the page reads
    the file's shape (a categorical check's top_value, a numeric one without)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    layout = RunLayout(str(tmp_path))
    write_data_gate(layout)
    app = FastAPI()
    app.get("/data", response_model=DataValidation)(lambda: data_validation(layout.run_dir))
    answered = TestClient(app).get("/data").json()
    assert answered == read_json(os.path.join(layout.data_validation_dir, data_gate.DATA_VALIDATION))
    assert {"top_value" in row for row in answered["checks"]} == {True, False}


def test_a_tasks_metrics_come_in_its_specs_order_then_the_loss_each_with_its_direction(tmp_path):
    write_binary_runs(str(tmp_path))
    write_run(
        str(tmp_path),
        "manual__x",
        "manual__x",
        "2026-11-19T00:00:00+00:00",
        0.7,
        metrics={"auc": 0.7, "pr_auc": 0.6},
        task=BINARY,
    )
    page = overview(DAG, [str(tmp_path)], [], {}, {}).model_dump()
    assert page["metrics"] == ["auc", "accuracy", "calibration", "loss"]  # pr_auc: not a metric of the spec
    assert page["directions"] == {
        "auc": "higher_is_better",
        "accuracy": "higher_is_better",
        "calibration": None,  # best at 1: neither
        "loss": "lower_is_better",
    }
    assert {r["task"] for r in page["runs"]} == {"binary"}


def test_live_progress_holds_the_train_metrics_and_a_record_from_before_them_its_accuracy(tmp_path):
    layout = RunLayout(str(tmp_path))
    record = {"step": 10, "total_steps": 40, "epoch": 0.5, "epochs": 2, "loss": 0.6, "examples_per_sec": 640.0}
    record |= {"workers": 2, "global_batch_size": 64, "elapsed_seconds": 1.0, "updated_at": time.time()}
    write_json_atomic(layout.progress_file, record | {"metrics": {"accuracy": 0.7, "auc": 0.75}})  # docs/tabular.md
    live = progress(layout.run_dir).model_dump()
    assert live["record"]["metrics"] == {"accuracy": 0.7, "auc": 0.75}
    assert (live["seconds_left"], live["finished"]) == (3.0, False)
    write_json_atomic(layout.progress_file, record | {"accuracy": 0.8})  # written before the train metrics
    live = progress(layout.run_dir).model_dump()
    assert live["record"]["metrics"] == {"accuracy": 0.8} and "accuracy" not in live["record"]
    assert not set(Progress.model_fields) & set(TrainProgress.model_fields)  # the record's fields in it alone


def test_a_metrics_direction_is_the_same_in_every_task_that_has_it():
    from tfdist.operators.report import metric_direction

    assert (metric_direction("accuracy"), metric_direction("loss")) == ("higher_is_better", "lower_is_better")
    assert metric_direction("rmse") == "lower_is_better"
    assert metric_direction("calibration") is None and metric_direction("no_such_metric") is None


def test_a_runs_task_and_metrics_come_from_its_spec_and_a_spec_from_before_tasks_is_multiclass(tmp_path):
    from tfdist.operators.report import run_spec, task_metrics
    from tfdist.spec import SpecError

    layout = RunLayout(str(tmp_path / "run"))
    assert run_spec(layout) is None and task_metrics(None) == (None, [])
    spec = make_spec(str(tmp_path))  # its label names no task, as a release before tasks wrote it
    write_json_atomic(layout.spec_file, spec)
    task, metrics = task_metrics(run_spec(layout))
    assert task == "multiclass" and "accuracy" in metrics
    spec["data"]["label"] = {"name": "label", "task": "binary", "positive": 1}
    spec["model"]["metrics"] = ["auc"]
    spec["validation"] = {"thresholds": {"auc": {"lower": 0.9}}}
    write_json_atomic(layout.spec_file, spec)
    assert task_metrics(run_spec(layout)) == ("binary", ["auc"])
    write_json_atomic(layout.spec_file, {**spec, "model": {**spec["model"], "metrics": "auc"}})
    with pytest.raises(SpecError, match=r"model\.metrics"):  # a malformed spec.json names its field
        run_spec(layout)


def test_how_a_run_started_in_words_long_and_short():
    from tfdist.operators.report import started_from

    assert (started_from(3, None), started_from(3, None, short=True)) == ("warm start from v3", "v3")
    assert started_from(None, MISMATCH) == f"cold start: {MISMATCH}"
    assert started_from(None, MISMATCH, short=True) == "cold: variables do not match"
    assert started_from(None, None) == started_from(None, None, short=True) == "-"


def test_a_run_directory_without_records_has_no_progress_curve_or_data_gate_and_lists_without_them(tmp_path):
    assert progress(str(tmp_path)) is None and curve(str(tmp_path)) is None and data_validation(str(tmp_path)) is None
    assert list_runs(DAG, [str(tmp_path / "absent")]) == []
    assert format_runs([]).split() == ["run", "window", "overrides", "data", "parent", "loss", "gate", "version"]


def test_what_tf_serving_serves_after_a_withdrawal_or_restore_in_words(tmp_path):
    from tfdist.operators.report import now_served

    assert now_served(str(tmp_path / "digits"), 7) == "TF Serving now serves version 7, the newest published one"
    assert now_served(str(tmp_path / "digits"), None).startswith("no published version of digits is left")
