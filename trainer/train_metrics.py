"""The training loss and the train metrics by task (docs/tabular.md: "Training progress and curves").

A step returns one float vector: its loss, then the sums its task's metrics are made of (multiclass: correct
predictions; binary: correct predictions at 0.5, then per probability bucket the negatives, then the positives;
regression: the squared error in the target's units). Sums add up exactly over steps, replicas, workers and ranks,
so the metrics, AUC included, are those of every example trained on, whichever the mode."""

from __future__ import annotations

import math

import numpy as np

from tfdist.contract.data_records import LabelEntry

AUC_BUCKETS = 200
"""Probability buckets of the binary task's AUC (ties within a bucket count half)."""
LOSSES = {
    "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
    "binary_crossentropy": "BinaryCrossentropy",
    "mse": "MeanSquaredError",
    "huber": "Huber",
}


class TaskSums:
    """The loss and the sums of one task (``manifest.label``), trained with the loss ``loss`` (``Spec.loss``)."""

    def __init__(self, label: LabelEntry, loss: str) -> None:
        import keras

        self.task = label.task
        self.mean, self.std = label.standardization
        self.size = 1 + {"multiclass": 1, "binary": 1 + 2 * AUC_BUCKETS, "regression": 1}[self.task]
        """Of the step's vector: the loss and the sums."""
        self.loss_fn = getattr(keras.losses, LOSSES[loss])(reduction=None)

    def losses(self, tf, labels, outputs):
        """Per example: the loss of the model's ``outputs``; a regression's on standardized values."""
        if self.task == "multiclass":
            return self.loss_fn(labels, outputs)
        target = tf.cast(labels, tf.float32)[:, None]
        if self.task == "binary":
            return self.loss_fn(target, outputs)
        return self.loss_fn((target - self.mean) / self.std, (outputs - self.mean) / self.std)

    def sums(self, tf, labels, outputs):
        """The metrics' sums over the batch, float32 [size - 1]."""
        if self.task == "multiclass":
            return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(outputs, -1), labels), tf.float32))[None]
        target = tf.cast(labels, tf.float32)
        if self.task == "regression":
            return tf.reduce_sum(tf.square(outputs[:, 0] - target))[None]
        probability, positive = outputs[:, 0], tf.cast(labels, tf.int32)
        correct = tf.reduce_sum(tf.cast(tf.equal(probability >= 0.5, positive == 1), tf.float32))
        bucket = tf.clip_by_value(tf.cast(probability * AUC_BUCKETS, tf.int32), 0, AUC_BUCKETS - 1)
        counts = tf.math.bincount(bucket + AUC_BUCKETS * positive, minlength=2 * AUC_BUCKETS, dtype=tf.float32)
        return tf.concat([correct[None], counts], 0)  # the negatives per bucket, then the positives

    def summarized(self, sums: np.ndarray, steps: int, examples: int) -> tuple[float, dict[str, float | None]]:
        """(the mean loss of ``steps``, the train metrics of their ``examples``) from the sum of their step vectors."""
        return float(sums[0]) / max(steps, 1), self.metrics(sums[1:], examples)

    def metrics(self, sums: np.ndarray, examples: int) -> dict[str, float | None]:
        """The train metrics of ``sums`` (the vector's without the loss) over ``examples``."""
        n = max(examples, 1)
        if self.task == "multiclass":
            return {"accuracy": float(sums[0]) / n}
        if self.task == "regression":
            return {"rmse": math.sqrt(float(sums[0]) / n)}
        negatives, positives = np.split(np.asarray(sums[1:], np.float64), 2)
        return {"accuracy": float(sums[0]) / n, "auc": auc(positives, negatives)}


def auc(positives: np.ndarray, negatives: np.ndarray) -> float | None:
    """The ROC AUC of positives and negatives counted per probability bucket (None without both): the trapezoids
    under the curve through every bucket boundary, highest probabilities first."""
    p, n = positives.sum(), negatives.sum()
    if not p or not n:
        return None
    tpr = np.concatenate([[0.0], np.cumsum(positives[::-1]) / p])
    fpr = np.concatenate([[0.0], np.cumsum(negatives[::-1]) / n])
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))
