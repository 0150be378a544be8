"""PrepareDataOperator: raw input of the run's window → train/eval TFRecord shards + manifest."""

from __future__ import annotations

from typing import Any

from tfdist.operators.base import StageOperator


class PrepareDataOperator(StageOperator):
    """Shards the run's raw input; ``source`` (templated) replaces the spec's ``data.source``. XCom: the data
    directory, example counts and the input's fingerprint."""

    stage = "prepare_data"
    template_fields = (*StageOperator.template_fields, "source")

    def __init__(self, *, source: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source

    def plan_overrides(self) -> dict[str, Any]:
        return {"source": self.source or None}
