"""The evaluation metrics by task against scikit-learn's, on scores with many ties and on the edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as sk

from tests.trainer.labels import label_entry
from tfdist.contract.publish_records import ClassScore
from tfdist.trainer import metrics


@pytest.mark.parametrize("seed", range(4))
def test_binary_metrics_match_scikit_learn_with_tied_scores(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 500)
    probability = np.clip(rng.normal(0.35 + 0.3 * labels, 0.25).round(1), 0.05, 0.95)  # 11 distinct: many ties
    found = metrics.binary(probability, labels, ["auc", "pr_auc", "accuracy", "log_loss", "calibration"])
    assert found["auc"] == pytest.approx(sk.roc_auc_score(labels, probability), abs=1e-12)
    assert found["pr_auc"] == pytest.approx(sk.average_precision_score(labels, probability), abs=1e-12)
    assert found["accuracy"] == pytest.approx(sk.accuracy_score(labels, probability >= 0.5))
    assert found["log_loss"] == found["loss"] == pytest.approx(sk.log_loss(labels, probability), rel=1e-9)
    assert found["calibration"] == pytest.approx(probability.mean() / labels.mean())


def test_auc_counts_ties_half_and_is_undefined_with_one_class():
    assert metrics.roc_auc(np.array([0.5, 0.5, 0.9]), np.array([False, True, True])) == 0.75
    assert metrics.binary(np.array([0.2, 0.7]), np.array([1, 1]), ["auc", "calibration"])["auc"] is None
    negatives_only = metrics.binary(np.array([0.2, 0.7]), np.array([0, 0]), ["pr_auc", "calibration"])
    assert negatives_only["pr_auc"] is None and negatives_only["calibration"] is None


@pytest.mark.parametrize("seed", range(3))
def test_multiclass_metrics_match_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(400, 8))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, 8, 400)
    found = metrics.multiclass(probabilities, labels, ["accuracy", "top_5_accuracy"])
    assert found["loss"] == pytest.approx(sk.log_loss(labels, probabilities, labels=range(8)), rel=1e-9)
    assert found["accuracy"] == pytest.approx(sk.accuracy_score(labels, probabilities.argmax(axis=1)))
    assert found["top_5_accuracy"] == pytest.approx(sk.top_k_accuracy_score(labels, probabilities, k=5))


@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_regression_metrics_in_target_units_and_the_loss_in_standardized_units(loss):
    rng = np.random.default_rng(7)
    target = rng.normal(4000, 3000, 300)
    prediction = target + rng.normal(0, 1500, 300)
    std = 3000.0
    found = metrics.regression(prediction, target, ["mse", "rmse", "mae", "r2"], loss, std)
    assert found["mse"] == pytest.approx(sk.mean_squared_error(target, prediction), rel=1e-12)
    assert found["rmse"] == pytest.approx(sk.root_mean_squared_error(target, prediction), rel=1e-12)
    assert found["mae"] == pytest.approx(sk.mean_absolute_error(target, prediction), rel=1e-12)
    assert found["r2"] == pytest.approx(sk.r2_score(target, prediction), rel=1e-12)
    import keras

    expected = {"mse": keras.losses.MeanSquaredError(), "huber": keras.losses.Huber(delta=1.0)}[loss]
    trained = float(expected((target / std).astype(np.float32), (prediction / std).astype(np.float32)))
    assert found["loss"] == pytest.approx(trained, rel=1e-5)
    assert metrics.regression(np.array([1.0, 2.0]), np.full(2, 2.0), ["r2"], loss)["r2"] is None  # constant target


def test_per_class_and_the_task_dispatch_key_by_class_name():
    label = label_entry("binary", ["no", "yes"])
    found, by_class = metrics.of_task(
        label, "binary_crossentropy", ["accuracy"], np.array([0.9, 0.2, 0.4]), np.array([1, 1, 0])
    )
    assert found["accuracy"] == pytest.approx(2 / 3)
    assert by_class == {"no": ClassScore(examples=1, accuracy=1.0), "yes": ClassScore(examples=2, accuracy=0.5)}
    label = label_entry("multiclass", ["Adelie", "Chinstrap", "Gentoo"])
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]])
    _, by_class = metrics.of_task(label, "sparse_categorical_crossentropy", [], probabilities, np.array([0, 0]))
    assert by_class == {
        "Adelie": ClassScore(examples=2, accuracy=0.5),
        "Chinstrap": ClassScore(examples=0, accuracy=None),
        "Gentoo": ClassScore(examples=0, accuracy=None),
    }
    found, by_class = metrics.of_task(
        label_entry("regression", None, std=2.0), "mse", [], np.array([1.0]), np.array([3.0])
    )
    assert found == {"loss": 1.0} and by_class is None
