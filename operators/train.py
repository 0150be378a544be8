"""DistributedTrainOperator: multi-worker training of the spec's model on the run's shards."""

from __future__ import annotations

from tfdist.operators.base import StageOperator


class DistributedTrainOperator(StageOperator):
    """Starts every worker through the spec's launcher and backend; XCom: checkpoint, step, metrics, throughput."""

    stage = "train"
    ui_color = "#ffcc80"
