"""operators/train.py: the train task links to TensorBoard where the spec names one, and keeps it serialized."""

from __future__ import annotations

from tests.support.specs import make_spec
from tfdist.operators.links import TensorBoardLink, TrainingRunLink
from tfdist.operators.train import DistributedTrainOperator


def test_train_carries_the_specs_tensorboard_and_links_to_it_and_to_its_run(tmp_path):
    spec = make_spec(str(tmp_path), training={"tensorboard_url": "https://tb.example.com/"})
    task = DistributedTrainOperator(task_id="train", spec=spec)
    assert task.tensorboard_url == "https://tb.example.com/"
    assert "tensorboard_url" in DistributedTrainOperator.get_serialized_fields()
    assert [type(link) for link in task.operator_extra_links] == [TrainingRunLink, TensorBoardLink]
    assert DistributedTrainOperator(task_id="train", spec=make_spec(str(tmp_path))).tensorboard_url is None


def test_train_runs_the_specs_training_timeout_and_its_own_retries(tmp_path):
    spec = make_spec(str(tmp_path), training={"timeout_minutes": 7}, retries={"train": 4})
    task = DistributedTrainOperator(task_id="train", spec=spec)
    assert (task.execution_timeout.total_seconds(), task.retries) == (7 * 60, 4)
