"""The baseline gate and the registry (as of each run's data interval, pruned), and a refusing stage failing its task
for good. The evaluate and export stages' own tests: test_evaluate.py, test_export.py."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.operators.test_report import rules_of
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry


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
