"""The gate's rules in plain Python: every threshold applied to a run's metrics as one check with its margin,
and the failure lines of the checks that fail. evaluate decides with them; the training-runs page shows them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CHANGE_SLACK = 1e-12
"""A change exactly at its tolerance passes despite float rounding."""


def resolved(validation: dict[str, Any], change_direction: Callable[[str], str]) -> dict[str, Any]:
    """The validation section's rules (as dumped to JSON) with each change threshold's direction resolved by
    ``change_direction`` (the spec's: its own, else the metric's): the rules the gate applies and blessing.json
    records."""
    changes = {m: rule | {"direction": change_direction(m)} for m, rule in validation["change_thresholds"].items()}
    return validation | {"change_thresholds": changes}


def checks(
    metrics: dict[str, float | None],
    thresholds: dict[str, dict[str, Any]],
    change_thresholds: dict[str, dict[str, Any]],
    baseline: dict[str, float | None] | None,
) -> list[dict[str, Any]]:
    """One check per bound of ``thresholds`` and, given the ``baseline``'s metrics, per change threshold with a
    tolerance: its rule in words, the value, the margin (how far inside the rule; negative: failed), passed. A
    metric the eval data leaves undefined (None: an AUC with one class) fails every check on it, with no margin."""
    rows: list[dict[str, Any]] = []
    for metric, bound in thresholds.items():
        value = metrics[metric]
        if bound.get("lower") is not None:
            rows.append(
                {
                    "metric": metric,
                    "kind": "value",
                    "rule": f"≥ {bound['lower']}",
                    "bound": bound["lower"],
                    "value": value,
                    "margin": _margin(value, bound["lower"]),
                }
            )
        if bound.get("upper") is not None:
            rows.append(
                {
                    "metric": metric,
                    "kind": "value",
                    "rule": f"≤ {bound['upper']}",
                    "bound": bound["upper"],
                    "value": value,
                    "margin": _margin(bound["upper"], value),
                }
            )
    if baseline:
        rows += _change_checks(metrics, change_thresholds, baseline)
    for row in rows:
        row["passed"] = row["margin"] is not None and row["margin"] >= (-CHANGE_SLACK if row["kind"] == "change" else 0)
    return rows


def _margin(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None else high - low


def _change_checks(
    metrics: dict[str, float | None], change_thresholds: dict[str, dict[str, Any]], baseline: dict[str, float | None]
) -> list[dict[str, Any]]:
    """One check per change threshold with a tolerance, against the baseline's metrics."""
    rows = []
    for metric, rule in change_thresholds.items():
        value, base = metrics[metric], baseline[metric]
        row = {"metric": metric, "kind": "change", "value": value, "baseline": base}
        if value is None or base is None:
            rows.append(row | {"rule": "no worse than the baseline", "delta": None, "allowed": None, "margin": None})
            continue
        tolerances = [
            t
            for t in (rule.get("absolute"), None if rule.get("relative") is None else rule["relative"] * abs(base))
            if t is not None
        ]
        if not tolerances:
            continue
        allowed, higher, delta = min(tolerances), rule["direction"] == "higher_is_better", value - base
        rows.append(
            row
            | {
                "rule": f"≥ baseline − {allowed:.4g}" if higher else f"≤ baseline + {allowed:.4g}",
                "delta": delta,
                "allowed": allowed,
                "margin": allowed + (delta if higher else -delta),
            }
        )
    return rows


def failures(rows: list[dict[str, Any]], baseline_version: int | None = None) -> list[str]:
    """One line per failed check, naming the metric, the value and by how much it missed."""
    lines = []
    for row in rows:
        if row["passed"]:
            continue
        metric, value = row["metric"], row["value"]
        if row["margin"] is None:
            lines.append(f"{metric} is undefined on the eval data (e.g. an AUC without both classes)")
            continue
        missed = -row["margin"]
        if row["kind"] == "value":
            side = "below the lower" if row["rule"].startswith("≥") else "above the upper"
            lines.append(f"{metric} = {value:.4f} is {side} bound {row['bound']} by {missed:.4f}")
        else:
            lines.append(
                f"{metric} = {value:.4f} is worse than the baseline (version {baseline_version}: "
                f"{row['baseline']:.4f}) by {missed + row['allowed']:.4f}, more than the allowed "
                f"{row['allowed']:.4f}"
            )
    return lines


def decided_by(validation: dict[str, Any], compared_with_baseline: bool) -> str:
    """What the blessing was decided by, in words, for blessing.json and the version's metadata.json."""
    if validation.get("allow_unvalidated"):
        return "none: published without a gate (validation.allow_unvalidated)"
    applied = ["value thresholds"] if validation["thresholds"] else []
    if validation["change_thresholds"]:
        applied.append("change thresholds" + ("" if compared_with_baseline else " (no baseline compared)"))
    return " and ".join(applied)
