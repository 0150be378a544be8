"""ExportModelOperator: publishes the blessed checkpoint as a versioned SavedModel."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

from tfdist.operators.base import StageOperator
from tfdist.operators.links import PublishedVersionLink, TrainingRunLink

if TYPE_CHECKING:
    from tfdist.operators.plan import Plan


def model_asset(model_name: str) -> Asset:
    """The Asset whose events tell consumers of a model that a version was published or withdrawn."""
    return Asset(f"model://{model_name}")


class ExportModelOperator(StageOperator):
    """Publishes the blessed checkpoint as ``<export root>/<model name>/<version>/`` and emits an event
    for the Asset ``model://<model name>`` (extra: version, path, and its parent version or why it started
    cold), so other DAGs can be scheduled on new models. ``export_root`` (templated) replaces the spec's."""

    stage = "export"
    template_fields = (*StageOperator.template_fields, "export_root")
    ui_color = "#c5e1a5"
    operator_extra_links = (TrainingRunLink(), PublishedVersionLink())

    def __init__(self, *, export_root: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.export_root = export_root
        # where the training-runs page lists the published versions (with a templated export_root: the runs'
        # own export results name theirs)
        self.model_dir = os.path.join(self.spec.export_root, self.spec.export.model_name)
        self.model_asset = model_asset(self.spec.export.model_name)
        self.outlets = [*self.outlets, self.model_asset]

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        return super().get_serialized_fields() | {"model_dir"}

    def plan_overrides(self) -> dict[str, Any]:
        return {"export_root": self.export_root or None}

    def return_value(self, record: dict[str, Any], plan: Plan, context: Any) -> dict[str, Any]:
        # a record of the runtime: not imported where a DAG file is parsed
        from tfdist.contract.publish_records import ExportResult

        result = ExportResult.parse(record, f"{self.task_id}'s result")
        context["outlet_events"][self.model_asset].extra = result.model_dump(
            include={"version", "path", "parent_version", "cold_start"}
        )
        return result.payload()
