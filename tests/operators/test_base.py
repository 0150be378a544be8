"""operators/base.py: what a stage operator knows of its run (overrides, window, plan) and how it retries."""

from __future__ import annotations

import datetime as dt
import types

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.support.plans import plan_for
from tests.support.specs import START, make_spec
from tfdist.contract.layout import run_key
from tfdist.operators.base import earlier_windows
from tfdist.operators.dag import build_dag

END = START + dt.timedelta(days=1)


def context(conf=None, params=None, **fields) -> dict:
    """The parts of a task's context the operator reads: the run's conf, the DAG's Params, its data interval."""
    return {"dag_run": types.SimpleNamespace(conf=conf), "params": params or {}, "run_id": "manual__1", **fields}


def test_tasks_retry_as_the_spec_says():
    from tfdist.operators.dag import build_dag
    from tfdist.spec import load_spec

    dag = build_dag(load_spec(make_spec("/tmp/tfdist-unused", retries={"train": 3, "delay_seconds": 5})))
    assert {t.task_id: t.retries for t in dag.tasks} == {
        "prepare_data": 1,
        "validate_data": 1,
        "train": 3,
        "evaluate": 1,
        "export": 1,
    }
    assert {t.retry_delay.total_seconds() for t in dag.tasks} == {5}


def test_the_earlier_windows_are_every_recorded_runs_and_none_where_the_root_is_not_there(tmp_path):
    assert earlier_windows(str(tmp_path / "absent"), "digits_test") is None
    plan_for(str(tmp_path), "scheduled__2026-11-20")
    plan_for(str(tmp_path), "scheduled__2026-11-21", day=dt.date(2026, 11, 21))
    assert sorted(earlier_windows(str(tmp_path), "digits_test")) == [
        ("scheduled__2026-11-20", END),
        ("scheduled__2026-11-21", END + dt.timedelta(days=1)),
    ]


def test_a_run_overrides_only_what_the_spec_declares_overridable_and_only_what_it_changes(tmp_path):
    task = build_dag(make_spec(str(tmp_path), overridable=["training.epochs"])).get_task("train")
    assert task.effective_spec(context(params={"training.epochs": 4})) == (task.spec, {})
    spec, changed = task.effective_spec(context(conf={"training.epochs": 2}, params={"training.epochs": 4}))
    assert (spec.training.epochs, changed) == (2, {"training.epochs": 2})
    with pytest.raises(AirflowFailException, match=r"training\.num_workers: not overridable in this pipeline"):
        task.effective_spec(context(conf={"training.num_workers": 3}))


def test_an_embedded_pipeline_reads_only_its_own_mapping_of_the_conf(tmp_path):
    from airflow.sdk import DAG

    from tfdist.operators.dag import build_task_group

    spec = make_spec(str(tmp_path), overridable=["training.epochs"])
    del spec["schedule"]  # the host DAG's
    with DAG("host", schedule=None):
        group = build_task_group(spec)
    task = group.children["digits_test.train"]
    own = {"digits_test": {"training.epochs": 2}, "host_setting": 1}
    assert task.run_overrides(context(conf=own, params={"training.epochs": 9})) == ({"training.epochs": 2}, {})
    with pytest.raises(AirflowFailException, match=r"conf\.digits_test: must be a mapping"):
        task.run_overrides(context(conf={"digits_test": 5}))


def test_the_plan_of_a_run_with_a_data_interval_is_under_the_pipelines_runs_by_its_run_key(tmp_path):
    task = build_dag(make_spec(str(tmp_path))).get_task("prepare_data")
    plan = task.plan(context(data_interval_start=START, data_interval_end=END))
    assert plan.layout.run_dir == str(tmp_path / "digits_test" / "runs" / run_key("manual__1"))
    assert (plan.context.interval_start, plan.context.interval_end) == (START, END)
    assert plan.stage("prepare_data").task_id == "prepare_data"
