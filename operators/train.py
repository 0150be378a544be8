"""DistributedTrainOperator: multi-worker training of the spec's model on the run's shards."""

from __future__ import annotations

from typing import Any

from tfdist.operators.base import StageOperator
from tfdist.operators.links import TensorBoardLink, TrainingRunLink


class DistributedTrainOperator(StageOperator):
    """Starts every worker through the spec's launcher and backend; XCom: checkpoint, step, metrics, throughput,
    where training started from (the parent version, or why it started cold)."""

    stage = "train"
    ui_color = "#ffcc80"
    operator_extra_links = (TrainingRunLink(), TensorBoardLink())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tensorboard_url = self.spec.training.tensorboard_url

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        return super().get_serialized_fields() | {"tensorboard_url"}
