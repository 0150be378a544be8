"""ExportModelOperator: publishes the blessed checkpoint as a versioned SavedModel."""

from __future__ import annotations

from typing import Any

from operators.base import StageOperator, read_json
from operators.plan import Plan


class ExportModelOperator(StageOperator):
    """Writes ``<export root>/<model name>/<version>/``; ``export_root`` (templated) replaces the spec's."""

    stage = "export"
    template_fields = (*StageOperator.template_fields, "export_root")
    ui_color = "#c5e1a5"

    def __init__(self, *, export_root: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.export_root = export_root

    def plan_overrides(self) -> dict[str, Any]:
        return {"export_root": self.export_root or None}

    def result(self, plan: Plan) -> dict[str, Any]:
        return read_json(plan.layout.export_result)
