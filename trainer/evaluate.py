"""Stage evaluate: checkpoint validation and the gate, written as ``blessing.json`` (and ``metrics.json``).

1. Integrity of each candidate checkpoint (the latest, or every retained one): it restores into the
   spec's model, every weight is finite, its step is the one training reported, and the data
   manifest it was trained on is this run's.
2. Metrics on every eval example (not a sample) and accuracy per label value.
3. Value thresholds, and change thresholds against the baseline: the newest model published as of
   this run's data interval, scored on this run's eval data.

Exit code 0 with a decision either way; EXIT_REFUSED when a candidate fails an integrity check."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract import (
    BLESSING,
    EXIT_REFUSED,
    MANIFEST,
    EvaluateArgs,
    gate,
    read_json,
    registry,
    sha256_file,
    write_json_atomic,
)
from tfdist.trainer import data
from tfdist.trainer.models import IntegrityError, restore_checked
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say
from tfdist.trainer.summaries import scalar_writer

if TYPE_CHECKING:
    from tfdist.spec import Spec


def score(tf, predict, data_dir: str, manifest: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, labels) of every eval example, ``predict`` mapping a feature dict to probabilities."""
    probabilities, labels = [], []
    for features, batch_labels in data.eval_dataset(tf, data_dir, manifest):
        probabilities.append(np.asarray(predict(features)))
        labels.append(batch_labels.numpy())
    return np.concatenate(probabilities), np.concatenate(labels)


def compute_metrics(probabilities: np.ndarray, labels: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    picked = probabilities[np.arange(len(labels)), labels]
    metrics = {"loss": float(-np.log(np.clip(picked, 1e-7, 1.0)).mean())}
    if "accuracy" in names:
        metrics["accuracy"] = float((probabilities.argmax(axis=1) == labels).mean())
    if "top_5_accuracy" in names:
        top5 = np.argsort(-probabilities, axis=1)[:, :5]
        metrics["top_5_accuracy"] = float((top5 == labels[:, None]).any(axis=1).mean())
    return metrics


def per_class(probabilities: np.ndarray, labels: np.ndarray, num_classes: int) -> dict[str, dict[str, Any]]:
    predicted = probabilities.argmax(axis=1)
    return {
        str(c): {
            "examples": int((labels == c).sum()),
            "accuracy": float((predicted[labels == c] == c).mean()) if (labels == c).any() else None,
        }
        for c in range(num_classes)
    }


def deltas(metrics: dict[str, float], baseline: dict[str, float]) -> dict[str, dict[str, float | None]]:
    return {
        k: {
            "absolute": metrics[k] - baseline[k],
            "relative": (metrics[k] - baseline[k]) / abs(baseline[k]) if baseline[k] else None,
        }
        for k in metrics
        if k in baseline
    }


def check_candidate(tf, spec: Spec, manifest, data_dir: str, manifest_sha: str, path: str, train_result: dict):
    """Restore one checkpoint and run every integrity check; return the model or raise IntegrityError."""
    model, step = restore_checked(tf, spec, manifest, data_dir, path)
    non_finite = [w.path for w in model.weights if not np.isfinite(w.numpy()).all()]
    if non_finite:
        raise IntegrityError("finite_weights", path, f"non-finite values in {', '.join(non_finite[:5])}")
    named_step = int(path.rsplit("-", 1)[1])
    if step != named_step or (path == train_result["checkpoint"] and step != train_result["final_step"]):
        raise IntegrityError(
            "step",
            path,
            f"holds step {step}; training reported step {train_result['final_step']} for {train_result['checkpoint']}",
        )
    if train_result["data_manifest_sha256"] != manifest_sha:
        raise IntegrityError(
            "data_manifest",
            path,
            "was trained on another data manifest than this run's "
            f"({train_result['data_manifest_sha256'][:12]} ≠ {manifest_sha[:12]})",
        )
    return model, step


def serving_predict(tf, path: str):
    """A SavedModel's serving signature as a feature dict → probabilities function."""
    signature = tf.saved_model.load(path).signatures["serving_default"]
    return lambda features: signature(**features)["probabilities"]


def baseline_metrics(tf, baseline: dict, data_dir: str, manifest: dict, names: Sequence[str]) -> dict[str, float]:
    """The baseline SavedModel's metrics on this run's eval data."""
    probabilities, labels = score(tf, serving_predict(tf, baseline["path"]), data_dir, manifest)
    return compute_metrics(probabilities, labels, names)


RESULT_FIELDS = ("blessed", "gate", "run_id", "checkpoint", "step", "eval_examples", "metrics", "deltas", "failures")
"""What of the blessing record the task's XCom holds (the whole record is eval/blessing.json)."""


def scored_candidates(
    tf, args: EvaluateArgs, spec: Spec, run: dict, manifest: dict, train_result: dict
) -> list[dict[str, Any]]:
    """Each candidate checkpoint's step, metrics and accuracy per label value, once it passes every integrity
    check; the first one failing one refuses the stage, its blessing record naming the check."""
    manifest_sha = sha256_file(os.path.join(args.data, MANIFEST))
    candidates = [train_result["checkpoint"]]
    if spec.validation.checkpoint.mode == "best":
        candidates = list(tf.train.get_checkpoint_state(args.checkpoints).all_model_checkpoint_paths)
    scored = []
    for path in candidates:
        try:
            model, step = check_candidate(tf, spec, manifest, args.data, manifest_sha, path, train_result)
        except IntegrityError as exc:
            write_json_atomic(
                os.path.join(args.out, BLESSING),
                {
                    "blessed": False,
                    "checkpoint": path,
                    "integrity": {"failed": exc.check},
                    "failures": [str(exc)],
                    "report": [str(exc)],
                    "run_id": run["run_id"],
                },
            )
            fail(str(exc), EXIT_REFUSED)
        probabilities, labels = score(tf, functools.partial(model, training=False), args.data, manifest)
        scored.append(
            {
                "checkpoint": path,
                "step": step,
                "examples": len(labels),
                "metrics": compute_metrics(probabilities, labels, spec.metrics),
                "per_class": per_class(probabilities, labels, manifest["label"]["num_classes"]),
            }
        )
        say(
            f"{path} (step {step}): restores, weights finite, data manifest matches; "
            + ", ".join(f"{k} {v:.4f}" for k, v in scored[-1]["metrics"].items())
        )
    return scored


def compare_with_baseline(
    tf, args: EvaluateArgs, spec: Spec, run: dict, manifest: dict, metrics: dict[str, float]
) -> tuple[dict | None, dict, list[str]]:
    """(the baseline's record for blessing.json, the metrics' changes against it, the report's lines about it).
    Without a baseline, or with one that cannot score this run's eval data, only value thresholds apply."""
    baseline = registry.baseline_for(args.model_dir, run["data_interval_end"], run["run_id"])
    if baseline is None:
        if not spec.validation.change_thresholds:
            return None, {}, []
        return (
            None,
            {},
            [
                "  change thresholds: no baseline (nothing published as of this data interval); "
                "only value thresholds apply"
            ],
        )
    try:
        base = baseline_metrics(tf, baseline, args.data, manifest, spec.metrics)
    except Exception as exc:
        return (
            {"version": baseline["version"], "path": baseline["path"], "error": str(exc)},
            {},
            [
                f"  baseline version {baseline['version']} cannot score this run's eval data ({exc}); "
                "only value thresholds apply"
            ],
        )
    changes = deltas(metrics, base)
    record = {"version": baseline["version"], "path": baseline["path"], "run_id": baseline["run_id"], "metrics": base}
    return (
        record,
        changes,
        [
            f"  vs baseline version {baseline['version']}: {k} {base[k]:.4f} → {metrics[k]:.4f} ({d['absolute']:+.4f})"
            for k, d in changes.items()
        ],
    )


def blessing_record(
    tf, args: EvaluateArgs, spec: Spec, run: dict, manifest: dict, scored: list[dict[str, Any]]
) -> dict[str, Any]:
    """The decision on the best-scored candidate: the gate's thresholds applied to its metrics, and the report."""
    metric, direction = spec.checkpoint_selection
    sign = 1 if direction == "higher_is_better" else -1
    chosen = max(scored, key=lambda c: sign * c["metrics"][metric]) if len(scored) > 1 else scored[0]
    metrics = chosen["metrics"]
    report = [f"validated {chosen['checkpoint']} on {chosen['examples']} eval examples"]
    if len(scored) > 1:
        report.append(f"  chosen among {len(scored)} retained checkpoints by {metric}")
    report += [f"  {k} = {v:.4f}" for k, v in metrics.items()]
    baseline, changes, lines = compare_with_baseline(tf, args, spec, run, manifest, metrics)
    report += lines
    gate_rules = spec.validation.model_dump(mode="json")  # as blessing.json records them
    checks = gate.checks(
        metrics, gate_rules["thresholds"], gate_rules["change_thresholds"], (baseline or {}).get("metrics")
    )
    failures = gate.failures(checks, baseline["version"] if baseline else None)
    decided_by = gate.decided_by(gate_rules, bool(changes))
    if spec.validation.allow_unvalidated:
        report.append("  published without a gate: validation.allow_unvalidated is set, no threshold was applied")
    report.append(("BLESSED" if not failures else "NOT BLESSED: " + "; ".join(failures)) + f" (gate: {decided_by})")
    return {
        "blessed": not failures,
        "gate": decided_by,
        "run_id": run["run_id"],
        "data_interval_end": run["data_interval_end"],
        "checkpoint": chosen["checkpoint"],
        "step": chosen["step"],
        "integrity": {"checks": ["restores", "finite_weights", "step", "data_manifest"], "failed": None},
        "eval_examples": chosen["examples"],
        "metrics": metrics,
        "per_class": chosen["per_class"],
        "candidates": [{k: c[k] for k in ("checkpoint", "step", "metrics")} for c in scored],
        "thresholds": gate_rules["thresholds"],
        "change_thresholds": gate_rules["change_thresholds"],
        "baseline": baseline,
        "deltas": changes,
        "checks": checks,
        "failures": failures,
        "report": report,
    }


def main() -> None:
    args = EvaluateArgs.parse()
    spec, run = load_spec(args.spec), read_json(args.run)
    manifest = data.verified_manifest(args.data, "eval")
    if not os.path.exists(args.train_result):
        fail(f"no training result at {args.train_result}: run the train task first")
    train_result = read_json(args.train_result)
    tf = import_tensorflow()
    scored = scored_candidates(tf, args, spec, run, manifest, train_result)
    blessing = blessing_record(tf, args, spec, run, manifest, scored)
    write_json_atomic(
        os.path.join(args.out, "metrics.json"), {"metrics": blessing["metrics"], "per_class": blessing["per_class"]}
    )
    write_json_atomic(os.path.join(args.out, BLESSING), blessing)
    scalar_writer(tf, args.tensorboard)(blessing["step"], blessing["metrics"])
    write_json_atomic(
        args.result,
        {k: blessing[k] for k in RESULT_FIELDS}
        | {"baseline_version": blessing["baseline"] and blessing["baseline"]["version"]},
    )
    for line in blessing["report"]:
        say(line)


if __name__ == "__main__":
    run_stage(main)
