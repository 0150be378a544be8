"""The whole DAG through real Airflow 3.3 (``airflow dags test``: real task runner, XCom, task logs)
on the digits data: prepare → 2-worker training → evaluate → export, and the gate stopping a bad model."""

from __future__ import annotations

import datetime as dt
import json
import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

from operators.demo import airflow_dags_test
from operators.plan import run_key
from tests.conftest import DAY, REPO, make_spec
from trainer.artifacts import read_json

RUN_DATE = DAY + dt.timedelta(days=1)  # a run at RUN_DATE trains on the partition of DAY


def task_states(dag_id: str, run_id: str) -> dict[str, str]:
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([airflow, "tasks", "states-for-dag-run", dag_id, run_id, "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    return {row["task_id"]: row["state"] for row in json.loads(out[out.index("["):])}


def run_dag_from_spec(spec: dict, tmp_path, monkeypatch):
    """Write a one-spec DAG folder and run that DAG once through Airflow."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "pipeline.py").write_text(f"# Airflow DAG\nfrom operators import build_dag\ndag = build_dag({spec!r})\n")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    return airflow_dags_test(spec["name"], RUN_DATE, str(tmp_path / "dags-test.log"), echo=False)


def serving_accuracy(export_path: str, data_dir: str) -> float:
    """Load the SavedModel and call its serving signature on the held-out (eval) digits."""
    import tensorflow as tf

    from trainer.data import eval_dataset

    signature = tf.saved_model.load(export_path).signatures["serving_default"]
    correct = total = 0
    for features, labels in eval_dataset(tf, data_dir, read_json(os.path.join(data_dir, "manifest.json"))):
        predicted = np.argmax(signature(pixel=features["pixel"])["probabilities"].numpy(), axis=1)
        correct += int((predicted == labels.numpy()).sum())
        total += len(predicted)
    return correct / total


@pytest.fixture(scope="module")
def nightly_run(digits_root, tmp_path_factory):
    """One run of the example DAG (digits_nightly) through Airflow, on the digits partition of DAY."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TFDIST_ARTIFACT_ROOT", digits_root)
        yield airflow_dags_test("digits_nightly", RUN_DATE, str(tmp_path_factory.mktemp("log") / "dags-test.log"),
                                echo=False)


def test_example_dag_exports_a_model_with_accuracy_above_09(nightly_run, digits_root):
    outcome = nightly_run
    log = open(outcome.log_path).read()
    assert outcome.state == "success", log[-5000:]
    assert task_states("digits_nightly", outcome.run_id) == dict.fromkeys(
        ["prepare_data", "train", "evaluate", "export"], "success")
    for worker in ("worker-0", "worker-1"):
        assert f"[{worker}] {worker}: step " in log, f"no progress lines from {worker} in the task log"

    model_dir = os.path.join(digits_root, "models", "digits")
    (version,) = os.listdir(model_dir)
    assert version == "20261121000000"
    export_path = os.path.join(model_dir, version)
    metadata = read_json(os.path.join(export_path, "metadata.json"))
    assert metadata["run_id"] == outcome.run_id and metadata["metrics"]["accuracy"] >= 0.9
    run_dir = os.path.join(digits_root, "digits_nightly", "runs", run_key(outcome.run_id))
    data_dir = os.path.join(run_dir, "data")
    assert serving_accuracy(export_path, data_dir) >= 0.9
    assert read_json(os.path.join(run_dir, "spec.json"))["name"] == "digits_nightly"


def test_model_below_threshold_fails_evaluate_and_is_not_exported(digits_root, tmp_path, monkeypatch):
    spec = make_spec(digits_root, name="digits_strict", validation={"thresholds": {"accuracy": {"lower": 0.9999}}},
                     training={"epochs": 1}, export={"model_name": "digits_strict"})
    outcome = run_dag_from_spec(spec, tmp_path, monkeypatch)
    log = open(outcome.log_path).read()
    assert outcome.state == "failed"
    states = task_states("digits_strict", outcome.run_id)
    assert states["train"] == "success" and states["evaluate"] == "failed" and states["export"] == "upstream_failed"
    assert "model not blessed: accuracy = 0." in log and "is below the lower bound 0.9999 by" in log
    assert not os.path.exists(os.path.join(digits_root, "models", "digits_strict"))


def test_plugin_is_loaded_by_airflow_and_lists_runs(nightly_run, digits_root, monkeypatch):
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([airflow, "plugins", "-o", "json"], capture_output=True, text=True, check=True).stdout
    plugins = {p["name"]: p for p in json.loads(out[out.index("["):])}
    assert plugins["tfdist"]["fastapi_apps"][0]["url_prefix"] == "/tfdist"

    from fastapi.testclient import TestClient

    sys.path.insert(0, os.path.join(REPO, "plugins"))
    from tfdist_plugin import app

    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", digits_root)
    runs = TestClient(app).get("/runs/digits_nightly").json()
    assert runs[0]["blessed"] is True and runs[0]["export_version"] == 20261121000000
    assert runs[0]["data_interval_start"] == "2026-11-20T00:00:00+00:00"


def test_example_dag_on_horovod_reaches_a_validated_export(digits_root, tmp_path, monkeypatch):
    """The example pipeline switched to Horovod by one spec line: prepare, evaluate and export unchanged."""
    spec = runpy.run_path(os.path.join(REPO, "dags", "digits_nightly.py"))["SPEC"]
    spec = {**spec, "name": "digits_nightly_mpi", "artifact_root": digits_root,
            "training": {**spec["training"], "backend": "mpi"}, "export": {"model_name": "digits_mpi"}}
    outcome = run_dag_from_spec(spec, tmp_path, monkeypatch)
    log = open(outcome.log_path).read()
    assert outcome.state == "success", log[-5000:]
    assert "[rank-0] rank-0: step " in log and "[rank-1] rank-1: step " in log
    model_dir = os.path.join(digits_root, "models", "digits_mpi")
    (version,) = os.listdir(model_dir)
    data_dir = os.path.join(digits_root, "digits_nightly_mpi", "runs", run_key(outcome.run_id), "data")
    assert serving_accuracy(os.path.join(model_dir, version), data_dir) >= 0.9


def test_export_emits_a_model_asset_event(nightly_run):
    out = subprocess.run([sys.executable, "-c", """
import json
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session
with create_session() as session:
    events = session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
    print(json.dumps([[e.asset.uri, e.source_task_id, e.extra] for e in events]))
"""], capture_output=True, text=True, check=True).stdout
    events = json.loads(out.strip().splitlines()[-1])
    assert ["model://digits/", "export", {"version": 20261121000000, "path": events[0][2]["path"]}] in events


def test_skip_mode_skips_evaluate_and_export_with_the_reason(digits_root, tmp_path, monkeypatch):
    spec = make_spec(digits_root, name="digits_skip", training={"epochs": 1}, export={"model_name": "digits_skip"},
                     validation={"thresholds": {"accuracy": {"lower": 0.9999}}, "on_failure": "skip"})
    outcome = run_dag_from_spec(spec, tmp_path, monkeypatch)
    log = open(outcome.log_path).read()
    assert task_states("digits_skip", outcome.run_id) == {
        "prepare_data": "success", "train": "success", "evaluate": "skipped", "export": "skipped"}
    assert "model not blessed: accuracy = 0." in log and "(validation.on_failure: skip, so export is skipped)" in log
    assert not os.path.exists(os.path.join(digits_root, "models", "digits_skip"))
