"""End to end on a running Airflow (API server, scheduler, dag-processor on 127.0.0.1): the nightly
schedule, a REST trigger with overrides, a backfill experiment of three dates, and the trigger form
driven in headless Chromium (Debian's /usr/bin/chromium through Playwright; no browser download)."""

from __future__ import annotations

import datetime as dt
import json
import os
import runpy
import shutil

import pytest

from operators.demo import write_digits_partitions
from operators.plan import run_key
from operators.report import format_runs, list_runs
from tests.conftest import REPO
from tests.live_airflow import PASSWORD, USER, LiveAirflow
from trainer import registry
from trainer.artifacts import read_json

TODAY = dt.datetime.now(dt.timezone.utc).date()
SCREENSHOTS = os.environ.get("TFDIST_TEST_ARTIFACTS", os.path.join(REPO, "test-artifacts"))
@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("live_artifacts"))
    write_digits_partitions(os.path.join(root, "raw", "digits"), TODAY - dt.timedelta(days=1), 8)
    dags = tmp_path_factory.mktemp("live_dags")
    shutil.copy(os.path.join(REPO, "dags", "digits_nightly.py"), dags / "digits_nightly.py")
    # the example for backfill experiments: several runs at once, training serialized by the pool
    # "training" (2 slots; a 2-worker training takes 2)
    spec = runpy.run_path(os.path.join(REPO, "dags", "digits_nightly.py"))["SPEC"]
    spec = {**spec, "name": "digits_backfill", "max_active_runs": 3, "export": {"model_name": "digits_backfill"},
            "training": {**spec["training"], "pool": "training"}}
    (dags / "digits_backfill.py").write_text(f"# Airflow DAG\nfrom operators import build_dag\ndag = build_dag({spec!r})\n")
    live = LiveAirflow(str(tmp_path_factory.mktemp("live_home")), str(dags), root)
    try:
        live.start(["digits_nightly", "digits_backfill"])
        live.cli("pools", "set", "training", "2", "one 2-worker training at a time")
        live.root = root
        yield live
    finally:
        live.stop()


def run_dir(airflow, dag_id: str, run_id: str) -> str:
    return os.path.join(airflow.root, dag_id, "runs", run_key(run_id))


def test_unpaused_nightly_dag_is_scheduled_on_its_data_interval(airflow):
    airflow.api("PATCH", "/api/v2/dags/digits_nightly", {"is_paused": False})
    (run,) = airflow.wait_for_runs("digits_nightly", lambda runs: any(r["run_type"] == "scheduled" for r in runs))
    assert run["run_type"] == "scheduled" and run["state"] == "success", run
    assert run["data_interval_start"].startswith(str(TODAY - dt.timedelta(days=1)))
    assert run["data_interval_end"].startswith(str(TODAY))
    recorded = read_json(os.path.join(run_dir(airflow, "digits_nightly", run["dag_run_id"]), "run.json"))
    assert recorded["data_interval_start"].startswith(str(TODAY - dt.timedelta(days=1)))


def test_rest_trigger_with_overrides(airflow):
    body = {"logical_date": None, "conf": {"training.epochs": 3, "model.learning_rate": 0.005}}
    run_id = airflow.api("POST", "/api/v2/dags/digits_nightly/dagRuns", body)["dag_run_id"]
    runs = airflow.wait_for_runs("digits_nightly", lambda runs: any(r["dag_run_id"] == run_id for r in runs))
    (run,) = [r for r in runs if r["dag_run_id"] == run_id]
    assert run["state"] == "success", airflow.task_states("digits_nightly", run_id)
    directory = run_dir(airflow, "digits_nightly", run_id)
    assert read_json(os.path.join(directory, "run.json"))["overrides"] == body["conf"]
    effective = read_json(os.path.join(directory, "spec.json"))
    assert effective["training"]["epochs"] == 3 and effective["model"]["learning_rate"] == 0.005
    log = airflow.task_log("digits_nightly", run_id, "prepare_data")
    assert "run triggered without a logical date" in log and "training on the window" in log

    # bounds come from the spec model: Airflow refuses the run at trigger time
    refused = airflow.api("POST", "/api/v2/dags/digits_nightly/dagRuns",
                          {"logical_date": None, "conf": {"training.epochs": 0}}, expect=400)
    assert "training.epochs" in json.dumps(refused)
    # a value valid alone but not with the rest of the spec fails the first task, naming the field
    bad = airflow.api("POST", "/api/v2/dags/digits_nightly/dagRuns",
                      {"logical_date": None, "conf": {"training.num_workers": 8}})["dag_run_id"]
    airflow.wait_for_runs("digits_nightly", lambda runs: any(r["dag_run_id"] == bad for r in runs))
    assert airflow.task_states("digits_nightly", bad)["prepare_data"] == "failed"
    assert "data.num_shards: must be ≥ the 8 training processes" in airflow.task_log("digits_nightly", bad,
                                                                                     "prepare_data")


def test_backfill_experiment_of_three_dates(airflow):
    days = [TODAY - dt.timedelta(days=n) for n in (6, 5, 4)]
    airflow.api("PATCH", "/api/v2/dags/digits_backfill", {"is_paused": False})  # a paused DAG's backfill waits
    airflow.cli("backfill", "create", "--dag-id", "digits_backfill", "--from-date", str(days[0]),
                "--to-date", str(days[-1]), "--dag-run-conf", json.dumps({"training.epochs": 6}))
    runs = airflow.wait_for_runs("digits_backfill",
                                 lambda runs: len([r for r in runs if r["run_type"] == "backfill"]) == 3)
    backfill = sorted((r for r in runs if r["run_type"] == "backfill"), key=lambda r: r["data_interval_start"])
    assert [r["state"] for r in backfill] == ["success"] * 3
    assert [r["data_interval_start"][:10] for r in backfill] == [str(d) for d in days]

    model_dir = os.path.join(airflow.root, "models", "digits_backfill")
    published = {m["run_id"]: m for m in registry.versions(model_dir)}
    assert {r["dag_run_id"] for r in backfill} <= set(published)
    assert len({published[r["dag_run_id"]]["version"] for r in backfill}) == 3
    for r in backfill:
        version = published[r["dag_run_id"]]
        assert str(version["version"]).startswith((dt.date.fromisoformat(r["data_interval_end"][:10])).strftime("%Y%m%d"))
        baseline = read_json(os.path.join(run_dir(airflow, "digits_backfill", r["dag_run_id"]), "eval", "blessing.json"))["baseline"]
        assert baseline is None or baseline["path"] != version["path"]
        if baseline:  # as of its own date: never a model of a later window
            assert registry.versions(model_dir) and read_json(os.path.join(baseline["path"], "metadata.json"))[
                "data_interval_end"] <= version["data_interval_end"]

    trains = sorted((ti for r in backfill for ti in airflow.task_instances("digits_backfill", r["dag_run_id"])
                     if ti["task_id"] == "train"), key=lambda ti: ti["start_date"])
    assert all(ti["pool"] == "training" and ti["pool_slots"] == 2 for ti in trains)
    assert all(a["end_date"] <= b["start_date"] for a, b in zip(trains, trains[1:])), "the pool let trainings overlap"

    report = format_runs(list_runs(airflow.root, "digits_backfill")).splitlines()
    for r in backfill:
        (row,) = [line for line in report if line.startswith(r["dag_run_id"])]
        assert "training.epochs=6" in row and " blessed " in row and str(published[r["dag_run_id"]]["version"]) in row


def test_trigger_form_in_a_real_browser(airflow):
    from playwright.sync_api import sync_playwright

    before = {r["dag_run_id"] for r in airflow.runs("digits_nightly")}
    os.makedirs(SCREENSHOTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(f"{airflow.url}/")
            page.get_by_label("Username").fill(USER)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/login" not in url)
            page.goto(f"{airflow.url}/dags/digits_nightly")
            page.get_by_role("button", name="Trigger").first.click()
            epochs = page.locator("input[name='element_training.epochs']")
            epochs.fill("4")
            page.screenshot(path=os.path.join(SCREENSHOTS, "trigger-form.png"))
            page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            page.wait_for_timeout(2000)
            page.screenshot(path=os.path.join(SCREENSHOTS, "after-trigger.png"))
        finally:
            browser.close()
    new_manual = lambda runs: [r for r in runs if r["dag_run_id"] not in before and r["run_type"] == "manual"]  # noqa: E731
    (run,) = new_manual(airflow.wait_for_runs("digits_nightly", new_manual))
    assert run["state"] == "success" and run["triggered_by"] == "ui", run
    assert read_json(os.path.join(run_dir(airflow, "digits_nightly", run["dag_run_id"]), "spec.json"))[
        "training"]["epochs"] == 4
