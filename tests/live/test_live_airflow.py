"""End to end on a running Airflow (API server, scheduler, dag-processor on 127.0.0.1, PostgreSQL): the
nightly schedule, a REST trigger with overrides, a backfill experiment, retries, the plugin API behind
Airflow's auth, YAML specs of which one is broken, the README's DAG file, and the trigger form driven in
headless Chromium (Debian's /usr/bin/chromium through Playwright; no browser download).

Every test sets up what it needs (runs it triggers, DAGs it unpauses) on the Airflow the module shares,
so any one of them runs alone."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import runpy
import shutil
import signal

import numpy as np
import psutil
import pytest
import requests
import yaml

from tests.dag.test_dag_parse import readme_dag_file
from tests.publishing.test_withdraw import publish
from tests.publishing.versions import published_metadata
from tests.support.live_airflow import USERS, LiveAirflow
from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.data_records import Manifest
from tfdist.contract.layout import BLESSING, MANIFEST, RunLayout, record_run, run_path
from tfdist.contract.progress import TrainProgress, read_curve
from tfdist.contract.records import read_record, read_record_if_exists
from tfdist.contract.train_records import RunRecord
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import write_digits_partitions
from tfdist.operators.report import format_runs, list_runs, run_summary, started_from
from tfdist.publishing import registry

pytestmark = pytest.mark.e2e
SCREENSHOTS = os.environ.get("TFDIST_TEST_ARTIFACTS", os.path.join(REPO, "test-artifacts"))
EXAMPLE = runpy.run_path(os.path.join(REPO, "dags", "digits_nightly.py"))["SPEC"]
DAYS_OF_DATA = 9


def dag_file(spec: dict) -> str:
    return f'"""Airflow DAG for the tests."""\nfrom tfdist.operators import build_dag\ndag = build_dag({spec!r})\n'


def triggered_dag_file(root: str, name: str, last_day: dt.date, approval: dict | None = None, **sections) -> str:
    """The DAG file of a small pipeline (1 worker, 2 epochs, a gate at accuracy 0.5) its test triggers: it starts
    tomorrow, so unpausing it schedules nothing; ``approval``: its export's."""
    return dag_file(
        make_spec(
            root,
            name=name,
            start_date=str(last_day + dt.timedelta(days=1)),
            training={"epochs": 2, "num_workers": 1},
            validation={"thresholds": {"accuracy": {"lower": 0.5}}},
            export={"model_name": name, **({"approval": approval} if approval else {})},
            **sections,
        )
    )


LANDED_ASSET = "file://{root}/raw/landed"


def upstream_dag_file(root: str) -> str:
    """Plain Airflow, no tfdist: copies the day its run's conf names to raw/landed/<day>/ (as an ETL lands a
    day), then emits the asset event of that day's partition."""
    return f'''"""The upstream of an asset-scheduled pipeline in the tests."""
import datetime, os, shutil
from airflow.sdk import DAG, Asset, task

LANDED = Asset({LANDED_ASSET.format(root=root)!r})

with DAG("digits_upstream", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
    @task(outlets=[LANDED])
    def land(*, dag_run=None, outlet_events=None):
        day = dag_run.conf["day"]
        shutil.copytree(os.path.join({root!r}, "raw", "digits", day), os.path.join({root!r}, "raw", "landed", day))
        outlet_events[LANDED].add_partitions(day)

    land()
'''


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, s3):
    root = str(tmp_path_factory.mktemp("live_artifacts"))
    # daily partitions up to today, so that a run whose interval ends after midnight still finds its day
    last_day = dt.datetime.now(dt.UTC).date()
    write_digits_partitions(os.path.join(root, "raw", "digits"), last_day, DAYS_OF_DATA)
    dags, restricted = tmp_path_factory.mktemp("live_dags"), tmp_path_factory.mktemp("restricted_dags")
    shutil.copy(os.path.join(REPO, "dags", "digits_nightly.py"), dags / "digits_nightly.py")
    (dags / "readme_example.py").write_text(readme_dag_file())
    # backfill experiments, with an artifact root of its own, each date warm-started from the version live as of
    # it; it starts tomorrow, so unpausing it schedules nothing now (a backfill is not bound by the start date)
    backfill_root = str(tmp_path_factory.mktemp("backfill_artifacts"))
    (dags / "digits_backfill.py").write_text(
        dag_file(
            {
                **EXAMPLE,
                "name": "digits_backfill",
                "artifact_root": backfill_root,
                "start_date": str(last_day + dt.timedelta(days=1)),
                "data": {**EXAMPLE["data"], "source": f"{root}/raw/digits/{{date}}/*.csv"},
                "export": {"model_name": "digits_backfill"},
                "training": {**EXAMPLE["training"], "epochs": 6, "warm_start": "baseline"},
            }
        )
    )
    # the example pipeline for its REST trigger: it starts tomorrow, so unpausing it schedules no run before the
    # triggered one (digits_nightly's scheduled run would come first: one run at a time)
    (dags / "digits_rest.py").write_text(
        dag_file(
            {
                **EXAMPLE,
                "name": "digits_rest",
                "start_date": str(last_day + dt.timedelta(days=1)),
                "export": {"model_name": "digits_rest"},
            }
        )
    )
    # a long enough training to kill a worker in, and a gate no model passes
    (dags / "digits_retry.py").write_text(
        dag_file(
            make_spec(
                root,
                name="digits_retry",
                training={"epochs": 20, "checkpoint_every_steps": 50},
                validation={"thresholds": {"accuracy": {"lower": 0.9999}}},
                retries={"delay_seconds": 1},
                export={"model_name": "digits_retry"},
            )
        )
    )
    # two days of data for the data gate, the second broken: one pixel ×10 (a unit change upstream); the DAG
    # starts tomorrow, so unpausing it schedules nothing (its test backfills the two days)
    drift = os.path.join(root, "raw", "drift")
    write_digits_partitions(drift, last_day - dt.timedelta(days=1), 2)
    broken = os.path.join(drift, (last_day - dt.timedelta(days=1)).isoformat(), "digits.csv")
    table = np.loadtxt(broken, delimiter=",", skiprows=1)
    table[:, 20] *= 10
    np.savetxt(broken, table, fmt="%g", delimiter=",", header=open(broken).readline().strip(), comments="")
    (dags / "digits_drift.py").write_text(
        dag_file(
            {
                **EXAMPLE,
                "name": "digits_drift",
                "start_date": str(last_day + dt.timedelta(days=1)),
                "data": {**EXAMPLE["data"], "source": f"{drift}/{{date}}/*.csv"},
                "export": {"model_name": "digits_drift"},
                "training": {**EXAMPLE["training"], "epochs": 2, "num_workers": 1},
                "validation": {"thresholds": {}, "allow_unvalidated": True},
            }
        )
    )
    shutil.copy(os.path.join(REPO, "dags", "yaml_specs.py"), dags / "yaml_specs.py")
    (dags / "specs").mkdir()
    # both valid specs train in the pool "training" (2 slots; a 2-worker training takes 2): one at a time
    team_specs = {
        "team_a": {"validation": {"thresholds": {}, "allow_unvalidated": True}},  # its author opts out
        "team_b": {"validation": {"thresholds": {"accuracy": {"lower": 0.9999}}, "on_failure": "skip"}},
        "team_c": {"training": {"num_workers": 0}},
    }
    for name, sections in team_specs.items():
        spec = make_spec(root, name=name, export={"model_name": name}, **sections)
        spec["training"].update(epochs=2, pool="training")
        (dags / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    # a pipeline whose versions its test writes (publish-like directories): withdrawn and restored through the API
    (dags / "digits_withdraw.py").write_text(
        dag_file(
            {
                **EXAMPLE,
                "name": "digits_withdraw",
                "start_date": str(last_day + dt.timedelta(days=1)),
                "export": {"model_name": "digits_withdraw"},
            }
        )
    )
    (restricted / "other_team.py").write_text(dag_file({**EXAMPLE, "name": "other_team_pipeline"}))
    # an upstream that lands a day of data and emits its partition, and a pipeline scheduled on those partitions
    (dags / "digits_upstream.py").write_text(upstream_dag_file(root))
    (dags / "digits_on_assets.py").write_text(
        dag_file(
            {
                **EXAMPLE,
                "name": "digits_on_assets",
                "schedule": {
                    "assets": [LANDED_ASSET.format(root=root)],
                    "partitions": "day",
                    "partition_key_format": "%Y-%m-%d",
                },
                "data": {**EXAMPLE["data"], "source": f"{root}/raw/landed/{{date}}/*.csv"},
                "export": {"model_name": "digits_on_assets"},
                "training": {**EXAMPLE["training"], "epochs": 2, "num_workers": 1},
                "validation": {"thresholds": {}, "allow_unvalidated": True},
            }
        )
    )
    # a human approves or rejects each blessed model before export (see the section "Human approval" below)
    approvers = {"users": ["editor"], "roles": ["op"]}
    (dags / "digits_approval.py").write_text(
        triggered_dag_file(
            root,
            "digits_approval",
            last_day,
            overridable=["training.epochs"],
            approval={"timeout_minutes": 60, "approvers": approvers},
        )
    )
    (dags / "digits_approval_timeout.py").write_text(
        triggered_dag_file(root, "digits_approval_timeout", last_day, approval={"timeout_minutes": 1})
    )
    write_embedding_dags(dags, restricted, root)
    # a pipeline whose artifacts and models are only in a bucket (its test triggers it), reached by the Airflow
    # side through the connection aws_default
    bucket_root = f"s3://{s3.new_bucket()}/tfdist"
    storage.upload_tree(os.path.join(root, "raw", "digits"), storage.join(bucket_root, "raw", "digits"))
    (dags / "digits_bucket.py").write_text(triggered_dag_file(bucket_root, "digits_bucket", last_day))

    live = LiveAirflow(str(tmp_path_factory.mktemp("live_home")), str(dags), str(restricted), root)
    live.env["AIRFLOW_CONN_AWS_DEFAULT"] = s3.airflow_connection
    try:
        live.start(
            [
                "digits_nightly",
                "digits_rest",
                "digits_backfill",
                "digits_retry",
                "digits_cnn",
                "digits_drift",
                "team_a",
                "team_b",
                "team_c",
                "other_team_pipeline",
                "digits_withdraw",
                "digits_upstream",
                "digits_on_assets",
                "digits_approval",
                "digits_approval_timeout",
                "digits_bucket",
                *EMBEDDING_DAGS,
            ]
        )
        live.cli("pools", "set", "training", "2", "one 2-worker training at a time")
        live.root, live.backfill_root, live.bucket_root, live.last_day = root, backfill_root, bucket_root, last_day
        yield live
    finally:
        live.stop()


def serving_accuracy(export_path: str, data_dir: str) -> float:
    """Load the SavedModel and call its serving signature on the held-out (eval) digits."""
    import tensorflow as tf

    from tfdist.trainer.data import eval_dataset

    signature = tf.saved_model.load(export_path).signatures["serving_default"]
    correct = total = 0
    for features, labels in eval_dataset(tf, data_dir, read_record(os.path.join(data_dir, MANIFEST), Manifest)):
        predicted = np.argmax(signature(pixel=features["pixel"])["probabilities"].numpy(), axis=1)
        correct += int((predicted == labels.numpy()).sum())
        total += len(predicted)
    return correct / total


def test_unpaused_nightly_dag_is_scheduled_on_its_data_interval_and_publishes(airflow):
    airflow.unpause("digits_nightly")
    runs = airflow.wait_for_runs("digits_nightly", lambda runs: any(r["run_type"] == "scheduled" for r in runs))
    (run,) = [r for r in runs if r["run_type"] == "scheduled"]
    run_id = run["dag_run_id"]
    assert run["state"] == "success", airflow.task_states("digits_nightly", run_id)
    # the latest complete day before the run was created: midnight to midnight
    start, end = (dt.datetime.fromisoformat(run[k]) for k in ("data_interval_start", "data_interval_end"))
    assert end - start == dt.timedelta(days=1) and end.time() == dt.time() and end.tzinfo is not None
    assert end <= dt.datetime.fromisoformat(run["queued_at"]) < end + dt.timedelta(days=1)
    directory = run_path(airflow.root, "digits_nightly", run_id)
    assert read_json(os.path.join(directory, "run.json"))["data_interval_start"] == start.isoformat()
    log = airflow.task_log("digits_nightly", run_id, "train")
    for worker in ("worker-0", "worker-1"):
        assert f"[{worker}] {worker}: step " in log, f"no progress lines from {worker} in the task log"

    model_dir = os.path.join(airflow.root, "models", "digits")
    (published,) = [m for m in published_metadata(model_dir) if m["run_id"] == run_id]
    assert published["version"] == int(end.strftime("%Y%m%d%H%M")) * 100
    assert published["metrics"]["accuracy"] >= 0.9 and published["gate"] == "value thresholds"
    assert serving_accuracy(published["path"], os.path.join(directory, "data")) >= 0.9
    events = airflow.api("GET", "/api/v2/assets/events?source_dag_id=digits_nightly")["asset_events"]
    assert {
        "version": published["version"],
        "path": published["path"],
        "parent_version": None,
        "cold_start": "training.warm_start is none",
    } in [e["extra"] for e in events if e["source_run_id"] == run_id]


@pytest.mark.extended
def test_rest_trigger_with_overrides_switching_to_horovod(airflow):
    conf = {"training.epochs": 8, "model.learning_rate": 0.003, "training.backend": "mpi"}
    run_id = airflow.trigger("digits_rest", conf)
    run = airflow.wait_for_run("digits_rest", run_id)
    assert run["state"] == "success", airflow.task_states("digits_rest", run_id)
    directory = run_path(airflow.root, "digits_rest", run_id)
    assert read_json(os.path.join(directory, "run.json"))["overrides"] == conf
    effective = read_json(os.path.join(directory, "spec.json"))
    assert (effective["training"]["epochs"], effective["model"]["learning_rate"]) == (8, 0.003)
    prepare = airflow.task_log("digits_rest", run_id, "prepare_data")
    assert "run triggered without a logical date" in prepare and "training on the window" in prepare
    train = airflow.task_log("digits_rest", run_id, "train")
    assert "[rank-0] rank-0: step " in train and "[rank-1] rank-1: step " in train

    # bounds come from the spec model: Airflow refuses the run at trigger time
    refused = airflow.api(
        "POST",
        "/api/v2/dags/digits_rest/dagRuns",
        {"logical_date": None, "conf": {"training.epochs": 0}},
        expect=400,
    )
    assert "training.epochs" in json.dumps(refused)
    # a value valid alone but not with the rest of the spec, or a field no trigger may set, fails the first
    # task at once and for good (no retry), naming the field; nothing reaches a path
    for conf, problem in (
        ({"training.num_workers": 8}, "data.num_shards: must be ≥ the 8 training processes"),
        ({"artifact_root": "/tmp/elsewhere"}, "artifact_root: not overridable in this pipeline"),
    ):
        bad = airflow.trigger("digits_rest", conf)
        assert airflow.wait_for_run("digits_rest", bad)["state"] == "failed"
        prepare = airflow.task_instances("digits_rest", bad)["prepare_data"]
        assert (prepare["state"], prepare["try_number"]) == ("failed", 1)
        assert problem in airflow.task_log("digits_rest", bad, "prepare_data")
    assert not os.path.exists("/tmp/elsewhere/digits_rest")


@pytest.fixture(scope="module")
def backfill_experiment(airflow):
    """A backfill experiment of two days, one run at a time: its runs, oldest first."""
    days = [airflow.last_day - dt.timedelta(days=n) for n in (7, 6)]
    airflow.unpause("digits_backfill")  # a paused DAG's backfill waits
    airflow.cli(
        "backfill",
        "create",
        "--dag-id",
        "digits_backfill",
        "--from-date",
        str(days[0]),
        "--to-date",
        str(days[-1]),
        "--max-active-runs",
        "1",
        "--dag-run-conf",
        json.dumps({"training.epochs": 8}),
    )
    runs = airflow.wait_for_runs("digits_backfill", lambda runs: len(runs) == 2)
    assert {r["run_type"] for r in runs} == {"backfill"}
    backfill = sorted(runs, key=lambda r: r["data_interval_start"])
    assert [r["data_interval_start"][:10] for r in backfill] == [str(d) for d in days]
    return backfill


def test_backfill_experiment_compares_each_date_with_what_was_live_then(airflow, backfill_experiment):
    backfill = backfill_experiment
    assert [r["state"] for r in backfill] == ["success"] * 2
    model_dir = os.path.join(airflow.backfill_root, "models", "digits_backfill")
    published = {m["run_id"]: m for m in published_metadata(model_dir)}
    versions = [published[r["dag_run_id"]] for r in backfill]
    assert [str(v["version"])[:8] for v in versions] == [r["data_interval_end"][:10].replace("-", "") for r in backfill]
    # the later date is compared, on its own eval data, with the version live as of its date: the earlier one's
    blessings = [
        read_json(os.path.join(run_path(airflow.backfill_root, "digits_backfill", r["dag_run_id"]), "eval", BLESSING))
        for r in backfill
    ]
    assert blessings[0]["baseline"] is None
    for earlier, blessing in zip(versions[:-1], blessings[1:], strict=True):
        assert blessing["baseline"]["version"] == earlier["version"], blessing["report"]
        assert blessing["deltas"]["accuracy"]["absolute"] == pytest.approx(
            blessing["metrics"]["accuracy"] - blessing["baseline"]["metrics"]["accuracy"]
        )

    report = format_runs(list_runs("digits_backfill", [airflow.backfill_root])).splitlines()
    for r, version in zip(backfill, versions, strict=True):
        (row,) = [line for line in report if line.startswith(r["dag_run_id"])]
        assert "training.epochs=8" in row and " blessed " in row and str(version["version"]) in row


def test_plugin_api_requires_airflow_auth_and_finds_runs_under_the_pipelines_own_root(airflow, backfill_experiment):
    backfill = backfill_experiment
    path = "/tfdist/runs/digits_backfill"
    assert airflow.request("GET", path, user=None).status_code == 401
    assert airflow.request("GET", path, user=None).json() == {"detail": "Not authenticated"}
    assert (
        requests.get(f"{airflow.url}{path}", headers={"Authorization": "Bearer not.a.token"}, timeout=30).status_code
        == 403
    )

    runs = airflow.request("GET", path).json()  # admin
    assert airflow.backfill_root != airflow.env["TFDIST_ARTIFACT_ROOT"]
    listed = {r["run_id"]: r for r in runs}
    for r in backfill:
        summary = listed[r["dag_run_id"]]
        assert summary["blessed"] is True and summary["export_version"] and summary["gate"] == "value thresholds"
        assert summary["run_dir"].startswith(airflow.backfill_root)

    # a viewer of team ml-team reads the shared DAGs' runs, not another team's; Airflow's own API agrees
    assert airflow.request("GET", path, user="analyst").status_code == 200
    assert airflow.request("GET", "/tfdist/runs/other_team_pipeline", user="analyst").status_code == 403
    assert airflow.request("GET", "/api/v2/dags/other_team_pipeline", user="analyst").status_code == 403
    assert airflow.request("GET", "/tfdist/runs/other_team_pipeline").status_code == 200  # admin
    assert airflow.request("GET", "/tfdist/runs/no_such_pipeline").status_code == 404

    # the installed package's entry point registers the plugin; the plugins folder's thin file adds nothing
    plugins = airflow.api("GET", "/api/v2/plugins")["plugins"]
    assert [(p["name"], "EntryPoint" in p["source"]) for p in plugins] == [("tfdist", True)]
    assert airflow.api("GET", "/api/v2/plugins/importErrors")["import_errors"] == []


@pytest.mark.extended
def test_a_broken_yaml_spec_leaves_the_others_scheduled_and_shows_its_problem(airflow):
    broken = airflow.api("GET", "/api/v2/dags/team_c")
    problem = "training.num_workers: Input should be greater than or equal to 1 (got 0)"
    assert problem in broken["description"] and "team_c.yaml" in broken["description"]
    assert (
        broken["is_paused"]
        and broken["timetable_summary"] is None
        and {t["name"] for t in broken["tags"]} >= {"invalid-spec"}
    )
    assert not [e for e in airflow.api("GET", "/api/v2/importErrors")["import_errors"] if "yaml_specs" in e["filename"]]
    for name in ("team_a", "team_b"):
        assert airflow.api("GET", f"/api/v2/dags/{name}")["timetable_summary"] is not None

    for name in ("team_a", "team_b"):
        airflow.unpause(name)
    finished = {name: airflow.wait_for_runs(name, lambda runs: len(runs) == 1)[0] for name in ("team_a", "team_b")}
    runs = {name: run["dag_run_id"] for name, run in finished.items()}
    assert {run["run_type"] for run in finished.values()} == {"scheduled"}
    assert finished["team_a"]["state"] == "success"
    # team_a's author opted out of the gate: said in the evaluate log, blessing.json and the version's metadata
    (version,) = published_metadata(os.path.join(airflow.root, "models", "team_a"))
    unvalidated = "none: published without a gate (validation.allow_unvalidated)"
    assert version["gate"] == unvalidated == version["blessing"]["gate"]
    blessing = read_json(os.path.join(run_path(airflow.root, "team_a", runs["team_a"]), "eval", BLESSING))
    assert blessing["gate"] == unvalidated and blessing["blessed"]
    evaluate = airflow.task_log("team_a", runs["team_a"], "evaluate")
    assert "no gate: validation.allow_unvalidated is set" in evaluate and "published without a gate" in evaluate
    # team_b's gate refuses its model with on_failure: skip: the run succeeds, evaluate and export are skipped
    assert airflow.task_states("team_b", runs["team_b"]) == {
        "prepare_data": "success",
        "validate_data": "success",
        "train": "success",
        "evaluate": "skipped",
        "export": "skipped",
    }
    trains = sorted(
        (airflow.task_instances(name, run_id)["train"] for name, run_id in runs.items()),
        key=lambda ti: ti["start_date"],
    )
    assert all(ti["pool"] == "training" and ti["pool_slots"] == 2 for ti in trains)
    assert trains[0]["end_date"] <= trains[1]["start_date"], "the pool let the two trainings overlap"
    evaluate = airflow.task_log("team_b", runs["team_b"], "evaluate")
    assert "model not blessed: accuracy = 0." in evaluate and "so export is skipped" in evaluate
    assert not os.path.exists(os.path.join(airflow.root, "models", "team_b"))
    assert airflow.runs("team_c") == []


def test_the_readme_dag_file_is_found_by_the_dag_processor(airflow):
    dag = airflow.api("GET", "/api/v2/dags/digits_cnn")
    assert dag["relative_fileloc"] == "readme_example.py" and not dag["is_stale"]
    assert not [
        e for e in airflow.api("GET", "/api/v2/importErrors")["import_errors"] if "readme_example" in e["filename"]
    ]


@pytest.mark.extended
def test_a_killed_worker_is_retried_and_resumes_but_a_refused_gate_is_not_retried(airflow):
    airflow.unpause("digits_retry")
    (run_id,) = airflow.wait_for(lambda: [r["dag_run_id"] for r in airflow.runs("digits_retry")], 60, "its run")
    directory = run_path(airflow.root, "digits_retry", run_id)
    checkpoints = os.path.join(directory, "checkpoints")
    airflow.wait_for(
        lambda: os.path.isdir(checkpoints) and any(f.startswith("ckpt-") for f in os.listdir(checkpoints)),
        240,
        "the first checkpoint",
        every=0.1,
    )
    workers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "tfdist.trainer.train" in (cmd := " ".join(p.info["cmdline"] or [])) and directory in cmd
    ]
    assert len(workers) == 2, workers
    workers[-1].send_signal(signal.SIGKILL)
    run = airflow.wait_for_run("digits_retry", run_id)

    tasks = airflow.task_instances("digits_retry", run_id)
    assert run["state"] == "failed"
    assert (tasks["train"]["state"], tasks["train"]["try_number"]) == ("success", 2)
    assert "was killed by signal 9" in airflow.task_log("digits_retry", run_id, "train", 1)
    resumed = airflow.task_log("digits_retry", run_id, "train", 2)
    assert "resuming from" in resumed and "/checkpoints/ckpt-" in resumed
    result = read_json(os.path.join(directory, "train", "result.json"))
    assert result["resumed_from_step"] >= 50 and result["final_step"] > result["resumed_from_step"]
    # the gate refused the model: evaluate failed on its first try although retries.evaluate is 1
    assert (tasks["evaluate"]["state"], tasks["evaluate"]["try_number"]) == ("failed", 1)
    assert tasks["evaluate"]["max_tries"] >= 1 and tasks["export"]["state"] == "upstream_failed"
    assert "model not blessed" in airflow.task_log("digits_retry", run_id, "evaluate")


@contextlib.contextmanager
def signed_in_page(airflow, user: str = "admin"):
    """A page of headless Chromium signed in to the live Airflow as ``user``."""
    from playwright.sync_api import sync_playwright

    os.makedirs(SCREENSHOTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{airflow.url}/")
            page.get_by_label("Username").fill(user)
            page.get_by_label("Password").fill(USERS[user][1])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/login" not in url)
            yield page
            assert not errors, f"JavaScript errors: {errors}"
        finally:
            browser.close()


def test_trigger_form_in_a_real_browser(airflow):
    airflow.unpause("digits_nightly")
    before = {r["dag_run_id"] for r in airflow.runs("digits_nightly")}
    with signed_in_page(airflow) as page:
        page.goto(f"{airflow.url}/dags/digits_nightly")
        page.get_by_role("button", name="Trigger").first.click()
        epochs = page.locator("input[name='element_training.epochs']")
        epochs.fill("4")
        page.screenshot(path=os.path.join(SCREENSHOTS, "trigger-form.png"))
        page.get_by_role("dialog").get_by_role("button", name="Trigger").click()

        def new_manual() -> list[dict]:
            return [
                r for r in airflow.runs("digits_nightly") if r["dag_run_id"] not in before and r["run_type"] == "manual"
            ]

        (run,) = airflow.wait_for(new_manual, 60, "the triggered run")
        page.screenshot(path=os.path.join(SCREENSHOTS, "after-trigger.png"))
    assert run["triggered_by"] == "ui" and run["conf"]["training.epochs"] == 4, run
    # the form's value reaches the run's effective spec (written when prepare_data starts); the rest of the
    # run is the REST trigger's test: stop it there
    spec_file = os.path.join(run_path(airflow.root, "digits_nightly", run["dag_run_id"]), "spec.json")
    airflow.wait_for(lambda: os.path.exists(spec_file), 240, "the run's spec.json", every=0.5)
    assert read_json(spec_file)["training"]["epochs"] == 4
    airflow.api("PATCH", f"/api/v2/dags/digits_nightly/dagRuns/{run['dag_run_id']}", {"state": "failed"})


def page_frame(page):
    """The training-runs page inside Airflow's UI (its plugin iframe)."""
    page.wait_for_selector("iframe")
    return page.frame_locator("iframe").first


def test_training_runs_page_compares_a_backfill_experiment_and_is_linked_from_its_tasks(airflow, backfill_experiment):
    backfill = backfill_experiment
    earlier, later = (r["dag_run_id"] for r in backfill)
    # the page, its data and its assets require a signed-in user; a pipeline's page also its DAG's permission
    for path in (
        "/tfdist/ui/",
        "/tfdist/ui/digits_backfill",
        "/tfdist/static/page.js",
        "/tfdist/pipelines",
        "/tfdist/pipelines/digits_backfill",
        f"/tfdist/pipelines/digits_backfill/runs/{later}/progress",
        f"/tfdist/pipelines/digits_backfill/runs/{later}/curve",
    ):
        assert airflow.request("GET", path, user=None).status_code == 401, path
    for path in ("/tfdist/ui/other_team_pipeline", "/tfdist/pipelines/other_team_pipeline"):
        assert airflow.request("GET", path, user="analyst").status_code == 403, path
    assert "other_team_pipeline" not in {
        p["dag_id"] for p in airflow.request("GET", "/tfdist/pipelines", user="analyst").json()
    }
    links = airflow.api("GET", f"/api/v2/dags/digits_backfill/dagRuns/{later}/taskInstances/export/links")[
        "extra_links"
    ]
    version = next(
        r["export_version"]
        for r in airflow.request("GET", "/tfdist/runs/digits_backfill").json()
        if r["run_id"] == later
    )
    assert f"version={version}" in links["Published version"] and "run=" in links["Training run"]
    later_dir = run_path(airflow.backfill_root, "digits_backfill", later)
    points = [p.model_dump(mode="json") for p in read_curve(RunLayout(later_dir).curve_file)]
    assert len(points) >= 2
    curve = airflow.request("GET", f"/tfdist/pipelines/digits_backfill/runs/{later}/curve").json()
    assert curve["points"] == points
    assert (
        airflow.request("GET", f"/tfdist/pipelines/other_team_pipeline/runs/{later}/curve", user="analyst").status_code
        == 403
    )
    assert airflow.request("GET", "/tfdist/pipelines/digits_backfill/runs/no_such_run/curve").status_code == 404

    with signed_in_page(airflow) as page:
        # from the navigation: choose the pipeline
        page.goto(f"{airflow.url}/plugin/training-runs")
        frame = page_frame(page)
        frame.locator("#pipeline-select").select_option("digits_backfill")
        rows = frame.locator("tr.run")
        rows.first.wait_for()
        assert rows.count() == 2
        for run_id in (earlier, later):
            row = frame.locator(f"tr.run[data-run-id='{run_id}']")
            assert "backfill" in row.locator("td.type").inner_text()
            assert "training.epochs=8" in row.locator("td.overrides").inner_text()
            assert "blessed" in row.locator("td.gate").inner_text()
        assert (
            f"vs v{backfill_version(airflow, earlier)}"
            in frame.locator(f"tr.run[data-run-id='{later}'] td.gate").inner_text()
        )
        accuracy = frame.locator("svg.chart[data-metric='accuracy']")
        assert accuracy.locator(".point").count() == 2  # one series: the experiment's two dates
        assert accuracy.locator("line.threshold[data-bound='lower']").count() == 1
        assert frame.locator("tr.version").count() == 2
        assert frame.locator(f"tr.version[data-version='{version}'] .baseline-badge").count() == 1
        # filters offer what the runs hold: by run type and by override
        assert frame.locator("#filter-type option").evaluate_all("options => options.map(o => o.value)") == [
            "",
            "backfill",
        ]
        frame.locator("#filter-override").select_option("-")  # runs without overrides: none here
        assert frame.locator("tr.run").count() == 0
        frame.locator("#filter-override").select_option("training.epochs=8")
        assert frame.locator("tr.run").count() == 2

        # the later run's training curves, the parent's final values marked when it was warm-started
        frame.locator(f"tr.run[data-run-id='{later}']").click()
        curves = frame.locator(f".curves[data-run-id='{later}']")
        for metric in ("loss", "accuracy"):
            chart = curves.locator(f"svg.curve-chart[data-metric='{metric}']")
            chart.wait_for()
            assert chart.get_attribute("data-points") == str(len(points))
            assert chart.locator("path.curve-line").get_attribute("d").count("L") == len(points) - 1
        summary = run_summary(later_dir)
        started = started_from(summary.parent_version, summary.cold_start)
        parent_lines = curves.locator("line.parent-final")
        assert parent_lines.count() == 2 and started == f"warm start from v{backfill_version(airflow, earlier)}"
        label = curves.locator("text.parent-final-label").first.text_content()  # SVG: no inner_text
        assert f"parent v{summary.parent_version} final" in label
        assert started in frame.locator(f"tr.details[data-run-id='{later}']").inner_text()
        # the later version's lineage, as the registry follows it
        frame.locator(f"tr.version[data-version='{version}'] td").first.click()
        chain = registry.lineage(os.path.join(airflow.backfill_root, "models", "digits_backfill"), version)
        end = started_from(None, chain[-1].metadata.warm_start.cold_start)
        assert frame.locator("tr.lineage").inner_text().strip() == "Lineage: " + " ← ".join(
            f"v{m.version}" for m in chain
        ) + (f" ({end})" if end != "-" else " (start not recorded)")
        # every column of the runs table in view at 1,400 and 1,280 px (the whole page tall enough to show in
        # Airflow's frame); narrower, the table scrolls sideways, its hidden side marked
        for width, name in ((1400, "training-runs.png"), (1280, "training-runs-1280.png")):
            page.set_viewport_size({"width": width, "height": 2600})
            assert_runs_table_fits(page, frame)
            page.screenshot(path=os.path.join(SCREENSHOTS, name), full_page=True)
        page.set_viewport_size({"width": 900, "height": 2600})
        frame.locator("#runs .scroll-frame.more-right").wait_for()
        frame.locator("#runs .scroll").evaluate("scroll => { scroll.scrollLeft = scroll.scrollWidth; }")
        frame.locator("#runs .scroll-frame:not(.more-right)").wait_for()
        assert_in_view(page, frame.locator("#runs-table > thead th").last, frame.locator("#runs .scroll"))
        page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-900-scrolled.png"), full_page=True)
        page.set_viewport_size({"width": 1400, "height": 1400})

        # export's extra link on its task instance page leads to its run and version on the page
        page.goto(f"{airflow.url}/dags/digits_backfill/runs/{later}/tasks/export/details")
        page.get_by_role("link", name="Published version").click()
        frame = page_frame(page)
        frame.locator(f"tr.run.selected[data-run-id='{later}']").wait_for()
        frame.locator(f"tr.version.selected[data-version='{version}']").wait_for()
        assert "/plugin/training-runs/" in page.url
        page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-from-export-link.png"), full_page=True)

        # the pipeline's own tab
        page.goto(f"{airflow.url}/dags/digits_backfill/plugin/training-runs-of-dag")
        page_frame(page).locator("tr.run").first.wait_for()
        page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-dag-tab.png"))


def trained_step(layout: RunLayout) -> int:
    found = read_record_if_exists(layout.progress_file, TrainProgress)
    return found.step if found else 0


def assert_in_view(page, cell, container) -> None:
    """The cell's right edge inside its container's and the viewport's."""
    right = lambda box: box["x"] + box["width"]  # noqa: E731
    assert right(cell.bounding_box()) <= min(right(container.bounding_box()), page.viewport_size["width"]) + 0.5


def assert_runs_table_fits(page, frame) -> None:
    """Every column of the runs table in view: its last header cell inside the page, nothing to scroll to."""
    scroll = frame.locator("#runs .scroll")
    page.wait_for_timeout(300)  # the page redraws 150 ms after a resize
    assert_in_view(page, frame.locator("#runs-table > thead th").last, scroll)
    widths = scroll.evaluate("s => [s.scrollWidth, s.clientWidth]")
    assert widths[0] <= widths[1], f"the runs table is {widths[0]} px wide in {widths[1]} px"
    assert frame.locator("#runs .scroll-frame.more-right").count() == 0


def backfill_version(airflow, run_id: str) -> int:
    model_dir = os.path.join(airflow.backfill_root, "models", "digits_backfill")
    return next(m.version for m in registry.versions(model_dir) if m.metadata.run_id == run_id)


def test_a_drifted_day_is_refused_by_the_data_gate_and_the_page_shows_its_drift(airflow):
    """The first day publishes; the next, one pixel ×10, stops at validate_data: nothing trained. The page
    shows the refusal in the Data column and, for the run, the drift table with the failed feature and its
    histogram over the baseline's; ``tfdist runs`` shows the decision."""
    days = [airflow.last_day - dt.timedelta(days=n) for n in (2, 1)]
    airflow.unpause("digits_drift")  # it starts tomorrow: a backfill of the two days, in order, runs them
    airflow.cli(
        "backfill",
        "create",
        "--dag-id",
        "digits_drift",
        "--from-date",
        str(days[0]),
        "--to-date",
        str(days[1]),
        "--max-active-runs",
        "1",
    )
    finished = sorted(
        airflow.wait_for_runs("digits_drift", lambda found: len(found) == 2), key=lambda r: r["data_interval_start"]
    )
    assert [r["state"] for r in finished] == ["success", "failed"], finished
    runs = [r["dag_run_id"] for r in finished]
    states = airflow.task_states("digits_drift", runs[1])
    assert (states["validate_data"], states["train"]) == ("failed", "upstream_failed"), states
    log = airflow.task_log("digits_drift", runs[1], "validate_data")
    assert "drift: pixel[20] Jensen–Shannon divergence from the baseline's histogram" in log, log[-3000:]
    (summary,) = [r for r in airflow.request("GET", "/tfdist/runs/digits_drift").json() if r["run_id"] == runs[1]]
    assert summary["data_decision"] == "refused" and summary["data_baseline_version"]
    table = format_runs(list_runs("digits_drift", [airflow.root]))
    assert "REFUSED" in table.splitlines()[1] and "passed" in table.splitlines()[2], table

    with signed_in_page(airflow) as page:
        page.goto(f"{airflow.url}/plugin/training-runs")
        frame = page_frame(page)
        frame.locator("#pipeline-select").select_option("digits_drift")
        row = frame.locator(f"tr.run[data-run-id='{runs[1]}']")
        row.wait_for()
        assert "refused" in row.locator("td.data").inner_text()
        assert "passed" in frame.locator(f"tr.run[data-run-id='{runs[0]}'] td.data").inner_text()
        row.click()
        failed = frame.locator("table.data-checks tr.failed[data-feature='pixel[20]']")
        failed.wait_for()
        assert "drift" in failed.inner_text()
        frame.locator("figure.histogram rect.now").first.wait_for()
        assert frame.locator("figure.histogram rect.base").count() > 0
        assert "pixel[20]" in frame.locator("figure.histogram figcaption").inner_text()
        page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-data-gate.png"), full_page=True)


def test_training_runs_page_follows_a_running_training_without_a_reload(airflow):
    airflow.unpause("digits_nightly")
    run_id = airflow.trigger("digits_nightly", {"training.epochs": 300})  # long enough to watch
    try:
        with signed_in_page(airflow) as page:
            page.goto(f"{airflow.url}/plugin/training-runs/tfdist/ui/digits_nightly")
            frame = page_frame(page)
            card = frame.locator(f".live-run[data-run-id='{run_id}']")
            step = card.locator(".step")
            airflow.wait_for(
                lambda: step.count() and step.inner_text().strip().isdigit() and int(step.inner_text()) > 0,
                300,
                "the first training steps on the page",
            )
            frame.locator("body").evaluate("body => { window.notReloaded = true; }")
            first = int(step.inner_text())
            airflow.wait_for(lambda: int(step.inner_text()) > first, 60, "the step to advance on the page")
            assert frame.locator("body").evaluate("() => window.notReloaded === true")
            assert card.locator(".eta").inner_text().strip()

            # its training curve, opened from the card, grows as the chief appends points
            card.locator(".run-link").click()
            layout = RunLayout(run_path(airflow.root, "digits_nightly", run_id))
            every = read_json(layout.spec_file)["training"].get("summary_every_steps", 50)
            airflow.wait_for(lambda: trained_step(layout) >= 2 * every, 240, f"step {2 * every}")
            chart = frame.locator(f".curves[data-run-id='{run_id}'] svg.curve-chart[data-metric='loss']")
            shown = lambda: chart.count() and int(chart.get_attribute("data-points"))  # noqa: E731
            drawn = airflow.wait_for(shown, 60, "the training curve on the page")
            airflow.wait_for(lambda: shown() > drawn, 120, "the curve to grow on the page")
            assert frame.locator("body").evaluate("() => window.notReloaded === true")
            page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-live.png"), full_page=True)
    finally:
        airflow.api("PATCH", f"/api/v2/dags/digits_nightly/dagRuns/{run_id}", {"state": "failed"})


def test_an_editor_withdraws_a_version_through_the_plugin_api_and_consumers_get_an_asset_event(airflow):
    model_dir = os.path.join(airflow.root, "models", "digits_withdraw")
    for version in (1, 2):
        publish(model_dir, version)
    path = "/tfdist/pipelines/digits_withdraw/versions/{}/{}"
    reason = {"reason": "labels of the 2nd were shifted"}
    assert airflow.request("POST", path.format(2, "withdraw"), user=None, body=reason).status_code == 401
    assert airflow.request("POST", path.format(2, "withdraw"), user="analyst", body=reason).status_code == 403
    assert airflow.request("POST", path.format(2, "withdraw"), body={"reason": " "}).status_code == 422
    assert airflow.request("POST", path.format(7, "withdraw"), body=reason).status_code == 404
    assert sorted(os.listdir(model_dir)) == ["1", "2"]

    withdrawn = airflow.request("POST", path.format(2, "withdraw"), body=reason)  # admin
    assert withdrawn.status_code == 200, withdrawn.text
    assert {k: withdrawn.json()[k] for k in ("version", "by", "reason", "live")} == {
        "version": 2,
        "by": "admin",
        "reason": reason["reason"],
        "live": 1,
    }
    assert sorted(os.listdir(model_dir)) == [".withdrawn", "1", "serving.config"]  # TF Serving's, naming 1
    assert read_json(os.path.join(model_dir, ".withdrawn", "2", "withdrawn.json"))["by"] == "admin"
    again = airflow.request("POST", path.format(2, "withdraw"), body=reason)
    assert again.status_code == 409 and "already withdrawn" in again.json()["detail"]
    (page_version,) = [
        v for v in airflow.api("GET", "/tfdist/pipelines/digits_withdraw")["versions"] if v["version"] == 2
    ]
    assert page_version["withdrawn"]["reason"] == reason["reason"]

    assert airflow.request("POST", path.format(2, "restore"), user="analyst").status_code == 403
    restored = airflow.request("POST", path.format(2, "restore"))
    assert (
        restored.status_code == 200
        and restored.json()["live"] == 2
        and sorted(os.listdir(model_dir)) == [".withdrawn", "1", "2", "serving.config"]
    )
    (asset,) = airflow.api("GET", "/api/v2/assets?uri_pattern=model://digits_withdraw")["assets"]
    events = airflow.api("GET", f"/api/v2/assets/events?asset_id={asset['id']}&order_by=timestamp")["asset_events"]
    assert [e["extra"] for e in events] == [
        {"withdrawn": 2, "reason": reason["reason"], "by": "admin"},
        {"restored": 2, "by": "admin"},
    ]  # none of the refused one


def test_a_run_in_a_bucket_is_on_the_runs_page_behind_auth_and_its_version_is_withdrawn_there(airflow):
    """The API server reads the run's records and versions from the bucket through the connection: the page's
    data, its curve and the page itself; a withdrawal through the API marks the version in the bucket."""
    run_id = airflow.trigger("digits_bucket")
    run = airflow.wait_for_run("digits_bucket", run_id)
    assert run["state"] == "success", airflow.task_states("digits_bucket", run_id)
    assert not os.path.exists(run_path(airflow.root, "digits_bucket", run_id))
    path = "/tfdist/runs/digits_bucket"
    assert airflow.request("GET", path, user=None).status_code == 401
    assert airflow.request("GET", "/tfdist/pipelines/digits_bucket", user=None).status_code == 401
    (summary,) = airflow.api("GET", path)
    assert summary["run_id"] == run_id and summary["run_dir"] == run_path(airflow.bucket_root, "digits_bucket", run_id)
    assert summary["blessed"] is True and summary["export_version"]
    curve = airflow.api("GET", f"/tfdist/pipelines/digits_bucket/runs/{run_id}/curve")
    points = [p.model_dump(mode="json") for p in read_curve(RunLayout(summary["run_dir"]).curve_file)]
    assert curve["points"] == points != []
    (listed,) = airflow.api("GET", "/tfdist/pipelines/digits_bucket")["versions"]
    version = summary["export_version"]
    assert listed["version"] == version and listed["path"].startswith(airflow.bucket_root)

    with signed_in_page(airflow) as page:
        page.goto(f"{airflow.url}/plugin/training-runs")
        frame = page_frame(page)
        frame.locator("#pipeline-select").select_option("digits_bucket")
        row = frame.locator("tr.run")
        row.first.wait_for()
        assert row.count() == 1 and str(version) in row.first.inner_text()
        page.screenshot(path=os.path.join(SCREENSHOTS, "runs-page-from-a-bucket.png"))

    withdrawal = f"/tfdist/pipelines/digits_bucket/versions/{version}/withdraw"
    withdrawn = airflow.request("POST", withdrawal, body={"reason": "trained on a bad day"})
    assert withdrawn.status_code == 200 and withdrawn.json()["live"] is None, withdrawn.text
    model_dir = storage.join(airflow.bucket_root, "models", "digits_bucket")
    assert registry.versions(model_dir) == [] and registry.withdrawn(model_dir)[0].withdrawn.by == "admin"


@pytest.mark.extended
def test_a_pipeline_scheduled_on_partitioned_assets_trains_on_each_day_its_upstream_lands(airflow):
    """Two days landed upstream, each with its partition's asset event: one pipeline run per day, on its own,
    reading exactly that day, each publishing and announcing its version."""
    airflow.unpause("digits_on_assets")
    days = [(airflow.last_day - dt.timedelta(days=n)).isoformat() for n in (3, 2)]
    for day in days:
        airflow.wait_for_run("digits_upstream", airflow.trigger("digits_upstream", {"day": day}))
    runs = airflow.wait_for_runs("digits_on_assets", lambda runs: len(runs) == 2, timeout=400)
    assert sorted(r["partition_key"] for r in runs) == days
    events = airflow.api("GET", "/api/v2/assets/events?source_dag_id=digits_on_assets")["asset_events"]
    for run in runs:
        run_id, day = run["dag_run_id"], run["partition_key"]
        assert run["run_type"] == "asset_triggered" and run["state"] == "success", airflow.task_states(
            "digits_on_assets", run_id
        )
        directory = run_path(airflow.root, "digits_on_assets", run_id)
        record, start = read_json(os.path.join(directory, "run.json")), dt.datetime.fromisoformat(f"{day}T00:00+00:00")
        window = f"the day partition {day!r} its trigger names"
        assert record["partition_key"] == day and record["window"] == window, record
        assert (record["data_interval_start"], record["data_interval_end"]) == (
            start.isoformat(),
            (start + dt.timedelta(days=1)).isoformat(),
        )
        inputs = read_json(os.path.join(directory, "data", "manifest.json"))["inputs"]
        assert {os.path.basename(os.path.dirname(i["path"])) for i in inputs} == {day}, inputs
        (published,) = [
            m
            for m in registry.versions(os.path.join(airflow.root, "models", "digits_on_assets"))
            if m.metadata.run_id == run_id
        ]
        assert published.version in [e["extra"]["version"] for e in events if e["source_run_id"] == run_id]
        assert window in airflow.task_log("digits_on_assets", run_id, "prepare_data")


# ---- Human approval (export.approval): Airflow's Human-in-the-loop request, answered through its REST API


def approval_path(dag_id: str, run_id: str) -> str:
    return f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails"


def approval_request(airflow, dag_id: str, run_id: str) -> dict:
    """Wait for the run's approval request, as a person would; the request as the form shows it."""
    airflow.wait_for(
        lambda: airflow.task_states(dag_id, run_id).get("approve") == "awaiting_input",
        300,
        f"the approval request of {run_id}",
    )
    # not before the scheduler has taken the deferring worker's exit (an answer within that moment fails the task
    # in Airflow 3.3: apache/airflow#66374, #67287)
    airflow.wait_for(
        lambda: airflow.scheduler_took_exit(dag_id, run_id, "approve"),
        60,
        f"the scheduler to take the approve task's deferral of {run_id}",
    )
    return airflow.api("GET", approval_path(dag_id, run_id))


def answer_approval(
    airflow, dag_id: str, run_id: str, option: str, comment: str | None = None, user: str = "admin"
) -> requests.Response:
    """Answer the run's approval request as ``user`` through Airflow's REST API."""
    body = {"chosen_options": [option], "params_input": {"comment": comment} if comment else {}}
    return airflow.request("PATCH", approval_path(dag_id, run_id), user=user, body=body)


def run_row(airflow, dag_id: str, run_id: str) -> dict:
    (row,) = [r for r in airflow.api("GET", f"/tfdist/pipelines/{dag_id}")["runs"] if r["run_id"] == run_id]
    return row


@pytest.fixture(scope="module")
def unanswered_approval(airflow) -> str:
    """A run whose approval (1-minute timeout) nobody answers; triggered early, it waits while other tests run."""
    return airflow.trigger("digits_approval_timeout")


@pytest.mark.extended
@pytest.mark.usefixtures("unanswered_approval")
def test_an_approved_run_publishes_and_a_rejected_one_does_not_and_says_who_rejected(airflow):
    """Only the approvers (the user editor and the role op's users) may answer, and not who triggered the run: the
    first run, editor's, is refused to editor and to admin (outside the list), approved by an op, and publishes a
    version whose metadata names the approver; its request shows the gate's checks. The second's shows the changes
    against that version; rejected by editor with a comment, export is skipped, nothing more is published, and the
    run's record and the runs page name who rejected it and why."""
    dag_id, model_dir = "digits_approval", os.path.join(airflow.root, "models", "digits_approval")
    approved = airflow.trigger(dag_id, user="editor")
    asked = approval_request(airflow, dag_id, approved)
    assert asked["assigned_users"] == [{"id": "ml_op", "name": "ml_op"}, {"id": "other_op", "name": "other_op"}]
    for refused in ("editor", "admin"):  # four-eyes; outside the approvers
        response = answer_approval(airflow, dag_id, approved, "Approve", user=refused)
        assert response.status_code == 403 and "is not a respondent" in response.text, response.text
    assert answer_approval(airflow, dag_id, approved, "Approve", user="ml_op").status_code == 200
    assert asked["options"] == ["Approve", "Reject"] and asked["defaults"] == ["Reject"], asked
    assert "**Gate: blessed**" in asked["body"] and "| value | accuracy |" in asked["body"], asked["body"]
    assert "No baseline compared" in asked["body"], asked["body"]
    assert airflow.wait_for_run(dag_id, approved)["state"] == "success", airflow.task_states(dag_id, approved)
    (version,) = published_metadata(model_dir)
    assert version["run_id"] == approved and version["approval"]["by"] == "ml_op", version
    assert (version["approval"]["asked"], version["approval"]["excluded"]) == (["ml_op", "other_op"], "editor")
    assert run_row(airflow, dag_id, approved)["approval_summary"] == "approved by ml_op"

    rejected = airflow.trigger(dag_id)
    asked = approval_request(airflow, dag_id, rejected)
    assert len(asked["assigned_users"]) == 3, asked  # admin triggered it: editor may answer
    answered = answer_approval(airflow, dag_id, rejected, "Reject", "accuracy dropped on class 3", user="editor")
    assert answered.status_code == 200, answered.text
    assert f"Against the baseline, version {version['version']}" in asked["body"], asked["body"]
    assert airflow.wait_for_run(dag_id, rejected)["state"] == "success"
    states = airflow.task_states(dag_id, rejected)
    assert (states["approve"], states["export"]) == ("success", "skipped"), states
    assert [v.version for v in registry.versions(model_dir)] == [version["version"]]
    record = read_json(RunLayout(run_path(airflow.root, dag_id, rejected)).approval_file)
    assert (record["decision"], record["by"], record["comment"], record["timed_out"], record["excluded"]) == (
        "rejected",
        "editor",
        "accuracy dropped on class 3",
        False,
        "admin",
    ), record
    row = run_row(airflow, dag_id, rejected)
    assert row["approval_summary"] == "rejected by editor (accuracy dropped on class 3)" and not row["export_version"]
    with signed_in_page(airflow) as page:
        page.goto(f"{airflow.url}/plugin/training-runs/tfdist/ui/{dag_id}")
        shown = page_frame(page).locator(f"tr.run[data-run-id='{rejected}'] td.gate .approval.rejected")
        shown.wait_for()
        assert shown.inner_text() == "rejected by editor (accuracy dropped on class 3)"
        assert (
            page_frame(page).locator(f"tr.run[data-run-id='{approved}'] td.gate .approval.approved").inner_text()
            == "approved by ml_op"
        )
        page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-approval.png"), full_page=True)


@pytest.mark.extended
def test_an_approval_nobody_answers_in_time_rejects_and_publishes_nothing(airflow, unanswered_approval):
    """timeout_minutes: 1, on_timeout left at reject: the scheduler applies the default (Reject) when the minute
    is up; export is skipped and the record says the timeout rejected it."""
    dag_id, run_id = "digits_approval_timeout", unanswered_approval
    assert airflow.wait_for_run(dag_id, run_id, timeout=420)["state"] == "success"
    states = airflow.task_states(dag_id, run_id)
    assert (states["approve"], states["export"]) == ("success", "skipped"), states
    record = read_json(RunLayout(run_path(airflow.root, dag_id, run_id)).approval_file)
    assert (record["decision"], record["by"], record["timed_out"]) == ("rejected", None, True), record
    assert run_row(airflow, dag_id, run_id)["approval_summary"] == "rejected by the timeout (no answer in time)"
    assert not os.path.exists(os.path.join(airflow.root, "models", dag_id))


# ---- pipelines embedded in DAGs their teams wrote (build_task_group): found, shown and guarded by their DAG

EMBEDDING_DAGS = ("team_etl_embedded", "other_team_etl")


def embedding_dag_file(dag_id: str, spec: dict) -> str:
    return (
        f'"""Airflow DAG for the tests: an extract task, then a tfdist pipeline."""\n'
        "from airflow.sdk import DAG\nfrom airflow.providers.standard.operators.empty import EmptyOperator\n"
        "from tfdist.operators import build_task_group\n"
        f"with DAG({dag_id!r}, schedule=None) as dag:\n"
        f"    EmptyOperator(task_id='extract') >> build_task_group({spec!r})\n"
    )


def write_embedding_dags(dags, restricted, root: str) -> None:
    """A DAG embedding a pipeline in the shared folder, and one in another team's."""
    for folder, dag_id, name in (
        (dags, "team_etl_embedded", "digits_embedded"),
        (restricted, "other_team_etl", "digits_other"),
    ):
        spec = make_spec(root, name=name, export={"model_name": name})
        del spec["schedule"]
        (folder / f"{dag_id}.py").write_text(embedding_dag_file(dag_id, spec))


def test_an_embedded_pipeline_is_listed_and_served_under_its_id_with_its_dags_permissions(airflow):
    mine, other = "team_etl_embedded.digits_embedded", "other_team_etl.digits_other"
    listed = {p["pipeline_id"]: p for p in airflow.request("GET", "/tfdist/pipelines", user="analyst").json()}
    assert listed[mine]["dag_id"] == "team_etl_embedded" and other not in listed
    assert other in {p["pipeline_id"] for p in airflow.request("GET", "/tfdist/pipelines").json()}  # admin
    page = airflow.request("GET", f"/tfdist/pipelines/{mine}", user="analyst").json()
    assert (page["pipeline_id"], page["dag_id"], page["model_name"]) == (mine, "team_etl_embedded", "digits_embedded")
    for path in (f"/tfdist/pipelines/{other}", f"/tfdist/ui/{other}", f"/tfdist/runs/{other}"):
        assert airflow.request("GET", path, user="analyst").status_code == 403, path
        assert airflow.request("GET", path).status_code == 200, path
    assert airflow.request("GET", "/tfdist/runs/team_etl_embedded.no_such_group").status_code == 404

    # a run its artifact root remembers (written here, as a run's first task writes it) is on its page
    run_dir = run_path(airflow.root, mine, "manual__embedded")
    interval = {"data_interval_start": "2026-11-19T00:00:00+00:00", "data_interval_end": "2026-11-20T00:00:00+00:00"}
    record_run(RunLayout(run_dir), {}, RunRecord(pipeline_id=mine, run_id="manual__embedded", **interval))
    assert [r["run_id"] for r in airflow.request("GET", f"/tfdist/runs/{mine}").json()] == ["manual__embedded"]
    with signed_in_page(airflow, "analyst") as page:
        page.goto(f"{airflow.url}/plugin/training-runs")
        page_frame(page).get_by_role("link", name=mine, exact=True).click()  # the list of pipelines leads there
        frame = page_frame(page)
        frame.locator("tr.run[data-run-id='manual__embedded']").wait_for()
        assert frame.locator("#title").inner_text() == mine
        assert frame.locator("#pipeline-select").input_value() == mine
