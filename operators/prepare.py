"""PrepareDataOperator: raw input of the run's window → train/eval TFRecord shards + manifest."""

from __future__ import annotations

import os
from typing import Any

from operators.base import StageOperator, read_json
from operators.plan import Plan


class PrepareDataOperator(StageOperator):
    """Shards the run's raw input; ``source`` (templated) replaces the spec's ``data.source``."""

    stage = "prepare_data"
    template_fields = (*StageOperator.template_fields, "source")

    def __init__(self, *, source: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source

    def plan_overrides(self) -> dict[str, Any]:
        return {"source": self.source or None}

    def result(self, plan: Plan, context: Any) -> dict[str, Any]:
        manifest = read_json(os.path.join(plan.layout.data_dir, "manifest.json"))
        return {
            "data_dir": plan.layout.data_dir,
            "train_examples": manifest["train"]["examples"],
            "eval_examples": manifest["eval"]["examples"],
            "input_fingerprint": manifest["input_fingerprint"],
        }
