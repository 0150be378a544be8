"""DistributedTrainOperator: multi-worker training of the spec's model on the run's shards."""

from __future__ import annotations

from typing import Any

from operators.base import StageOperator, read_json
from operators.plan import Plan


class DistributedTrainOperator(StageOperator):
    """Starts every worker through the spec's launcher and backend; XCom: checkpoint, step, metrics, throughput."""

    stage = "train"
    ui_color = "#ffcc80"

    def result(self, plan: Plan, context: Any) -> dict[str, Any]:
        return read_json(plan.layout.train_result)
