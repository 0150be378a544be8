"""The data gate's checks in plain Python: a run's data statistics (the manifest's ``statistics``, see
tfdist.trainer.statistics) against the baseline's, each check a row with its value, the baseline's, the bound,
the margin (how far inside the bound; negative: failed) and what a failure does (refuse or warn). The stage
validate_data decides with them; the training-runs page and ``tfdist runs`` show the record."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tfdist.contract.data_records import (
    CategoricalStatistics,
    CheckRow,
    ClassStatistics,
    DataStatistics,
    NotCompared,
    TargetStatistics,
)
from tfdist.spec.data_checks import DataChecks

DATA_VALIDATION = "data_validation.json"
"""In the run's validate_data directory: the data gate's decision, every check and the baseline compared."""
FORMULAS = {
    "drift": "numeric elements: JS(P, Q) = ½ Σ P log2(P/M) + ½ Σ Q log2(Q/M), M = (P + Q)/2; P, Q: the histograms' "
    "counts over their rows (statistics.features.<f>.histogram[<element>], this run's and the baseline's); "
    "categorical features: L∞ = max over values |P(v) − Q(v)|; P, Q: each value's count over the values counted "
    "(statistics.categorical.<f>.top and .values), over the union of both sides' top values, a value absent from "
    "one side's top having share 0 there (exact when both lists hold every value; else within the larger share "
    "of a cut list's last value, recorded as 'within')",
    "vocabulary": "the counts of this run's top values (statistics.categorical.<f>.top) outside the baseline "
    "version's vocabularies/<f>.json, over the values counted; the values beyond a cut top list are not known "
    "('beyond_top': their share)",
    "missing": "|rate − the baseline's rate|; rate: the rows without a value over the rows, per numeric element "
    "(statistics.features.<f>.missing over train + eval rows; 0 in statistics without 'missing') and per "
    "categorical feature (statistics.categorical.<f>.missing / .rows); a numeric element with no missing value on "
    "either side has no row",
    "constant": "1 − (the fullest bin's rows / rows), on each side; fails when one side is 0 and the other above "
    "min_share",
    "labels": "multiclass: max over class names |count/rows − baseline count/baseline rows| (statistics.label"
    ".class_counts, else train + eval class_counts named by index), and a class the baseline has and this run lacks "
    "fails; binary: |positive rate − the baseline's| (classes by position: negative, positive); regression: "
    "|mean − the baseline's mean| / the baseline's std (statistics.label)",
    "rows": "(train + eval rows) / the baseline's",
    "bounds": "min ≥ lower, max ≤ upper, per element",
}
"""How each check's value is computed from the statistics, recorded with every decision."""
Vocabularies = Mapping[str, list[str] | None]
"""The baseline version's vocabulary of each categorical feature that maps through one now (None: the baseline
has none for it)."""


def divergence(p: dict[str, int], q: dict[str, int]) -> float:
    """Jensen–Shannon divergence (base 2) of two histograms given as {bin: count}: 0 alike, 1 disjoint."""
    total_p, total_q = sum(p.values()) or 1, sum(q.values()) or 1
    js = 0.0
    for b in set(p) | set(q):
        a, c = p.get(b, 0) / total_p, q.get(b, 0) / total_q
        m = (a + c) / 2
        js += sum(x / 2 * math.log2(x / m) for x in (a, c) if x)
    return max(js, 0.0)


def elements(feature: str, n: int) -> list[str]:
    """The names of the feature's ``n`` elements: ``x`` for a scalar, ``pixel[5]`` for an element of a vector."""
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


def _kinds(stats: DataStatistics) -> dict[str, str]:
    """Each feature's kind as the statistics know it: numeric or categorical (a list's too)."""
    return {**dict.fromkeys(stats.features, "numeric"), **dict.fromkeys(stats.categorical, "categorical")}


def _why_not_compared(feature: str, now: DataStatistics, base: DataStatistics) -> str | None:
    """Why the feature has nothing to compare with in the baseline's statistics (None: it has)."""
    kind, was = _kinds(now)[feature], _kinds(base).get(feature)
    if was is None:
        return "new since the baseline"
    if was != kind:
        return f"{kind} now, {was} in the baseline"
    size, was_size = (len(s.features[feature].mean) if kind == "numeric" else 1 for s in (now, base))
    return f"{size} elements now, {was_size} in the baseline" if size != was_size else None


def not_compared(now: DataStatistics, base: DataStatistics, vocabularies: Vocabularies) -> list[NotCompared]:
    """What has nothing to compare with in the baseline's data, and why: a feature new since then or of another
    kind or shape, a vocabulary the baseline version lacks, a label of another task."""
    notes = [
        NotCompared(feature=feature, why=why)
        for feature in _kinds(now)
        if (why := _why_not_compared(feature, now, base))
    ]
    notes += [
        NotCompared(
            feature=f, why="the baseline version has no vocabulary of it (hashed, or published before vocabularies)"
        )
        for f, vocabulary in vocabularies.items()
        if vocabulary is None and f in base.categorical
    ]
    if now.task != base.task:
        notes.append(NotCompared(feature="label", why=f"task {now.task} now, {base.task} in the baseline"))
    return notes


def feature_checks(now: DataStatistics, base: DataStatistics, settings: DataChecks) -> list[dict[str, Any]]:
    """Drift, constant-ness and missing rate of every numeric feature element that has one to compare with."""
    rows = []
    drift, constant = settings.drift, settings.constant.min_share
    for feature, stats in now.features.items():
        if _why_not_compared(feature, now, base):
            continue
        old = base.features[feature]
        for i, name in enumerate(elements(feature, len(stats.mean))):
            js = divergence(stats.histogram[i], old.histogram[i])
            rows.append(
                _row(
                    "drift",
                    name,
                    "Jensen–Shannon divergence from the baseline's histogram",
                    js,
                    None,
                    drift.max_divergence,
                    drift.max_divergence - js,
                    f"≤ {drift.max_divergence}",
                )
            )
            varied, was = varied_share(stats.histogram[i]), varied_share(old.histogram[i])
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
        rows += _numeric_missing(feature, now, base, settings.missing.max_change)
    return rows


def _numeric_missing(feature: str, now: DataStatistics, base: DataStatistics, limit: float) -> list[dict[str, Any]]:
    """The missing rate of each element with a missing value on either side (statistics without 'missing' were
    written when a missing value was a bad row: none)."""
    stats, old = now.features[feature], base.features[feature]
    n = len(stats.mean)
    rates = [[m / (s.rows or 1) for m in f.missing or [0] * n] for s, f in ((now, stats), (base, old))]
    return [
        _missing_row(name, rate, was, limit)
        for name, rate, was in zip(elements(feature, n), *rates, strict=True)
        if rate or was
    ]


def _missing_row(feature: str, rate: float, was: float, limit: float) -> dict[str, Any]:
    return _row(
        "missing",
        feature,
        "missing rate (rows without a value)",
        rate,
        was,
        limit,
        limit - abs(rate - was),
        f"|rate − baseline's| ≤ {limit}",
    )


def value_shares(stats: CategoricalStatistics) -> dict[str, float]:
    """A categorical feature's top values' shares of the values counted."""
    return {str(value): n / (stats.values or 1) for value, n in stats.top}


def cut_share(stats: CategoricalStatistics) -> float:
    """The share of the top list's last value when the list does not hold every value (0 when it does): a value
    beyond it has at most that share."""
    listed = sum(n for _, n in stats.top)
    return stats.top[-1][1] / stats.values if listed < stats.values else 0.0


def categorical_checks(
    now: DataStatistics, base: DataStatistics, settings: DataChecks, vocabularies: Vocabularies
) -> list[dict[str, Any]]:
    """Per categorical feature with one to compare with: the L∞ distance of its value shares, the share of its
    values outside the baseline's vocabulary (when it maps through one now and the baseline has one), its
    missing rate."""
    rows = []
    for feature, stats in now.categorical.items():
        if _why_not_compared(feature, now, base):
            continue
        old = base.categorical[feature]
        rows.append(_categorical_drift(feature, stats, old, settings.drift.max_distance))
        if (vocabulary := vocabularies.get(feature)) is not None:
            rows.append(_out_of_vocabulary(feature, stats, set(vocabulary), settings.vocabulary.max_oov_share))
        rate, was = (s.missing / (s.rows or 1) for s in (stats, old))
        rows.append(_missing_row(feature, rate, was, settings.missing.max_change))
    return rows


def _categorical_drift(
    feature: str, stats: CategoricalStatistics, old: CategoricalStatistics, limit: float
) -> dict[str, Any]:
    shares, was = value_shares(stats), value_shares(old)
    changes = {v: abs(shares.get(v, 0.0) - was.get(v, 0.0)) for v in shares | was}
    moved = max(changes, key=changes.__getitem__, default=None)
    distance = changes[moved] if moved is not None else 0.0
    within = max(cut_share(stats), cut_share(old))
    row = _row(
        "drift",
        feature,
        "L∞ distance of the value shares from the baseline's",
        distance,
        None,
        limit,
        limit - distance,
        f"≤ {limit}",
    )
    top = None if moved is None else {"value": moved, "share": shares.get(moved, 0.0), "baseline": was.get(moved, 0.0)}
    return row | {"top_value": top} | ({"within": within} if within else {})


def _out_of_vocabulary(
    feature: str, stats: CategoricalStatistics, vocabulary: set[str], limit: float
) -> dict[str, Any]:
    outside = [(str(value), n / (stats.values or 1)) for value, n in stats.top if str(value) not in vocabulary]
    share = sum(s for _, s in outside)
    beyond = 1 - sum(n for _, n in stats.top) / stats.values if stats.values else 0.0
    row = _row(
        "vocabulary",
        feature,
        "share of the values outside the baseline's vocabulary",
        share,
        None,
        limit,
        limit - share,
        f"≤ {limit}",
    )
    top = {"value": outside[0][0], "share": outside[0][1], "baseline": None} if outside else None
    return row | {"top_value": top} | ({"beyond_top": beyond} if beyond > 0 else {})


def _class_counts(stats: DataStatistics) -> dict[str | None, int]:
    """Rows per class name over both splits (statistics from before class names: the class indices)."""
    if isinstance(stats.label, ClassStatistics):
        return dict(zip(stats.label.classes, stats.label.class_counts, strict=True))
    pairs = zip(stats.train.class_counts or [], stats.eval.class_counts or [], strict=True)
    return {str(k): a + b for k, (a, b) in enumerate(pairs)}


def label_checks(now: DataStatistics, base: DataStatistics, settings: DataChecks) -> list[dict[str, Any]]:
    """By the label's task (none when it changed since the baseline): multiclass, the largest change of a class's
    share (L∞, classes by name) and every class the baseline has and this run lacks; binary, the change of the
    positive rate (classes by position) and a class gone; regression, the shift of the target's mean."""
    task, limits = now.task, settings.labels
    if task != base.task:
        return []
    if isinstance(now.label, TargetStatistics) and isinstance(base.label, TargetStatistics):
        return [_mean_shift(now.label, base.label, limits.max_mean_shift)]
    counts, old = _class_counts(now), _class_counts(base)
    if task == "binary":
        old = dict(zip(counts, old.values(), strict=True))  # [negative, positive], whatever their names
    shares = {c: n / (sum(counts.values()) or 1) for c, n in counts.items()}
    old_shares = {c: n / (sum(old.values()) or 1) for c, n in old.items()}
    change = {c: abs(shares.get(c, 0.0) - old_shares.get(c, 0.0)) for c in shares | old_shares}
    worst = list(counts)[1] if task == "binary" else max(change, key=change.__getitem__)
    statistic = "change of the positive rate" if task == "binary" else "change of the class's share of the rows (L∞)"
    limit = limits.max_change
    rows = [
        _row(
            "labels",
            f"class {worst}",
            statistic,
            shares.get(worst, 0.0),
            old_shares.get(worst, 0.0),
            limit,
            limit - change[worst],
            f"|share − baseline's| ≤ {limit}",
        )
    ]
    rows += [
        _row("labels", f"class {c}", "rows of the class", 0, n, 1, -1.0, "present when the baseline has it")
        for c, n in old.items()
        if n > 0 and not counts.get(c)
    ]
    return rows


def _mean_shift(label: TargetStatistics, old: TargetStatistics, limit: float) -> dict[str, Any]:
    """The target's mean against the baseline's; the margin in the baseline's standard deviations (a constant
    baseline target: minus the change itself)."""
    change = abs(label.mean - old.mean)
    return _row(
        "labels",
        "target",
        "mean of the target",
        label.mean,
        old.mean,
        limit,
        limit - change / old.std if old.std else -change,
        f"|mean − baseline's| ≤ {limit} × the baseline's std ({old.std:.4g})",
    )


def row_checks(now: DataStatistics, base: DataStatistics, settings: DataChecks) -> list[dict[str, Any]]:
    rows_now, rows_base = now.rows, base.rows
    ratio, low, high = rows_now / rows_base, settings.rows.min_ratio, settings.rows.max_ratio
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


def bound_checks(now: DataStatistics, settings: DataChecks) -> list[dict[str, Any]]:
    """Every element of a bounded feature within its bounds (its min and max; an element without a value has
    none to check)."""
    rows = []
    for feature, bound in settings.bounds.features.items():
        stats = now.features[feature]
        for i, name in enumerate(elements(feature, len(stats.mean))):
            lowest, highest = stats.min[i], stats.max[i]
            if bound.lower is not None and lowest is not None:
                rows.append(
                    _row(
                        "bounds",
                        name,
                        "min",
                        lowest,
                        None,
                        bound.lower,
                        lowest - bound.lower,
                        f"≥ {bound.lower}",
                    )
                )
            if bound.upper is not None and highest is not None:
                rows.append(
                    _row(
                        "bounds",
                        name,
                        "max",
                        highest,
                        None,
                        bound.upper,
                        bound.upper - highest,
                        f"≤ {bound.upper}",
                    )
                )
    return rows


def checks(
    now: DataStatistics, base: DataStatistics | None, settings: DataChecks, vocabularies: Vocabularies
) -> list[CheckRow]:
    """Every check of ``settings`` (the spec's data.checks, as JSON) not turned off; those needing a baseline
    only with one (``vocabularies``: see Vocabularies). Each row says what a failure does (``mode``) and whether
    it passed."""
    rows = bound_checks(now, settings)
    if base is not None:
        rows += (
            feature_checks(now, base, settings)
            + categorical_checks(now, base, settings, vocabularies)
            + label_checks(now, base, settings)
            + row_checks(now, base, settings)
        )
    modes = [getattr(settings, row["check"]).mode or settings.mode for row in rows]
    return [
        CheckRow(**row, mode=mode, passed=row["margin"] >= 0)
        for row, mode in zip(rows, modes, strict=True)
        if mode != "off"
    ]


def failure_line(row: CheckRow) -> str:
    """A failed check in words: the feature, the statistic, this run's value, the baseline's, the bound; for a
    categorical feature, the value that moved most (drift) or the most frequent one outside the vocabulary."""

    def shown(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    baseline = "" if row.baseline is None else f", baseline {shown(row.baseline)}"
    line = f"{row.check}: {row.feature} {row.statistic} {shown(row.value)}{baseline}; allowed {row.rule}"
    if top := row.top_value:
        was = "" if top.baseline is None else f", baseline {shown(top.baseline)}"
        line += f" (value {top.value!r}: share {shown(top.share)}{was})"
    return line
