"""trainer/train_metrics.py: the step vector's loss and sums by task, and the train metrics made from them,
checked against plain numpy on a few examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.trainer.labels import label_entry
from tfdist.trainer.train_metrics import AUC_BUCKETS, TaskSums, auc


def test_the_auc_of_bucket_counts_is_the_share_of_pairs_ranked_right_ties_counting_half():
    positives, negatives = np.zeros(4), np.zeros(4)
    positives[[3, 2]] = 1  # buckets: 0 lowest probability .. 3 highest
    negatives[[2, 0]] = 1
    # pairs (p, n): (3, 2) right, (3, 0) right, (2, 2) tied, (2, 0) right → 3.5 of 4
    assert auc(positives, negatives) == pytest.approx(3.5 / 4)
    assert auc(negatives[::-1].copy(), positives[::-1].copy()) == pytest.approx(3.5 / 4)
    assert auc(positives, np.zeros(4)) is None and auc(np.zeros(4), negatives) is None


def test_binary_sums_count_correct_predictions_and_each_class_per_probability_bucket(tf):
    task = TaskSums(label_entry("binary", ["no", "yes"]), "binary_crossentropy")
    labels = tf.constant([1, 0, 1, 0], tf.int64)
    outputs = tf.constant([[0.9], [0.2], [0.4], [0.95]])
    sums = task.sums(tf, labels, outputs).numpy()
    assert task.size == len(sums) + 1 == 2 + 2 * AUC_BUCKETS
    negatives, positives = sums[1 : 1 + AUC_BUCKETS], sums[1 + AUC_BUCKETS :]
    assert sums[0] == 2  # 0.9 → 1 and 0.2 → 0 right; 0.4 and 0.95 wrong
    assert np.flatnonzero(positives).tolist() == [80, 180] and np.flatnonzero(negatives).tolist() == [40, 190]
    losses = task.losses(tf, labels, outputs).numpy()
    p, y = np.array([0.9, 0.2, 0.4, 0.95]), np.array([1, 0, 1, 0])
    assert losses == pytest.approx(-(y * np.log(p) + (1 - y) * np.log(1 - p)), rel=1e-5)
    loss, metrics = task.summarized(np.concatenate([[losses.sum() * 2], sums * 2]), steps=2, examples=8)
    assert loss == pytest.approx(losses.sum()) and metrics == {"accuracy": 0.5, "auc": 0.5}


def test_multiclass_sums_count_the_likeliest_class_right(tf):
    task = TaskSums(label_entry("multiclass", ["a", "b", "c"]), "sparse_categorical_crossentropy")
    outputs = tf.constant([[0.1, 0.8, 0.1], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    sums = task.sums(tf, tf.constant([1, 2, 2], tf.int64), outputs).numpy()
    assert task.size == 2 and sums.tolist() == [2.0]
    assert task.metrics(sums, 3) == {"accuracy": pytest.approx(2 / 3)}


def test_a_regressions_loss_is_on_standardized_values_and_its_rmse_in_the_targets_units(tf):
    task = TaskSums(label_entry("regression", None, std=2.0), "mse")
    labels, outputs = tf.constant([1.0, 3.0]), tf.constant([[2.0], [7.0]])
    assert task.losses(tf, labels, outputs).numpy() == pytest.approx([(1 / 2) ** 2, (4 / 2) ** 2])
    sums = task.sums(tf, labels, outputs).numpy()
    assert sums.tolist() == [17.0]  # 1 + 16, in the target's units
    assert task.metrics(sums, 2) == {"rmse": pytest.approx(math.sqrt(17 / 2))}
    assert task.summarized(np.array([3.0, 17.0]), 0, 0)[0] == 3.0  # no step: no division by zero
