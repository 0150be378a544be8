"""ExportModelOperator: publishes the blessed checkpoint as a versioned SavedModel."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset

from operators.base import StageOperator
from operators.plan import Plan


class ExportModelOperator(StageOperator):
    """Publishes the blessed checkpoint as ``<export root>/<model name>/<version>/`` and emits an event
    for the Asset ``model://<model name>`` (extra: version, path), so other DAGs can be scheduled on
    new models. ``export_root`` (templated) replaces the spec's."""

    stage = "export"
    template_fields = (*StageOperator.template_fields, "export_root")
    ui_color = "#c5e1a5"

    def __init__(self, *, export_root: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.export_root = export_root
        self.model_asset = Asset(f"model://{self.spec.export.model_name}")
        self.outlets = [*self.outlets, self.model_asset]

    def plan_overrides(self) -> dict[str, Any]:
        return {"export_root": self.export_root or None}

    def result(self, record: dict[str, Any], plan: Plan, context: Any) -> dict[str, Any]:
        context["outlet_events"][self.model_asset].extra = {"version": record["version"], "path": record["path"]}
        return record
