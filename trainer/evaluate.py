"""Stage evaluate: restore the trained checkpoint, check its integrity, evaluate it on every eval shard,
apply the spec's thresholds and write ``metrics.json`` and ``blessing.json`` (the gate's decision)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from trainer import data
from trainer.artifacts import read_json, write_json_atomic
from trainer.models import restore_model
from trainer.runtime import fail, import_tensorflow, load_spec, parse_args, say


def predict(tf, model, data_dir: str, manifest: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    probabilities, labels = [], []
    for features, batch_labels in data.eval_dataset(tf, data_dir, manifest):
        probabilities.append(model(features, training=False).numpy())
        labels.append(batch_labels.numpy())
    return np.concatenate(probabilities), np.concatenate(labels)


def compute_metrics(probabilities: np.ndarray, labels: np.ndarray, names: list[str]) -> dict[str, float]:
    picked = probabilities[np.arange(len(labels)), labels]
    metrics = {"loss": float(-np.log(np.clip(picked, 1e-7, 1.0)).mean())}
    if "accuracy" in names:
        metrics["accuracy"] = float((probabilities.argmax(axis=1) == labels).mean())
    if "top_5_accuracy" in names:
        top5 = np.argsort(-probabilities, axis=1)[:, :5]
        metrics["top_5_accuracy"] = float((top5 == labels[:, None]).any(axis=1).mean())
    return metrics


def per_class(probabilities: np.ndarray, labels: np.ndarray, num_classes: int) -> dict[str, dict[str, float]]:
    predicted = probabilities.argmax(axis=1)
    return {
        str(c): {"examples": int((labels == c).sum()),
                 "accuracy": float((predicted[labels == c] == c).mean()) if (labels == c).any() else None}
        for c in range(num_classes)
    }


def gate(metrics: dict[str, float], thresholds: dict[str, dict]) -> list[str]:
    """One line per violated threshold, naming metric, value, bound and margin."""
    failures = []
    for metric, bound in thresholds.items():
        value = metrics[metric]
        if bound.get("lower") is not None and value < bound["lower"]:
            failures.append(f"{metric} = {value:.4f} is below the lower bound {bound['lower']} "
                            f"by {bound['lower'] - value:.4f}")
        if bound.get("upper") is not None and value > bound["upper"]:
            failures.append(f"{metric} = {value:.4f} is above the upper bound {bound['upper']} "
                            f"by {value - bound['upper']:.4f}")
    return failures


def main() -> None:
    args = parse_args(__doc__, "data", "train-result", "out")
    spec = load_spec(args.spec)
    manifest = read_json(os.path.join(args.data, "manifest.json"))
    if not os.path.exists(args.train_result):
        fail(f"no training result at {args.train_result}: run the train task first")
    checkpoint = read_json(args.train_result)["checkpoint"]
    tf = import_tensorflow()
    try:
        model = restore_model(tf, spec, manifest, checkpoint)
    except (tf.errors.OpError, AssertionError, ValueError) as exc:
        fail(f"checkpoint {checkpoint} does not restore into the spec's model: {exc}")
    non_finite = [w.path for w in model.weights if not np.isfinite(w.numpy()).all()]
    if non_finite:
        fail(f"checkpoint {checkpoint} has non-finite values in {non_finite[:5]}")
    say(f"restored {checkpoint}: {len(model.weights)} weights, all finite")

    probabilities, labels = predict(tf, model, args.data, manifest)
    metrics = compute_metrics(probabilities, labels, spec["model"]["metrics"])
    thresholds = spec["validation"]["thresholds"]
    failures = gate(metrics, thresholds)
    report = [f"evaluated {checkpoint} on {len(labels)} eval examples"]
    report += [f"  {k} = {v:.4f}" for k, v in metrics.items()]
    report += [f"  threshold {k}: {b}" for k, b in thresholds.items()] or ["  no thresholds in the spec"]
    report.append("BLESSED" if not failures else "NOT BLESSED: " + "; ".join(failures))
    result = {
        "blessed": not failures,
        "checkpoint": checkpoint,
        "eval_examples": len(labels),
        "metrics": metrics,
        "per_class": per_class(probabilities, labels, manifest["label"]["num_classes"]),
        "thresholds": thresholds,
        "failures": failures,
        "report": report,
    }
    write_json_atomic(os.path.join(args.out, "metrics.json"), {"metrics": metrics, "per_class": result["per_class"]})
    write_json_atomic(os.path.join(args.out, "blessing.json"), result)
    for line in report:
        say(line)


if __name__ == "__main__":
    main()
