"""What each label task trains with and reports: its losses, its metrics with their directions, the defaults.

Written once here: the spec checks thresholds against it, the trainer computes these metrics, the gate and the
runs page read their directions."""

from __future__ import annotations

from typing import Literal, get_args

Task = Literal["multiclass", "binary", "regression"]
TASKS: tuple[Task, ...] = get_args(Task)
Direction = Literal["higher_is_better", "lower_is_better"]

LOSSES: dict[Task, tuple[str, ...]] = {
    "multiclass": ("sparse_categorical_crossentropy",),
    "binary": ("binary_crossentropy",),
    "regression": ("mse", "huber"),
}
"""The losses a task trains with, its default first."""

METRICS: dict[Task, dict[str, Direction | None]] = {
    "multiclass": {"accuracy": "higher_is_better", "top_5_accuracy": "higher_is_better"},
    "binary": {
        "auc": "higher_is_better",
        "pr_auc": "higher_is_better",
        "accuracy": "higher_is_better",
        "log_loss": "lower_is_better",
        "calibration": None,
    },
    "regression": {
        "rmse": "lower_is_better",
        "mae": "lower_is_better",
        "r2": "higher_is_better",
        "mse": "lower_is_better",
    },
}
"""The metrics each task reports besides ``loss`` (always lower is better), with the direction in which they
improve. 'calibration' (mean prediction / positive rate) is best at 1: it has no direction, bound it with a value
threshold ({lower: 0.9, upper: 1.1})."""

DEFAULT_METRICS: dict[Task, tuple[str, ...]] = {
    "multiclass": ("accuracy",),
    "binary": ("auc", "accuracy"),
    "regression": ("rmse", "r2"),
}
TRAIN_METRIC: dict[Task, str] = {"multiclass": "accuracy", "binary": "accuracy", "regression": "rmse"}
"""The metric the training loop reports beside the loss (progress, curves, TensorBoard)."""
ALL_METRICS: tuple[str, ...] = tuple(dict.fromkeys(m for metrics in METRICS.values() for m in metrics))


def direction(task: Task, metric: str) -> Direction | None:
    """Whether a higher or a lower value of the task's metric is better (None: neither, e.g. calibration)."""
    return "lower_is_better" if metric == "loss" else METRICS[task].get(metric)
