"""What each label task trains with and reports (tfdist.spec.tasks): the directions of its metrics."""

from __future__ import annotations

from tfdist.spec.tasks import ALL_METRICS, DEFAULT_METRICS, METRICS, TASKS, TRAIN_METRIC, direction


def test_the_loss_is_lower_is_better_for_every_task_and_each_metric_has_its_tasks_direction():
    assert {direction(task, "loss") for task in TASKS} == {"lower_is_better"}
    assert (direction("multiclass", "top_5_accuracy"), direction("regression", "rmse")) == (
        "higher_is_better",
        "lower_is_better",
    )
    assert direction("binary", "calibration") is None and direction("regression", "auc") is None


def test_the_default_and_train_metrics_are_metrics_of_their_task():
    for task in TASKS:
        assert set(DEFAULT_METRICS[task]) <= set(METRICS[task]) and TRAIN_METRIC[task] in METRICS[task]
    assert ALL_METRICS[:3] == ("accuracy", "top_5_accuracy", "auc") and len(set(ALL_METRICS)) == len(ALL_METRICS)
