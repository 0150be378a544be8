"""Stage evaluate: checkpoint validation and the gate, written as ``blessing.json`` (and ``metrics.json``).

1. Integrity of each candidate checkpoint (the latest, or every retained one): it restores into the
   spec's model, every weight is finite, its step is the one training reported, and the data
   manifest it was trained on is this run's.
2. The label task's metrics on every eval example (not a sample), and per class its examples and accuracy
   (tfdist.trainer.metrics); with several candidates, the best by ``validation.checkpoint`` is chosen.
3. Value thresholds, and change thresholds against the baseline: the newest model published as of
   this run's data interval, scored on this run's eval data through its serving signature.

Exit code 0 with a decision either way; EXIT_REFUSED when a candidate fails an integrity check."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import TYPE_CHECKING

import numpy as np

from tfdist.contract.data_records import LabelEntry, Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import BLESSING, EVAL_METRICS, MANIFEST
from tfdist.contract.progress import CHECKPOINT_STATE, kept_checkpoints
from tfdist.contract.publish_records import (
    Blessing,
    Candidate,
    CheckpointChoice,
    ClassScore,
    Delta,
    EvalMetrics,
    EvaluateResult,
    Integrity,
    ScoredBaseline,
    UnscoredBaseline,
)
from tfdist.contract.records import Metrics, read_record, write_record
from tfdist.contract.stages import EvaluateArgs
from tfdist.contract.train_records import RunRecord, TrainResult
from tfdist.infra import storage
from tfdist.infra.jsonfiles import sha256_file
from tfdist.publishing import gate, registry
from tfdist.trainer import data, metrics, scratch
from tfdist.trainer.models import OUTPUT, IntegrityError, restore_checked
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say
from tfdist.trainer.summaries import scalar_writer, summaries_upload
from tfdist.trainer.uploads import retried

if TYPE_CHECKING:
    from tfdist.spec import Spec


def score(tf, predict, data_dir: str, manifest: Manifest) -> tuple[np.ndarray, np.ndarray]:
    """(outputs, labels) of every eval example, ``predict`` mapping a feature dict to the task's output: the
    probabilities ``[n, classes]`` (multiclass), else one value per example ``[n]``."""
    outputs, labels = [], []
    for features, batch_labels in data.eval_dataset(tf, data_dir, manifest):
        outputs.append(np.asarray(predict(features)))
        labels.append(batch_labels.numpy())
    joined = np.concatenate(outputs)
    return (joined if manifest.label.task == "multiclass" else joined.reshape(-1)), np.concatenate(labels)


def deltas(found: Metrics, baseline: Metrics) -> dict[str, Delta]:
    changes = {}
    for k, value in found.items():
        base = baseline.get(k)
        if value is not None and base is not None:
            changes[k] = Delta(absolute=value - base, relative=(value - base) / abs(base) if base else None)
    return changes


def shown(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"


def check_candidate(tf, spec: Spec, manifest, data_dir: str, manifest_sha: str, path: str, train_result: TrainResult):
    """Restore one checkpoint and run every integrity check; return the model or raise IntegrityError."""
    model, step = restore_checked(tf, spec, manifest, data_dir, path)
    non_finite = [w.path for w in model.weights if not np.isfinite(w.numpy()).all()]
    if non_finite:
        raise IntegrityError("finite_weights", path, f"non-finite values in {', '.join(non_finite[:5])}")
    named_step = int(path.rsplit("-", 1)[1])
    if step != named_step or (path == train_result.checkpoint and step != train_result.final_step):
        raise IntegrityError(
            "step",
            path,
            f"holds step {step}; training reported step {train_result.final_step} for {train_result.checkpoint}",
        )
    if train_result.data_manifest_sha256 != manifest_sha:
        raise IntegrityError(
            "data_manifest",
            path,
            "was trained on another data manifest than this run's "
            f"({train_result.data_manifest_sha256[:12]} ≠ {manifest_sha[:12]})",
        )
    return model, step


def serving_predict(tf, path: str, task: str, columns: list[int] | None = None):
    """A SavedModel's serving signature as a feature dict (``data.parse_fn``'s) → the task's output function (its
    output named as the model's, ``models.OUTPUT``); it is given the features it takes (an int64 one as int64), and
    ``columns`` picks and orders its probabilities' columns."""
    signature = tf.saved_model.load(path).signatures["serving_default"]

    def predict(features):
        output = signature(**signature_inputs(tf, signature, features))[OUTPUT[task]]
        return output if columns is None else tf.gather(output, columns, axis=1)

    return predict


def signature_inputs(tf, signature, features: dict) -> dict:
    """Of ``data.parse_fn``'s features, those the serving signature takes, as it takes them (an int64 one as int64)."""
    takes = signature.structured_input_signature[1]
    return {
        name: data.strings_as_int64(tf, value) if takes[name].dtype == tf.int64 else value
        for name, value in features.items()
        if name in takes
    }


def class_columns(published: LabelEntry | None, label: LabelEntry) -> list[int] | None:
    """The columns of a published model's probabilities in this run's class order (None: its own order), from its
    metadata's ``label`` (None: published before labels had tasks, integer classes); ValueError when its task or
    classes are not this run's."""
    if published is None:
        return None
    if published.task != label.task:
        raise ValueError(f"it predicts task '{published.task}', this run's is '{label.task}'")
    theirs, ours = published.class_names, label.class_names
    if theirs == ours:
        return None
    if label.task != "multiclass" or sorted(map(str, theirs)) != sorted(map(str, ours)):
        raise ValueError(f"its classes {theirs} are not this run's {ours}")
    return [theirs.index(c) for c in ours]


def baseline_metrics(
    tf, spec: Spec, baseline: registry.PublishedVersion, data_dir: str, manifest: Manifest
) -> dict[str, float | None]:
    """The baseline SavedModel's metrics on this run's eval data, through its serving signature."""
    label = manifest.label
    columns = class_columns(baseline.metadata.label, label)
    served = serving_predict(tf, scratch.local_tree(baseline.path), label.task, columns)
    outputs, labels = score(tf, served, data_dir, manifest)
    return metrics.of_task(label, spec.loss, spec.metrics, outputs, labels)[0]


@dataclasses.dataclass(frozen=True)
class Scored:
    """A candidate checkpoint that passed every integrity check, and what the eval split found of it."""

    checkpoint: str
    step: int
    examples: int
    metrics: Metrics
    per_class: dict[str, ClassScore] | None
    """Per class name its examples and accuracy (``metrics.of_task``); None for a regression."""

    def candidate(self) -> Candidate:
        """Its item of the blessing's ``candidates``."""
        return Candidate(checkpoint=self.checkpoint, step=self.step, metrics=self.metrics)


def scored_candidates(
    tf, args: EvaluateArgs, spec: Spec, run: RunRecord, manifest: Manifest, train_result: TrainResult
) -> list[Scored]:
    """Each candidate checkpoint's step, metrics and examples and accuracy per class, once it passes every
    integrity check; the first one failing one refuses the stage, its blessing record naming the check."""
    manifest_sha = sha256_file(os.path.join(args.data, MANIFEST))
    candidates = [train_result.checkpoint]
    if spec.validation.checkpoint.mode == "best":
        state = storage.read_bytes(storage.join(args.checkpoints, CHECKPOINT_STATE)).decode()
        candidates = [storage.join(args.checkpoints, name) for name in kept_checkpoints(state)]
    scored = []
    for path in candidates:
        try:
            model, step = check_candidate(tf, spec, manifest, args.data, manifest_sha, path, train_result)
        except IntegrityError as exc:
            refused = Blessing(
                blessed=False,
                checkpoint=path,
                integrity=Integrity(failed=exc.check),
                failures=[str(exc)],
                report=[str(exc)],
                run_id=run.run_id,
            )
            write_record(os.path.join(args.out, BLESSING), refused)
            fail(str(exc), EXIT_REFUSED)
        outputs, labels = score(tf, functools.partial(model, training=False), args.data, manifest)
        found, by_class = metrics.of_task(manifest.label, spec.loss, spec.metrics, outputs, labels)
        scored.append(Scored(path, step, len(labels), found, by_class))
        say(
            f"{path} (step {step}): restores, weights finite, data manifest matches; "
            + ", ".join(f"{k} {shown(v)}" for k, v in found.items())
        )
    return scored


def compare_with_baseline(
    tf, args: EvaluateArgs, spec: Spec, run: RunRecord, manifest: Manifest, found: Metrics
) -> tuple[ScoredBaseline | UnscoredBaseline | None, dict[str, Delta], list[str]]:
    """(the baseline's record for blessing.json, the metrics' changes against it, the report's lines about it).
    Without a baseline, or with one that cannot score this run's eval data, only value thresholds apply. The
    baseline is held while it is scored: another run's export never prunes it meanwhile."""
    with registry.held_baseline(args.model_dir, run.data_interval_end, run.run_id) as baseline:
        return compared(tf, args, spec, manifest, found, baseline)


def compared(
    tf, args: EvaluateArgs, spec: Spec, manifest: Manifest, found: Metrics, baseline: registry.PublishedVersion | None
) -> tuple[ScoredBaseline | UnscoredBaseline | None, dict[str, Delta], list[str]]:
    """``compare_with_baseline`` against ``baseline`` (None: there is none)."""
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
        base = baseline_metrics(tf, spec, baseline, args.data, manifest)
    except Exception as exc:
        return (
            UnscoredBaseline(version=baseline.version, path=baseline.path, error=str(exc)),
            {},
            [
                f"  baseline version {baseline.version} cannot score this run's eval data ({exc}); "
                "only value thresholds apply"
            ],
        )
    changes = deltas(found, base)
    record = ScoredBaseline(version=baseline.version, path=baseline.path, run_id=baseline.metadata.run_id, metrics=base)
    return (
        record,
        changes,
        [
            f"  vs baseline version {baseline.version}: {k} {base[k]:.4f} → {found[k]:.4f} ({d.absolute:+.4f})"
            for k, d in changes.items()
        ],
    )


def chosen_candidate(spec: Spec, scored: list[Scored]) -> Scored:
    """The candidate best by the spec's checkpoint selection (the first of equals; an undefined value is worst)."""
    metric, direction = spec.checkpoint_selection
    sign = 1 if direction == "higher_is_better" else -1

    def rank(candidate: Scored) -> float:
        value = candidate.metrics[metric]
        return -math.inf if value is None else sign * value

    return max(scored, key=rank)


def blessing_record(
    tf, args: EvaluateArgs, spec: Spec, run: RunRecord, manifest: Manifest, scored: list[Scored]
) -> Blessing:
    """The decision on the best-scored candidate: the gate's thresholds applied to its metrics, and the report."""
    chosen = chosen_candidate(spec, scored)
    found = chosen.metrics
    report = [f"validated {chosen.checkpoint} on {chosen.examples} eval examples"]
    if len(scored) > 1:
        report.append(f"  chosen among {len(scored)} retained checkpoints by {spec.checkpoint_selection[0]}")
    report += [f"  {k} = {shown(v)}" for k, v in found.items()]
    baseline, changes, lines = compare_with_baseline(tf, args, spec, run, manifest, found)
    report += lines
    rules = gate.resolved(spec.validation, spec.change_direction)
    scored_base = baseline if isinstance(baseline, ScoredBaseline) else None
    checks = gate.checks(found, rules.thresholds, rules.change_thresholds, scored_base.metrics if scored_base else None)
    failures = gate.failures(checks, baseline.version if baseline else None)
    decided_by = gate.decided_by(rules, bool(changes))
    if spec.validation.allow_unvalidated:
        report.append("  published without a gate: validation.allow_unvalidated is set, no threshold was applied")
    report.append(("BLESSED" if not failures else "NOT BLESSED: " + "; ".join(failures)) + f" (gate: {decided_by})")
    metric, direction = spec.checkpoint_selection
    return Blessing(
        blessed=not failures,
        gate=decided_by,
        run_id=run.run_id,
        data_interval_end=run.data_interval_end,
        checkpoint=chosen.checkpoint,
        step=chosen.step,
        integrity=Integrity(),
        eval_examples=chosen.examples,
        task=manifest.label.task,
        metrics=found,
        directions={k: spec.direction(k) for k in found},
        per_class=chosen.per_class,
        candidates=[c.candidate() for c in scored],
        checkpoint_selection=CheckpointChoice(metric=metric, direction=direction),
        thresholds=rules.thresholds,
        change_thresholds=rules.change_thresholds,
        baseline=baseline,
        deltas=changes,
        checks=checks,
        failures=failures,
        report=report,
    )


def main() -> None:
    args = EvaluateArgs.parse()
    spec, run = load_spec(args.spec), read_record(args.run, RunRecord)
    manifest, local_data = data.verified_manifest(args.data, "eval")
    args = dataclasses.replace(args, data=local_data)
    if not storage.exists(args.train_result):
        fail(f"no training result at {args.train_result}: run the train task first")
    train_result = read_record(args.train_result, TrainResult)
    tf = import_tensorflow()
    scored = scored_candidates(tf, args, spec, run, manifest, train_result)
    blessing = blessing_record(tf, args, spec, run, manifest, scored)
    chosen = chosen_candidate(spec, scored)
    write_record(os.path.join(args.out, EVAL_METRICS), EvalMetrics(metrics=chosen.metrics, per_class=chosen.per_class))
    write_record(os.path.join(args.out, BLESSING), blessing)
    scalar_writer(tf, args.tensorboard)(chosen.step, chosen.metrics)
    if storage.is_object_store(args.tensorboard):
        retried(*summaries_upload(args.tensorboard))
    write_record(args.result, EvaluateResult.of(blessing))
    for line in blessing.report:
        say(line)


if __name__ == "__main__":
    run_stage(main)
