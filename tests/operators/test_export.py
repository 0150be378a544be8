"""operators/export.py: export publishes to the model's directory and tells the model's Asset what it published."""

from __future__ import annotations

import os

from airflow.sdk.execution_time.context import OutletEventAccessors

from tests.support.plans import plan_for
from tests.support.specs import make_spec
from tfdist.contract.publish_records import ExportResult
from tfdist.operators.export import ExportModelOperator, model_asset


def test_export_is_an_outlet_of_its_models_asset_and_names_the_model_directory(tmp_path):
    spec = make_spec(str(tmp_path))
    task = ExportModelOperator(task_id="export", spec=spec)
    assert task.model_asset == model_asset("digits_small") and task.model_asset.name == "model://digits_small"
    assert task.outlets == [task.model_asset]
    assert task.model_dir == os.path.join(tmp_path, "models", "digits_small")
    assert "model_dir" in ExportModelOperator.get_serialized_fields()
    assert task.plan_overrides() == {"export_root": None}
    elsewhere = ExportModelOperator(task_id="export", spec=spec, export_root="s3://bucket/models")
    assert elsewhere.plan_overrides() == {"export_root": "s3://bucket/models"}


def test_the_published_version_is_the_xcom_value_and_its_assets_event_extra(tmp_path):
    spec = make_spec(str(tmp_path))
    task = ExportModelOperator(task_id="export", spec=spec)
    record = ExportResult(
        path=str(tmp_path / "digits_small" / "202611210000"),
        version=202611210000,
        model_name="digits_small",
        metrics={"accuracy": 0.95},
        parent_version=None,
        cold_start="no published version to start from",
    ).payload()
    events = OutletEventAccessors()
    assert task.return_value(record, plan_for(str(tmp_path), "manual__1"), {"outlet_events": events}) == record
    assert events[task.model_asset].extra == {
        "version": 202611210000,
        "path": record["path"],
        "parent_version": None,
        "cold_start": "no published version to start from",
    }
