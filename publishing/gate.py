"""The gate's rules in plain Python: every threshold applied to a run's metrics as one check with its margin,
and the failure lines of the checks that fail. evaluate decides with them; the training-runs page shows them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tfdist.contract.publish_records import ChangeCheck, Check, ValueCheck
from tfdist.contract.records import Metrics
from tfdist.spec.tasks import Direction
from tfdist.spec.validation import ChangeThreshold, Threshold, ValidationSpec

CHANGE_SLACK = 1e-12
"""A change exactly at its tolerance passes despite float rounding."""


def resolved(validation: ValidationSpec, change_direction: Callable[[str], Direction]) -> ValidationSpec:
    """The validation section with each change threshold's direction resolved by ``change_direction`` (the spec's:
    its own, else the metric's): the rules the gate applies and blessing.json records."""
    changes = {
        m: rule.model_copy(update={"direction": change_direction(m)})
        for m, rule in validation.change_thresholds.items()
    }
    return validation.model_copy(update={"change_thresholds": changes})


def checks(
    metrics: Metrics,
    thresholds: Mapping[str, Threshold],
    change_thresholds: Mapping[str, ChangeThreshold],
    baseline: Metrics | None,
) -> list[Check]:
    """One check per bound of ``thresholds`` and, given the ``baseline``'s metrics, per change threshold with a
    tolerance: its rule in words, the value, the margin (how far inside the rule; negative: failed), passed. A
    metric the eval data leaves undefined (None: an AUC with one class) fails every check on it, with no margin."""
    rows: list[Check] = []
    for metric, bound in thresholds.items():
        value = metrics[metric]
        if bound.lower is not None:
            rows.append(_value_check(metric, f"≥ {bound.lower}", bound.lower, value, _margin(value, bound.lower)))
        if bound.upper is not None:
            rows.append(_value_check(metric, f"≤ {bound.upper}", bound.upper, value, _margin(bound.upper, value)))
    if baseline:
        rows += _change_checks(metrics, change_thresholds, baseline)
    return rows


def _value_check(metric: str, rule: str, bound: float, value: float | None, margin: float | None) -> ValueCheck:
    passed = margin is not None and margin >= 0
    return ValueCheck(metric=metric, rule=rule, bound=bound, value=value, margin=margin, passed=passed)


def _margin(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None else high - low


def _change_checks(
    metrics: Metrics, change_thresholds: Mapping[str, ChangeThreshold], baseline: Metrics
) -> list[Check]:
    """One check per change threshold with a tolerance, against the baseline's metrics."""
    rows: list[Check] = []
    for metric, rule in change_thresholds.items():
        value, base = metrics[metric], baseline[metric]
        if value is None or base is None:
            rows.append(_change_check(metric, "no worse than the baseline", value, base, None, None, None))
            continue
        tolerances = [
            t for t in (rule.absolute, None if rule.relative is None else rule.relative * abs(base)) if t is not None
        ]
        if not tolerances:
            continue
        allowed, higher, delta = min(tolerances), rule.direction == "higher_is_better", value - base
        rule_words = f"≥ baseline − {allowed:.4g}" if higher else f"≤ baseline + {allowed:.4g}"
        rows.append(
            _change_check(metric, rule_words, value, base, delta, allowed, allowed + (delta if higher else -delta))
        )
    return rows


def _change_check(
    metric: str,
    rule: str,
    value: float | None,
    base: float | None,
    delta: float | None,
    allowed: float | None,
    margin: float | None,
) -> ChangeCheck:
    passed = margin is not None and margin >= -CHANGE_SLACK
    return ChangeCheck(
        metric=metric, rule=rule, value=value, baseline=base, delta=delta, allowed=allowed, margin=margin, passed=passed
    )


def failures(rows: list[Check], baseline_version: int | None = None) -> list[str]:
    """One line per failed check, naming the metric, the value and by how much it missed."""
    lines = []
    for row in rows:
        if row.passed:
            continue
        if row.margin is None or row.value is None:
            lines.append(f"{row.metric} is undefined on the eval data (e.g. an AUC without both classes)")
            continue
        missed = -row.margin
        if isinstance(row, ValueCheck):
            side = "below the lower" if row.rule.startswith("≥") else "above the upper"
            lines.append(f"{row.metric} = {row.value:.4f} is {side} bound {row.bound} by {missed:.4f}")
        else:
            allowed, base = row.allowed or 0.0, row.baseline or 0.0
            lines.append(
                f"{row.metric} = {row.value:.4f} is worse than the baseline (version {baseline_version}: "
                f"{base:.4f}) by {missed + allowed:.4f}, more than the allowed {allowed:.4f}"
            )
    return lines


def decided_by(validation: ValidationSpec, compared_with_baseline: bool) -> str:
    """What the blessing was decided by, in words, for blessing.json and the version's metadata.json."""
    if validation.allow_unvalidated:
        return "none: published without a gate (validation.allow_unvalidated)"
    applied = ["value thresholds"] if validation.thresholds else []
    if validation.change_thresholds:
        applied.append("change thresholds" + ("" if compared_with_baseline else " (no baseline compared)"))
    return " and ".join(applied)
