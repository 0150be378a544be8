"""The gate's rules (tfdist.publishing.gate): each threshold as one check with its margin, the failure lines, the
change thresholds' directions and what decided a blessing. More, through a spec and the evaluate stage:
tests/trainer/test_gate_and_export.py."""

from __future__ import annotations

import pytest

from tfdist.contract.publish_records import ChangeCheck
from tfdist.publishing.gate import checks, decided_by, failures, resolved
from tfdist.spec.validation import ChangeThreshold, Threshold, ValidationSpec


def test_each_bound_is_a_check_whose_margin_is_how_far_inside_it_the_value_is():
    rows = checks({"accuracy": 0.9, "loss": 0.3}, {"accuracy": Threshold(lower=0.8, upper=0.95)}, {}, None)
    assert [row.model_dump() for row in rows] == [
        {
            "metric": "accuracy",
            "kind": "value",
            "rule": "≥ 0.8",
            "bound": 0.8,
            "value": 0.9,
            "margin": 0.9 - 0.8,
            "passed": True,
        },
        {
            "metric": "accuracy",
            "kind": "value",
            "rule": "≤ 0.95",
            "bound": 0.95,
            "value": 0.9,
            "margin": 0.95 - 0.9,
            "passed": True,
        },
    ]
    (below,) = checks({"accuracy": 0.75}, {"accuracy": Threshold(lower=0.8)}, {}, None)
    assert (below.margin, below.passed) == (pytest.approx(-0.05), False)
    (at,) = checks({"accuracy": 0.8}, {"accuracy": Threshold(lower=0.8)}, {}, None)
    assert at.passed and at.margin == 0


def test_a_change_check_allows_the_smaller_tolerance_in_the_metrics_direction():
    rule = ChangeThreshold(direction="higher_is_better", absolute=0.05, relative=0.02)
    (row,) = checks({"accuracy": 0.885}, {}, {"accuracy": rule}, {"accuracy": 0.9})
    assert isinstance(row, ChangeCheck) and row.rule == "≥ baseline − 0.018"
    assert (row.baseline, row.delta, row.allowed) == (0.9, pytest.approx(-0.015), pytest.approx(0.018))
    assert row.margin == pytest.approx(0.003) and row.passed
    lower = ChangeThreshold(direction="lower_is_better", absolute=0.01)
    (loss,) = checks({"loss": 0.33}, {}, {"loss": lower}, {"loss": 0.3})
    assert loss.rule == "≤ baseline + 0.01" and loss.margin == pytest.approx(-0.02) and not loss.passed


def test_a_change_exactly_at_its_tolerance_passes_despite_rounding_and_none_is_checked_without_a_baseline():
    rule = ChangeThreshold(direction="higher_is_better", absolute=0.1)
    (row,) = checks({"accuracy": 0.7}, {}, {"accuracy": rule}, {"accuracy": 0.8})  # 0.7 - 0.8 + 0.1 < 0 in floats
    assert row.margin < 0 and row.passed
    assert checks({"accuracy": 0.7}, {}, {"accuracy": rule}, None) == []
    no_tolerance = ChangeThreshold(direction="higher_is_better", absolute=None)
    assert checks({"accuracy": 0.7}, {}, {"accuracy": no_tolerance}, {"accuracy": 0.8}) == []


def test_a_failure_line_names_the_metric_its_value_and_by_how_much_it_missed():
    rows = [
        *checks(
            {"accuracy": 0.75, "loss": 0.5}, {"accuracy": Threshold(lower=0.8), "loss": Threshold(upper=0.4)}, {}, None
        ),
        *checks({"auc": 0.8}, {}, {"auc": ChangeThreshold(direction="higher_is_better", absolute=0.01)}, {"auc": 0.85}),
        *checks({"auc": None}, {"auc": Threshold(lower=0.5)}, {}, None),
    ]
    assert failures(rows, baseline_version=7) == [
        "accuracy = 0.7500 is below the lower bound 0.8 by 0.0500",
        "loss = 0.5000 is above the upper bound 0.4 by 0.1000",
        "auc = 0.8000 is worse than the baseline (version 7: 0.8500) by 0.0500, more than the allowed 0.0100",
        "auc is undefined on the eval data (e.g. an AUC without both classes)",
    ]
    assert failures(checks({"accuracy": 0.9}, {"accuracy": Threshold(lower=0.8)}, {}, None)) == []


def test_resolved_gives_each_change_threshold_its_direction_and_keeps_the_rest():
    validation = ValidationSpec(
        thresholds={"accuracy": Threshold(lower=0.5)},
        change_thresholds={"accuracy": ChangeThreshold(), "loss": ChangeThreshold(absolute=0.1)},
    )
    rules = resolved(validation, {"accuracy": "higher_is_better", "loss": "lower_is_better"}.__getitem__)
    assert {m: r.direction for m, r in rules.change_thresholds.items()} == {
        "accuracy": "higher_is_better",
        "loss": "lower_is_better",
    }
    assert rules.thresholds == validation.thresholds and validation.change_thresholds["accuracy"].direction is None


def test_what_decided_the_blessing_is_said_in_words():
    assert decided_by(ValidationSpec(thresholds={"accuracy": Threshold(lower=0.5)}), False) == "value thresholds"
    assert decided_by(ValidationSpec(change_thresholds={"loss": ChangeThreshold()}), True) == "change thresholds"
    assert decided_by(ValidationSpec(change_thresholds={"loss": ChangeThreshold()}), False) == (
        "change thresholds (no baseline compared)"
    )
