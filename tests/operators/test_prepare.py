"""operators/prepare.py: the templated ``source`` replaces the spec's data source in the run's plan."""

from __future__ import annotations

from airflow.sdk import DAG

from tests.operators.test_base import END, context
from tests.support.specs import START, make_spec
from tfdist.operators.prepare import PrepareDataOperator


def planned_source(spec: dict, **kwargs) -> tuple[str, ...]:
    """What the prepare stage of a run reads, as the operator plans it."""
    with DAG("digits_test", schedule=None):
        task = PrepareDataOperator(task_id="prepare_data", spec=spec, **kwargs)
    plan = task.plan(context(data_interval_start=START, data_interval_end=END))
    return plan.stage("prepare_data").args.source


def test_a_templated_source_replaces_the_specs_and_an_empty_one_leaves_the_specs(tmp_path):
    spec = make_spec(str(tmp_path))
    assert "source" in PrepareDataOperator.template_fields
    assert planned_source(spec, source=f"{tmp_path}/other/*.csv") == (f"{tmp_path}/other/*.csv",)
    the_specs = (f"{tmp_path}/raw/digits/2026-11-20/*.csv",)
    assert planned_source(spec) == planned_source(spec, source="") == the_specs  # "": a template rendered to nothing
