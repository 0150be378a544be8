"""The data gate's checks in plain Python: a run's data statistics (the manifest's ``statistics``, see
tfdist.trainer.statistics) against the baseline's, each check a row with its value, the baseline's, the bound,
the margin (how far inside the bound; negative: failed) and what a failure does (refuse or warn). The stage
validate_data decides with them; the training-runs page and ``tfdist runs`` show the record."""

from __future__ import annotations

import math
from typing import Any

DATA_VALIDATION = "data_validation.json"
"""In the run's validate_data directory: the data gate's decision, every check and the baseline compared."""
FORMULAS = {
    "drift": "JS(P, Q) = ½ Σ P log2(P/M) + ½ Σ Q log2(Q/M), M = (P + Q)/2; P, Q: the histograms' counts over their "
    "rows (statistics.features.<f>.histogram[<element>], this run's and the baseline's)",
    "constant": "1 − (the fullest bin's rows / rows), on each side; fails when one side is 0 and the other above "
    "min_share",
    "labels": "max over classes |count/rows − baseline count/baseline rows| (train + eval)",
    "rows": "(train + eval rows) / the baseline's",
    "bounds": "min ≥ lower, max ≤ upper, per element",
}
"""How each check's value is computed from the statistics, recorded with every decision."""


def divergence(p: dict[str, int], q: dict[str, int]) -> float:
    """Jensen–Shannon divergence (base 2) of two histograms given as {bin: count}: 0 alike, 1 disjoint."""
    total_p, total_q = sum(p.values()) or 1, sum(q.values()) or 1
    js = 0.0
    for b in set(p) | set(q):
        a, c = p.get(b, 0) / total_p, q.get(b, 0) / total_q
        m = (a + c) / 2
        js += sum(x / 2 * math.log2(x / m) for x in (a, c) if x)
    return max(js, 0.0)


def elements(feature: str, stats: dict[str, Any]) -> list[str]:
    """The feature's element names: ``x`` for a scalar, ``pixel[5]`` for an element of a vector."""
    n = len(stats["mean"])
    return [feature] if n == 1 else [f"{feature}[{i}]" for i in range(n)]


def varied_share(histogram: dict[str, int]) -> float:
    """The share of rows off the histogram's fullest bin (0 for a constant)."""
    total = sum(histogram.values())
    return 1 - max(histogram.values()) / total if total else 0.0


def _row(
    check: str, feature: str, statistic: str, value: Any, baseline: Any, bound: Any, margin: float, rule: str
) -> dict[str, Any]:
    return {
        "check": check,
        "feature": feature,
        "statistic": statistic,
        "value": value,
        "baseline": baseline,
        "bound": bound,
        "margin": margin,
        "rule": rule,
    }


def feature_checks(now: dict[str, Any], base: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Drift and constant-ness of every feature element; a feature new since the baseline, or of another shape
    (another element count), has nothing to compare with."""
    rows = []
    drift, constant = settings["drift"], settings["constant"]["min_share"]
    for feature, stats in now["features"].items():
        old = base["features"].get(feature)
        if old is None or len(old["histogram"]) != len(stats["histogram"]):
            continue
        for i, name in enumerate(elements(feature, stats)):
            js = divergence(stats["histogram"][i], old["histogram"][i])
            rows.append(
                _row(
                    "drift",
                    name,
                    "Jensen–Shannon divergence from the baseline's histogram",
                    js,
                    None,
                    drift["max_divergence"],
                    drift["max_divergence"] - js,
                    f"≤ {drift['max_divergence']}",
                )
            )
            varied, was = varied_share(stats["histogram"][i]), varied_share(old["histogram"][i])
            if (varied == 0) != (was == 0):  # one side constant: did the other vary?
                other = max(varied, was)
                rows.append(
                    _row(
                        "constant",
                        name,
                        "share of rows off the most common value",
                        varied,
                        was,
                        constant,
                        constant - other,
                        f"constant on both sides, or ≤ {constant} off it on the other",
                    )
                )
    return rows


def label_checks(now: dict[str, Any], base: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The largest change of a class's share (L∞), and every class the baseline has and this run lacks."""
    counts, old = _class_counts(now), _class_counts(base)
    # a class one side has no count for (the label's num_classes changed since the baseline) has no rows there
    width = max(len(counts), len(old))
    counts, old = counts + [0] * (width - len(counts)), old + [0] * (width - len(old))
    shares, old_shares = [c / (sum(counts) or 1) for c in counts], [c / (sum(old) or 1) for c in old]
    changes = [abs(a - b) for a, b in zip(shares, old_shares, strict=True)]
    worst = max(range(len(changes)), key=changes.__getitem__)
    limit = settings["labels"]["max_change"]
    rows = [
        _row(
            "labels",
            f"class {worst}",
            "change of the class's share of the rows (L∞)",
            shares[worst],
            old_shares[worst],
            limit,
            limit - changes[worst],
            f"|share − baseline's| ≤ {limit}",
        )
    ]
    rows += [
        _row("labels", f"class {k}", "rows of the class", 0, old[k], 1, -1.0, "present when the baseline has it")
        for k in range(len(counts))
        if counts[k] == 0 and old[k] > 0
    ]
    return rows


def _class_counts(stats: dict[str, Any]) -> list[int]:
    return [a + b for a, b in zip(stats["train"]["class_counts"], stats["eval"]["class_counts"], strict=True)]


def row_checks(now: dict[str, Any], base: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    rows_now, rows_base = (s["train"]["rows"] + s["eval"]["rows"] for s in (now, base))
    ratio, low, high = rows_now / rows_base, settings["rows"]["min_ratio"], settings["rows"]["max_ratio"]
    return [
        _row(
            "rows",
            "rows",
            "rows over the baseline's",
            rows_now,
            rows_base,
            [low, high],
            min(ratio - low, high - ratio),
            f"{low} ≤ ratio ≤ {high}",
        )
    ]


def bound_checks(now: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Every element of a bounded feature within its bounds (its min and max)."""
    rows = []
    for feature, bound in settings["bounds"]["features"].items():
        stats = now["features"][feature]
        for i, name in enumerate(elements(feature, stats)):
            if bound.get("lower") is not None:
                rows.append(
                    _row(
                        "bounds",
                        name,
                        "min",
                        stats["min"][i],
                        None,
                        bound["lower"],
                        stats["min"][i] - bound["lower"],
                        f"≥ {bound['lower']}",
                    )
                )
            if bound.get("upper") is not None:
                rows.append(
                    _row(
                        "bounds",
                        name,
                        "max",
                        stats["max"][i],
                        None,
                        bound["upper"],
                        bound["upper"] - stats["max"][i],
                        f"≤ {bound['upper']}",
                    )
                )
    return rows


def checks(now: dict[str, Any], base: dict[str, Any] | None, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Every check of ``settings`` (the spec's data.checks, as JSON) not turned off; those needing a baseline
    only with one. Each row says what a failure does (``mode``) and whether it passed."""
    rows = bound_checks(now, settings)
    if base is not None:
        rows += (
            feature_checks(now, base, settings) + label_checks(now, base, settings) + row_checks(now, base, settings)
        )
    for row in rows:
        row["mode"] = settings[row["check"]]["mode"] or settings["mode"]
        row["passed"] = row["margin"] >= 0
    return [row for row in rows if row["mode"] != "off"]


def failure_line(row: dict[str, Any]) -> str:
    """A failed check in words: the feature, the statistic, this run's value, the baseline's, the bound."""

    def shown(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    baseline = "" if row["baseline"] is None else f", baseline {shown(row['baseline'])}"
    return f"{row['check']}: {row['feature']} {row['statistic']} {shown(row['value'])}{baseline}; allowed {row['rule']}"
