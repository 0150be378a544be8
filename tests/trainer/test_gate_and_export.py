"""Checkpoint validation and publishing: integrity checks by name, the baseline gate (as of each run's
data interval), versions that are idempotent and pruned (an export killed midway: test_faults_export.py)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.publishing.versions import published_metadata
from tests.support.plans import prepared_plan, run
from tests.support.specs import DAY
from tests.web.test_runs_page_data import rules_of
from tfdist.contract.data_records import LabelEntry, Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import read_record, write_record
from tfdist.contract.train_records import TrainResult
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry

GATE = {
    "thresholds": {"accuracy": {"lower": 0.3}},
    "change_thresholds": {"accuracy": {"direction": "higher_is_better", "absolute": 0.01}},
}
ONE_WORKER = {"num_workers": 1}  # these tests are about the gate and publishing: one training process is enough
GOOD = {"epochs": 6, **ONE_WORKER}
POOR = {"epochs": 1, **ONE_WORKER}  # passes the value threshold, far below a trained baseline


def train_and_evaluate(root: str, run_id: str, day: dt.date, training: dict, **sections):
    plan = prepared_plan(root, run_id, day, training=training, validation=GATE, **sections)
    for task_id in ("train", "evaluate"):
        run(plan, task_id)
    return plan, read_json(plan.layout.blessing_file)


@pytest.mark.e2e
def test_baseline_gate_blocks_a_regression_and_publishes_an_improvement(digits_root):
    root = digits_root
    first, blessing = train_and_evaluate(root, "gate_first", DAY - dt.timedelta(days=2), GOOD)
    assert blessing["blessed"] and blessing["baseline"] is None
    run(first, "export")
    model_dir = first.model_dir
    (v1,) = [m.version for m in registry.versions(model_dir)]
    assert v1 == 20261119000000

    worse, blessing = train_and_evaluate(root, "gate_worse", DAY - dt.timedelta(days=1), POOR)
    assert not blessing["blessed"] and blessing["baseline"]["version"] == v1
    assert blessing["metrics"]["accuracy"] >= 0.3  # passes the absolute threshold...
    (failure,) = blessing["failures"]  # ...but not the change threshold
    assert failure.startswith("accuracy = ") and f"worse than the baseline (version {v1}: " in failure
    assert blessing["deltas"]["accuracy"]["absolute"] < -0.01
    with pytest.raises(StageFailed, match="refusing to export: this run's checkpoint was not blessed"):
        run(worse, "export")
    assert [m.version for m in registry.versions(model_dir)] == [v1]

    better, blessing = train_and_evaluate(root, "gate_better", DAY, {"epochs": 10, **ONE_WORKER})
    assert blessing["blessed"] and blessing["baseline"]["version"] == v1, blessing["report"]
    run(better, "export")
    v3 = published_metadata(model_dir)[-1]
    assert v3["version"] == 20261121000000 and v3["blessing"]["baseline"]["version"] == v1
    assert registry.baseline_for(model_dir, "2026-11-22T00:00:00+00:00", "next run").version == v3["version"]

    # a backfill of a past day compares with what was live then, not with v3: see the baseline lookup test
    # below and the live backfill experiment (tests/live/test_live_airflow.py)

    # the same run exported again: same version, nothing duplicated
    run(better, "export")
    assert [m.version for m in registry.versions(model_dir)] == [v1, v3["version"]]


@pytest.mark.e2e
def test_best_retained_checkpoint_is_chosen_and_integrity_failures_are_named(digits_root):
    plan = prepared_plan(
        digits_root,
        "integrity",
        training=ONE_WORKER,
        validation={"checkpoint": {"mode": "best", "metric": "loss", "direction": "lower_is_better"}},
    )
    for task_id in ("train", "evaluate"):
        run(plan, task_id)
    result = read_record(plan.layout.result("train"), TrainResult)
    blessing = read_json(plan.layout.blessing_file)
    assert [c["step"] for c in blessing["candidates"]] == [40, 60, 76]  # keep_checkpoints = 3, every 20 steps
    assert blessing["metrics"]["loss"] == min(c["metrics"]["loss"] for c in blessing["candidates"])
    assert blessing["checkpoint"] in [c["checkpoint"] for c in blessing["candidates"]]

    # through the stage: the failed check is named in blessing.json, and the exit code refuses (no retry)
    write_record(plan.layout.result("train"), result.model_copy(update={"final_step": result.final_step + 1}))
    with pytest.raises(StageFailed, match="integrity check 'step' failed") as failure:
        run(plan, "evaluate")
    assert failure.value.returncode == EXIT_REFUSED
    assert read_json(plan.layout.blessing_file)["integrity"]["failed"] == "step"
    write_record(plan.layout.result("train"), result)

    # the other checks, called as the stage calls them
    import numpy as np
    import tensorflow as tf

    from tfdist.infra.jsonfiles import sha256_file
    from tfdist.trainer.evaluate import IntegrityError, check_candidate
    from tfdist.trainer.models import restore_model
    from tfdist.trainer.runtime import load_spec

    spec = load_spec(plan.layout.spec_file)
    manifest_path = plan.layout.manifest_file
    manifest, manifest_sha = read_record(manifest_path, Manifest), sha256_file(manifest_path)

    def check_fails_with(check: str, train_result: TrainResult = result) -> None:
        with pytest.raises(IntegrityError, match=f"integrity check '{check}' failed") as failure:
            check_candidate(tf, spec, manifest, plan.layout.data_dir, manifest_sha, result.checkpoint, train_result)
        assert failure.value.check == check

    check_candidate(tf, spec, manifest, plan.layout.data_dir, manifest_sha, result.checkpoint, result)  # intact: passes
    check_fails_with("data_manifest", result.model_copy(update={"data_manifest_sha256": "0" * 64}))
    model, step = restore_model(tf, spec, manifest, plan.layout.data_dir, result.checkpoint)
    kernel = model.trainable_weights[0]
    kernel.assign(np.where(np.arange(kernel.shape[-1]) == 0, np.nan, kernel.numpy()))
    tf.train.Checkpoint(model=model, step=tf.Variable(step, dtype=tf.int64)).write(result.checkpoint)
    check_fails_with("finite_weights")
    (data_file,) = [
        f for f in os.listdir(plan.layout.checkpoint_dir) if f.startswith(os.path.basename(result.checkpoint) + ".data")
    ]
    path = os.path.join(plan.layout.checkpoint_dir, data_file)
    os.truncate(path, os.path.getsize(path) // 2)
    check_fails_with("restores")


def write_version(model_dir: str, version: int, run_id: str, interval_end: str) -> None:
    write_json_atomic(
        os.path.join(model_dir, str(version), "metadata.json"),
        {"version": version, "run_id": run_id, "data_interval_end": interval_end, "metrics": {"accuracy": 0.9}},
    )


def test_baseline_lookup_honours_the_data_interval(tmp_path):
    model_dir = str(tmp_path / "m")
    for day in (10, 15, 20):
        write_version(model_dir, 20261100000000 + day * 10000, f"run-{day}", f"2026-11-{day}T00:00:00+00:00")
    os.makedirs(os.path.join(model_dir, ".tmp-20261125000000-x"))  # an export in progress is not a version
    assert registry.baseline_for(model_dir, "2026-11-16T00:00:00+00:00", "backfill").metadata.run_id == "run-15"
    assert registry.baseline_for(model_dir, "2026-11-15T00:00:00+00:00", "backfill").metadata.run_id == "run-15"
    assert registry.baseline_for(model_dir, "2026-11-15T00:00:00+00:00", "run-15").metadata.run_id == "run-10"
    assert registry.baseline_for(model_dir, "2026-11-09T00:00:00+00:00", "backfill") is None
    assert registry.baseline_for(model_dir, "2026-12-01T00:00:00+00:00", "nightly").metadata.run_id == "run-20"


def test_pruning_keeps_the_newest_and_the_baseline(tmp_path):
    model_dir = str(tmp_path / "m")
    for n in range(1, 6):
        write_version(model_dir, n, f"run-{n}", f"2026-11-0{n}T00:00:00+00:00")
    assert registry.prune(model_dir, keep=2, protect={1}) == [2, 3]
    assert [m.version for m in registry.versions(model_dir)] == [1, 4, 5]
    assert sorted(os.listdir(model_dir)) == [registry.LOCK, "1", "4", "5"]  # nothing half-deleted left


def test_relative_change_thresholds_and_the_stricter_of_two_tolerances():
    from tfdist.publishing.gate import checks, failures

    def change_failures(metrics, baseline, change_thresholds):
        return failures(checks(metrics, *rules_of({}, change_thresholds), baseline), 7)

    relative = {"accuracy": {"direction": "higher_is_better", "absolute": None, "relative": 0.05}}
    assert change_failures({"accuracy": 0.86}, {"accuracy": 0.9}, relative) == []  # lost 0.04 ≤ 5% of 0.9
    (failure,) = change_failures({"accuracy": 0.85}, {"accuracy": 0.9}, relative)
    assert failure == (
        "accuracy = 0.8500 is worse than the baseline (version 7: 0.9000) by 0.0500, more than the allowed 0.0450"
    )
    loss = {"loss": {"direction": "lower_is_better", "absolute": None, "relative": 0.5}}
    assert change_failures({"loss": 0.29}, {"loss": 0.2}, loss) == []  # 0.09 ≤ 50% of 0.2
    both = {"loss": {"direction": "lower_is_better", "absolute": 0.01, "relative": 0.5}}
    (failure,) = change_failures({"loss": 0.215}, {"loss": 0.2}, both)  # the absolute 0.01 is stricter
    assert failure.endswith("by 0.0150, more than the allowed 0.0100")
    assert change_failures({"loss": 0.1}, {"loss": 0.2}, both) == []  # better is never a failure


def test_each_threshold_is_one_check_with_its_margin_for_the_page():
    from tfdist.publishing.gate import checks, failures

    rows = checks(
        {"accuracy": 0.95, "loss": 0.3},
        *rules_of(
            {"accuracy": {"lower": 0.9, "upper": 0.94}},
            {"loss": {"direction": "lower_is_better", "absolute": 0.05, "relative": None}},
        ),
        {"loss": 0.2},
    )
    assert [(r.metric, r.rule, round(r.margin, 4), r.passed) for r in rows] == [
        ("accuracy", "≥ 0.9", 0.05, True),
        ("accuracy", "≤ 0.94", -0.01, False),
        ("loss", "≤ baseline + 0.05", -0.05, False),
    ]
    assert failures(rows, 7) == [
        "accuracy = 0.9500 is above the upper bound 0.94 by 0.0100",
        "loss = 0.3000 is worse than the baseline (version 7: 0.2000) by 0.1000, more than the allowed 0.0500",
    ]
    assert checks(
        {"accuracy": 0.9},
        *rules_of({"accuracy": {"lower": 0.9}}, {"accuracy": {"direction": "higher_is_better", "absolute": 0.01}}),
        None,
    )[0].passed
    assert (
        len(
            checks(
                {"accuracy": 0.9},
                *rules_of({}, {"accuracy": {"direction": "higher_is_better", "absolute": 0.01}}),
                None,
            )
        )
        == 0
    )  # no baseline: no change check


def test_top_5_accuracy_counts_a_label_among_the_five_likeliest():
    import numpy as np

    from tfdist.trainer.metrics import multiclass

    probabilities = np.array(
        [
            [0.30, 0.20, 0.15, 0.10, 0.09, 0.08, 0.08],  # label 4: 5th likeliest, in the top 5
            [0.30, 0.20, 0.15, 0.10, 0.09, 0.08, 0.08],  # label 5: 6th, not
            [0.05, 0.70, 0.05, 0.05, 0.05, 0.05, 0.05],  # label 1: the likeliest
        ]
    )
    metrics = multiclass(probabilities, np.array([4, 5, 1]), ["accuracy", "top_5_accuracy"])
    assert metrics["top_5_accuracy"] == 2 / 3 and metrics["accuracy"] == 1 / 3
    assert "top_5_accuracy" not in multiclass(probabilities, np.array([4, 5, 1]), ["accuracy"])


def test_the_gate_says_what_decided_it():
    from tfdist.publishing.gate import decided_by
    from tfdist.spec.validation import ValidationSpec

    def gate(validation: dict, compared: bool) -> str:
        return decided_by(ValidationSpec.model_validate(validation), compared)

    assert gate({"allow_unvalidated": True, "thresholds": {}, "change_thresholds": {}}, False) == (
        "none: published without a gate (validation.allow_unvalidated)"
    )
    change = {"accuracy": {"direction": "higher_is_better"}}
    assert gate({"thresholds": {"accuracy": {"lower": 0.5}}, "change_thresholds": change}, True) == (
        "value thresholds and change thresholds"
    )
    assert gate({"thresholds": {}, "change_thresholds": change}, False) == "change thresholds (no baseline compared)"


@pytest.mark.parametrize(
    "returncode, lost, outcome",
    [(EXIT_REFUSED, (), "StageRefused"), (1, (), "StageFailedRetryable"), (-9, ("evaluate-0",), "StageLost")],
)
def test_a_stage_that_refuses_fails_its_task_for_good_and_a_crash_or_a_loss_is_retried(
    tmp_path, monkeypatch, returncode, lost, outcome
):
    from airflow.sdk.exceptions import AirflowFailException

    from tests.support.dags import task_instance
    from tests.support.specs import START, make_spec
    from tfdist.operators import outcomes
    from tfdist.operators.dag import build_dag

    def fails(self, stage, log):
        tails = {"evaluate-0": ["ERROR: integrity check 'step' failed"]}
        raise StageFailed("evaluate-0", returncode, tails, lost=lost)

    monkeypatch.setattr(LocalLauncher, "run", fails)
    evaluate = build_dag(make_spec(str(tmp_path))).get_task("evaluate")
    context = {
        "run_id": "refused",
        "data_interval_start": START,
        "data_interval_end": START + dt.timedelta(days=1),
        "ti": task_instance(evaluate.dag_id, "refused"),
    }
    with pytest.raises(getattr(outcomes, outcome)) as failure:
        evaluate.execute(context)
    retried = outcome != "StageRefused"
    assert isinstance(failure.value, AirflowFailException) is not retried and "integrity check" in str(failure.value)


def test_change_thresholds_take_the_metrics_direction_unless_they_give_one(tmp_path):
    from tests.support.specs import make_spec
    from tfdist.publishing.gate import checks, resolved
    from tfdist.spec import load_spec

    validation = {
        "thresholds": {},
        "change_thresholds": {
            "auc": {"absolute": 0.01},
            "log_loss": {"absolute": 0.02},
            "calibration": {"direction": "lower_is_better", "absolute": 0.1},
        },
    }
    spec = load_spec(
        make_spec(
            str(tmp_path),
            data={"label": {"name": "label", "task": "binary"}},
            model={"family": "mlp", "metrics": ["auc", "log_loss", "calibration"]},
            validation=validation,
        )
    )
    rules = resolved(spec.validation, spec.change_direction)
    assert {m: r.direction for m, r in rules.change_thresholds.items()} == {
        "auc": "higher_is_better",
        "log_loss": "lower_is_better",
        "calibration": "lower_is_better",
    }
    rows = checks(
        {"auc": 0.80, "log_loss": 0.40, "calibration": 1.0},
        {},
        rules.change_thresholds,
        {"auc": 0.85, "log_loss": 0.35, "calibration": 1.05},
    )
    assert [(r.metric, r.passed) for r in rows] == [("auc", False), ("log_loss", False), ("calibration", True)]


def test_a_metric_the_eval_data_leaves_undefined_fails_its_checks_by_name():
    from tfdist.publishing.gate import checks, failures

    rows = checks(
        {"auc": None, "accuracy": 0.9},
        *rules_of(
            {"auc": {"lower": 0.7}, "accuracy": {"lower": 0.8}},
            {"auc": {"direction": "higher_is_better", "absolute": 0.0}},
        ),
        {"auc": None, "accuracy": 0.85},
    )
    assert [(r.metric, r.kind, r.margin, r.passed) for r in rows] == [
        ("auc", "value", None, False),
        ("accuracy", "value", pytest.approx(0.1), True),
        ("auc", "change", None, False),
    ]
    assert failures(rows, 3) == ["auc is undefined on the eval data (e.g. an AUC without both classes)"] * 2


def test_the_baseline_is_scored_by_class_name_and_refused_for_another_task_or_other_classes():
    from tfdist.trainer.evaluate import class_columns

    published = {"task": "multiclass", "classes": ["Adelie", "Chinstrap", "Gentoo"]}  # a version's metadata
    ours = label_entry("multiclass", published["classes"])  # this run's manifest
    assert class_columns(None, ours) is None  # published before labels had tasks: integer classes, same order
    assert class_columns(published, ours) is None
    assert class_columns({**published, "classes": ["Gentoo", "Adelie", "Chinstrap"]}, ours) == [1, 2, 0]
    with pytest.raises(ValueError, match=r"its classes \['Adelie', 'Gentoo'\] are not this run's"):
        class_columns({**published, "classes": ["Adelie", "Gentoo"]}, ours)
    with pytest.raises(ValueError, match="it predicts task 'binary', this run's is 'multiclass'"):
        class_columns({"task": "binary", "classes": ["no", "yes"]}, ours)
    with pytest.raises(ValueError, match=r"its classes \['yes', 'no'\]"):
        class_columns({"task": "binary", "classes": ["yes", "no"]}, label_entry("binary", ["no", "yes"]))


def label_entry(task: str, classes: list[str] | None, std: float | None = None) -> LabelEntry:
    """A manifest's label of ``task``: its classes, or a regression target's std."""
    stored = {"multiclass": "name", "binary": "binary", "regression": "value"}[task]
    return LabelEntry(
        name="y",
        task=task,
        stored=stored,
        classes=classes,
        num_classes=len(classes) if classes else None,
        positive=classes[1] if task == "binary" and classes else None,
        mean=0.0 if std else None,
        std=std,
    )
