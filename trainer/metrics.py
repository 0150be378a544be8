"""The evaluation metrics of each label task, exact on every eval example (numpy; no TensorFlow).

Inputs are the model's outputs as the contract gives them (docs/tabular.md): multiclass the probabilities
``[n, classes]`` and the class indices; binary the positive class's probability ``[n]`` and 0/1 labels; regression
the prediction ``[n]`` and the target, both in the target's units. A metric the data leaves undefined (an AUC with
one class only, R² of a constant target) is None."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfdist.contract.data_records import LabelEntry
from tfdist.contract.publish_records import ClassScore

EPSILON = 1e-7
"""Probabilities are clipped to [EPSILON, 1 - EPSILON] in the losses, as Keras's cross-entropies do."""

Metrics = dict[str, float | None]


def multiclass(probabilities: np.ndarray, labels: np.ndarray, names: Sequence[str]) -> Metrics:
    """``loss`` (cross-entropy), and of ``names``: accuracy, top_5_accuracy."""
    picked = probabilities[np.arange(len(labels)), labels]
    found: Metrics = {"loss": float(-np.log(np.clip(picked, EPSILON, 1.0)).mean())}
    if "accuracy" in names:
        found["accuracy"] = float((probabilities.argmax(axis=1) == labels).mean())
    if "top_5_accuracy" in names:
        top5 = np.argsort(-probabilities, axis=1, kind="stable")[:, :5]
        found["top_5_accuracy"] = float((top5 == labels[:, None]).any(axis=1).mean())
    return found


def binary(probability: np.ndarray, labels: np.ndarray, names: Sequence[str]) -> Metrics:
    """``loss`` (log loss), and of ``names``: log_loss, auc, pr_auc, accuracy (at 0.5), calibration."""
    p, y = probability.astype(np.float64), labels.astype(bool)
    clipped = np.clip(p, EPSILON, 1 - EPSILON)
    loss = float(-np.where(y, np.log(clipped), np.log(1 - clipped)).mean())
    every = {
        "log_loss": lambda: loss,
        "auc": lambda: roc_auc(p, y),
        "pr_auc": lambda: average_precision(p, y),
        "accuracy": lambda: float(((p >= 0.5) == y).mean()),
        "calibration": lambda: float(p.mean() / y.mean()) if y.any() else None,
    }
    return {"loss": loss} | {name: every[name]() for name in names}


def regression(
    prediction: np.ndarray, target: np.ndarray, names: Sequence[str], loss: str, std: float = 1.0
) -> Metrics:
    """``loss`` as training computes it (``mse`` or ``huber`` with delta 1, on errors in standardized units: divided
    by ``std``), and of ``names``, in the target's units: mse, rmse, mae, r2."""
    error = prediction.astype(np.float64) - target.astype(np.float64)
    scaled = np.abs(error) / std
    losses = np.where(scaled <= 1, 0.5 * scaled**2, scaled - 0.5) if loss == "huber" else scaled**2
    mse = float((error**2).mean())
    spread = float(((target - target.mean()) ** 2).sum())
    every = {
        "mse": lambda: mse,
        "rmse": lambda: mse**0.5,
        "mae": lambda: float(np.abs(error).mean()),
        "r2": lambda: 1 - float((error**2).sum()) / spread if spread else None,
    }
    return {"loss": float(losses.mean())} | {name: every[name]() for name in names}


def of_task(
    label: LabelEntry, loss: str, names: Sequence[str], outputs: np.ndarray, labels: np.ndarray
) -> tuple[Metrics, dict[str, ClassScore] | None]:
    """(the metrics, per class name its examples and accuracy: None for regression) of the task of ``label`` (the
    data manifest's)."""
    task, classes = label.task, label.class_names
    if task == "multiclass":
        return multiclass(outputs, labels, names), per_class(outputs.argmax(axis=1), labels, classes)
    if task == "binary":
        return binary(outputs, labels, names), per_class((outputs >= 0.5).astype(np.int64), labels, classes)
    return regression(outputs, labels, names, loss, label.std or 1.0), None


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank from 1 (smallest), tied values sharing their ranks' mean."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


def roc_auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """The area under the ROC curve: the chance a positive scores above a negative, ties counted half
    (Mann–Whitney U from average ranks); None without both classes."""
    positives, negatives = int(positive.sum()), int((~positive).sum())
    if not positives or not negatives:
        return None
    u = average_ranks(score)[positive].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def average_precision(score: np.ndarray, positive: np.ndarray) -> float | None:
    """The area under the precision-recall curve as average precision: the precision at each distinct score
    threshold, weighted by the recall it adds (scikit-learn's definition); None without positives."""
    if not positive.any():
        return None
    order = np.argsort(-score, kind="stable")
    ordered, hits = score[order], positive[order]
    last_of_ties = np.r_[ordered[1:] != ordered[:-1], True]
    true_positives = np.cumsum(hits)[last_of_ties]
    precision = true_positives / (np.flatnonzero(last_of_ties) + 1)
    recall_added = np.diff(np.r_[0, true_positives]) / true_positives[-1]
    return float((recall_added * precision).sum())


def per_class(predicted: np.ndarray, labels: np.ndarray, classes: Sequence[str | None]) -> dict[str, ClassScore]:
    """Per class name: its eval examples, and the share of them predicted as that class (None: no example)."""
    found = {}
    for index, name in enumerate(classes):
        mine = labels == index
        accuracy = float((predicted[mine] == index).mean()) if mine.any() else None
        found[str(name)] = ClassScore(examples=int(mine.sum()), accuracy=accuracy)
    return found
