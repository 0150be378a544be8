"""operators/prepare.py: the templated ``source`` replaces the spec's data source in the run's plan."""

from __future__ import annotations

from tests.conftest import make_spec, plan_for
from tfdist.operators.prepare import PrepareDataOperator


def test_a_templated_source_replaces_the_specs_and_without_one_the_specs_holds(tmp_path):
    spec = make_spec(str(tmp_path))
    assert "source" in PrepareDataOperator.template_fields
    assert PrepareDataOperator(task_id="prepare_data", spec=spec).plan_overrides() == {"source": None}
    given = PrepareDataOperator(task_id="prepare_data", spec=spec, source=f"{tmp_path}/other/*.csv")
    assert given.plan_overrides() == {"source": f"{tmp_path}/other/*.csv"}
    rendered_empty = PrepareDataOperator(task_id="prepare_data", spec=spec, source="")
    assert rendered_empty.plan_overrides() == {"source": None}  # a template that rendered to nothing
    default = plan_for(str(tmp_path), "manual__1").stage("prepare_data").args.source
    assert all(path.startswith(f"{tmp_path}/raw/digits/") for path in default)
