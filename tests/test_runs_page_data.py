"""The training-runs page's data without a browser: how Airflow's runs and the run directories are joined
(series per backfill experiment, durations, the gate's checks, the current baseline, live progress) and
where the links lead. The page itself is driven in Chromium on a live Airflow in tests/test_live_airflow.py."""

from __future__ import annotations

import os
import time

from tfdist.operators.report import AirflowRun, Backfill, list_runs, overview
from tfdist.operators.ui import page_url
from tfdist.trainer.contract import RunLayout, TrainProgress, run_key, write_json_atomic
from tfdist.trainer.contract.gate import checks, failures

DAG = "digits"
THRESHOLDS = {"accuracy": {"lower": 0.9, "upper": None}}
CHANGE = {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}}


def write_run(root: str, key: str, run_id: str, end: str, accuracy: float | None, version: int | None = None,
              baseline: dict | None = None, with_checks: bool = True) -> RunLayout:
    """A run directory as the stages leave it (run record, train result, blessing, export result)."""
    layout = RunLayout(os.path.join(root, DAG, "runs", key))
    write_json_atomic(layout.run_file, {"run_id": run_id, "data_interval_start": end.replace("17", "16"),
                                        "data_interval_end": end, "overrides": {"training.epochs": 8}})
    if accuracy is None:
        return layout
    write_json_atomic(layout.result("train"), {"final_step": 180, "examples_per_sec": 9000.0, "train_seconds": 20})
    metrics = {"accuracy": accuracy, "loss": 0.1}
    rows = checks(metrics, THRESHOLDS, CHANGE, baseline and baseline["metrics"])
    blessing = {"blessed": not failures(rows), "gate": "value thresholds", "metrics": metrics,
                "thresholds": THRESHOLDS, "change_thresholds": CHANGE, "baseline": baseline, "failures": failures(rows),
                "report": ["validated"]}
    write_json_atomic(layout.blessing_file, blessing | ({"checks": rows} if with_checks else {}))
    if version:
        path = os.path.join(root, "models", "digits", str(version))
        write_json_atomic(layout.result("export"), {"version": version, "path": path})
        write_json_atomic(os.path.join(path, "metadata.json"), {"version": version, "run_id": run_id,
                                                                "data_interval_end": end, "metrics": metrics})
    return layout


def test_airflow_runs_and_run_directories_are_joined_for_the_page(tmp_path):
    root = str(tmp_path)
    write_run(root, "scheduled__2026-11-17", "scheduled__2026-11-17", "2026-11-17T00:00:00+00:00", 0.95, 1)
    # an older blessing.json without its checks: they are derived from its thresholds and baseline
    write_run(root, "backfill__2026-11-18", "backfill__2026-11-18", "2026-11-18T00:00:00+00:00", 0.93, 2,
              baseline={"version": 1, "metrics": {"accuracy": 0.95, "loss": 0.1}}, with_checks=False)
    running = write_run(root, "manual__now", "manual__now", "2026-11-19T00:00:00+00:00", None)
    TrainProgress(step=100, total_steps=400, epoch=1.25, epochs=5, loss=0.4, accuracy=0.8, examples_per_sec=6400.0,
                  workers=2, global_batch_size=64, elapsed_seconds=3.0, updated_at=time.time()
                  ).write(running.progress_file)
    airflow_runs = {
        "scheduled__2026-11-17": AirflowRun("scheduled", "success", None, None, "2026-11-24T10:00:00+00:00",
                                            "2026-11-24T10:01:07+00:00"),
        "backfill__2026-11-18": AirflowRun("backfill", "success", None, None, "2026-11-24T11:00:00+00:00",
                                           "2026-11-24T11:00:30+00:00", backfill_id=3),
        "manual__now": AirflowRun("manual", "running", None, None, "2026-11-24T12:00:00+00:00", None),
        "queued__later": AirflowRun("manual", "queued", "2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00",
                                    None, None),
    }
    backfills = {3: Backfill(3, "2026-11-18T00:00:00+00:00", "2026-11-18T00:00:00+00:00", {"training.epochs": 8})}

    page = overview(DAG, [root], [os.path.join(root, "models", "digits")], airflow_runs, backfills)

    runs = {r["run_id"]: r for r in page["runs"]}
    assert [r["run_id"] for r in page["runs"]] == ["queued__later", "manual__now", "backfill__2026-11-18",
                                                   "scheduled__2026-11-17"]  # newest data interval first
    assert runs["backfill__2026-11-18"]["series"] == "backfill 3"
    assert runs["backfill__2026-11-18"]["series_label"] == "backfill 3: 2026-11-18 → 2026-11-18, training.epochs=8"
    assert runs["scheduled__2026-11-17"]["series"] == "scheduled"
    assert runs["scheduled__2026-11-17"]["duration_seconds"] == 67.0
    # the change check: 0.93 against the baseline's 0.95 misses the allowed 0.01 by 0.01
    value, change = runs["backfill__2026-11-18"]["checks"]
    assert (value["rule"], value["passed"]) == ("≥ 0.9", True)
    assert (change["rule"], round(change["delta"], 4), round(change["margin"], 4), change["passed"]) == (
        "≥ baseline − 0.01", -0.02, -0.01, False)
    assert runs["backfill__2026-11-18"]["baseline"] == {"version": 1, "metrics": {"accuracy": 0.95, "loss": 0.1}}
    live = runs["manual__now"]["progress"]
    assert (live["step"], live["seconds_left"], live["finished"]) == (100, 3.0, False)  # 300 steps × 64 / 6400
    assert runs["queued__later"]["metrics"] is None and runs["queued__later"]["data_interval_end"].startswith(
        "2026-11-21")
    assert page["metrics"] == ["accuracy", "loss"] and page["thresholds"] == THRESHOLDS
    assert [(v["version"], v["baseline"]) for v in page["versions"]] == [(2, True), (1, False)]


def test_links_lead_into_airflows_ui_under_its_base_path(monkeypatch):
    assert page_url("digits", run="manual__2026-11-24T10:00:00+00:00") == (
        "/plugin/training-runs/tfdist/ui/digits?run=manual__2026-11-24T10%3A00%3A00%2B00%3A00")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/ml/")
    assert page_url("digits", version=7) == "/ml/plugin/training-runs/ml/tfdist/ui/digits?version=7"


def test_run_directories_written_under_the_old_run_key_are_still_listed(tmp_path):
    """Before 0.2.0 a run's directory was its run id with unsafe characters replaced: such directories are
    found by their run record, not by their name."""
    old = "scheduled__2026-11-17T00_00_00_00_00"
    write_run(str(tmp_path), old, "scheduled__2026-11-17T00:00:00+00:00", "2026-11-17T00:00:00+00:00", 0.95, 1)
    new = write_run(str(tmp_path), run_key("manual__x"), "manual__x", "2026-11-18T00:00:00+00:00", 0.96, 2)
    listed = {r["run_id"]: r["run_dir"] for r in list_runs(DAG, [str(tmp_path)])}
    assert listed == {"scheduled__2026-11-17T00:00:00+00:00": os.path.join(tmp_path, DAG, "runs", old),
                      "manual__x": new.run_dir}
