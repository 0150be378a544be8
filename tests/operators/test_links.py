"""operators/links.py: each stage's extra link to its run on the training-runs page, train's to TensorBoard."""

from __future__ import annotations

import types

from tests.support.specs import make_spec
from tfdist.contract.layout import run_key
from tfdist.operators.links import TrainingRunLink, run_page_url

KEY = types.SimpleNamespace(dag_id="digits_test", run_id="manual__2026-11-24T10:00:00+00:00")
"""What a link reads of Airflow's task instance key."""


def test_train_links_to_its_run_in_tensorboard_where_the_spec_or_airflow_names_one(tmp_path, monkeypatch):
    from airflow.serialization.serialized_objects import DagSerialization

    from tfdist.operators import build_dag
    from tfdist.operators.links import TensorBoardLink

    key = types.SimpleNamespace(dag_id="digits_test", run_id="manual__2026-11-24T10:00:00+00:00")
    named = build_dag(make_spec(str(tmp_path), training={"tensorboard_url": "https://tb.example.com/ml/"}))
    served = DagSerialization.from_dict(DagSerialization.to_dict(named)).get_task("train")  # what the API server reads
    assert TensorBoardLink().get_link(served, ti_key=key) == (
        f"https://tb.example.com/ml/?runFilter=%5E{run_key(key.run_id)}%2F#timeseries"
    )
    unnamed = build_dag(make_spec(str(tmp_path))).get_task("train")
    assert TensorBoardLink().get_link(unnamed, ti_key=key) == ""
    monkeypatch.setenv("AIRFLOW__TFDIST__TENSORBOARD_URL", "http://tensorboard:6006")
    assert TensorBoardLink().get_link(unnamed, ti_key=key).startswith("http://tensorboard:6006/?runFilter=%5Emanual__")


def test_every_stage_links_to_its_run_and_an_embedded_one_to_its_pipeline(tmp_path, monkeypatch):
    from airflow.sdk import DAG

    from tfdist.operators.dag import build_dag, build_task_group

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    run = "run=manual__2026-11-24T10%3A00%3A00%2B00%3A00"
    own = build_dag(make_spec(str(tmp_path)))
    assert {TrainingRunLink().get_link(t, ti_key=KEY) for t in own.tasks} == {
        f"/plugin/training-runs/tfdist/ui/digits_test?{run}"
    }
    spec = make_spec(str(tmp_path))
    del spec["schedule"]  # the host DAG's
    with DAG("host", schedule=None):
        group = build_task_group(spec)
    task = next(iter(group.children.values()))
    host_key = types.SimpleNamespace(dag_id="host", run_id=KEY.run_id)
    page = f"/plugin/training-runs/tfdist/ui/host.digits_test?{run}&version=3"
    assert run_page_url(task, host_key, version=3) == page
