"""EvaluateOperator: checkpoint validation and the metric gate."""

from __future__ import annotations

import os
from typing import Any

from operators.base import StageOperator, read_json
from operators.plan import Plan


class ModelNotBlessed(RuntimeError):
    """The checkpoint failed validation: export must not run."""


class EvaluateOperator(StageOperator):
    """Restores the latest checkpoint, checks it, evaluates it on the eval shards and applies the thresholds."""

    stage = "evaluate"

    def result(self, plan: Plan) -> dict[str, Any]:
        blessing = read_json(os.path.join(plan.layout.eval_dir, "blessing.json"))
        if not blessing["blessed"]:
            raise ModelNotBlessed("model not blessed: " + "; ".join(blessing["failures"]))
        return blessing
