"""The data gate's checks (tfdist.contract.data_gate) on statistics made from known data, each figure
against one computed here with numpy: drift (Jensen–Shannon), constant features, labels, rows, bounds, and
what each mode does."""

from __future__ import annotations

import numpy as np
import pytest

from tfdist.contract import data_gate
from tfdist.spec.model import DataChecks
from tfdist.trainer import statistics


def described(features: np.ndarray, labels: np.ndarray, classes: int = 3) -> dict:
    """Data statistics as prepare_data records them (all rows counted as train)."""
    return {
        "bins": statistics.SCHEME,
        "features": {"x": statistics.summary(statistics.of_chunk(features))},
        "train": {"rows": len(labels), "class_counts": np.bincount(labels, minlength=classes).tolist()},
        "eval": {"rows": 0, "class_counts": [0] * classes},
    }


def js_numpy(a: np.ndarray, b: np.ndarray) -> float:
    p = np.bincount(statistics.bins(a), minlength=statistics.NUM_BINS) / len(a)
    q = np.bincount(statistics.bins(b), minlength=statistics.NUM_BINS) / len(b)
    m = (p + q) / 2
    kl = lambda u: float(np.sum(u[u > 0] * np.log2(u[u > 0] / m[u > 0])))  # noqa: E731
    return (kl(p) + kl(q)) / 2


def settings(**changes) -> dict:
    return DataChecks.model_validate(changes).model_dump(mode="json")


def data(rows: int = 2000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = np.stack([rng.integers(0, 17, rows), rng.normal(5, 2, rows), np.zeros(rows)], axis=1).astype(float)
    return features, rng.integers(0, 3, rows)


def by(rows: list[dict], check: str, feature: str | None = None) -> list[dict]:
    return [r for r in rows if r["check"] == check and (feature is None or r["feature"] == feature)]


def test_an_ordinary_next_day_passes_every_default_check():
    base, now = described(*data(seed=1)), described(*data(seed=2))
    rows = data_gate.checks(now, base, settings())
    assert rows and all(r["passed"] for r in rows), [data_gate.failure_line(r) for r in rows if not r["passed"]]
    assert {r["check"] for r in rows} == {"drift", "labels", "rows"}


def test_drift_is_the_jensen_shannon_divergence_of_the_histograms():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    b[:, 1] *= 10  # a unit change
    rows = data_gate.checks(described(b, labels), described(a, labels), settings())
    for i in range(3):
        (row,) = by(rows, "drift", f"x[{i}]")
        assert row["value"] == pytest.approx(js_numpy(b[:, i], a[:, i]), abs=1e-12)
    (shifted,) = by(rows, "drift", "x[1]")
    assert not shifted["passed"] and shifted["value"] > 0.5 and shifted["mode"] == "refuse"
    assert data_gate.failure_line(shifted).startswith(
        "drift: x[1] Jensen–Shannon divergence from the baseline's histogram 0."
    )
    assert data_gate.divergence({"1": 5}, {"2": 7}) == 1.0 and data_gate.divergence({"1": 5}, {"1": 9}) == 0.0


def test_a_feature_constant_now_but_not_in_the_baseline_fails_and_the_reverse_too():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    b[:, 0] = 5.0  # constant now
    b[: len(b) // 10, 2] = 1.0  # 10% of a feature that was always 0
    rows = by(data_gate.checks(described(b, labels), described(a, labels), settings()), "constant")
    assert {r["feature"]: r["passed"] for r in rows} == {"x[0]": False, "x[2]": False}
    assert by(rows, "constant", "x[2]")[0]["value"] == pytest.approx(0.1)
    b[: len(b) // 10, 2] = 0.0
    b[:5, 2] = 1.0  # 0.25% off zero: below min_share, not a change of constant-ness
    (row,) = by(data_gate.checks(described(b, labels), described(a, labels), settings()), "constant", "x[2]")
    assert row["passed"] and row["margin"] == pytest.approx(0.01 - 0.0025)


def test_labels_fail_on_the_largest_share_change_and_on_a_missing_class():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    keep = labels != 2
    rows = by(data_gate.checks(described(b[keep], labels[keep]), described(a, labels), settings()), "labels")
    shares = np.bincount(labels[keep], minlength=3) / keep.sum() - np.bincount(labels, minlength=3) / len(labels)
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max()) and not largest["passed"]
    assert [r["feature"] for r in rows if r["statistic"] == "rows of the class"] == ["class 2"]


def test_labels_compare_a_class_one_side_has_no_count_for_as_no_rows():
    """The label's num_classes changed since the baseline: a class one side does not count has no rows there."""
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    more = np.where(np.arange(len(labels)) % 4 == 0, 3, labels)  # a fourth class, a quarter of the rows
    rows = by(data_gate.checks(described(b, labels), described(a, more, classes=4), settings()), "labels")
    assert [r["feature"] for r in rows if r["statistic"] == "rows of the class"] == ["class 3"]
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    shares = np.bincount(labels, minlength=4) / len(labels) - np.bincount(more, minlength=4) / len(more)
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max()) and not largest["passed"]
    rows = by(data_gate.checks(described(a, more, classes=4), described(b, labels), settings()), "labels")
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max())


def test_a_feature_new_since_the_baseline_or_of_another_shape_has_no_drift_to_compare():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    narrower = described(a[:, :2], labels)
    for now, base in ((described(b, labels), narrower), (narrower, described(b, labels))):
        rows = data_gate.checks(now, base, settings())
        assert not by(rows, "drift") and not by(rows, "constant") and by(rows, "labels")
    renamed = {**described(a, labels), "features": {"y": described(a, labels)["features"]["x"]}}
    assert not by(data_gate.checks(described(b, labels), renamed, settings()), "drift")


def test_rows_against_the_baseline_and_bounds_without_one():
    (a, labels) = data(rows=2000)
    few, few_labels = a[:200], labels[:200]
    rows = data_gate.checks(described(few, few_labels), described(a, labels), settings())
    (count,) = by(rows, "rows")
    assert (count["value"], count["baseline"], count["passed"]) == (200, 2000, False)
    assert count["margin"] == pytest.approx(0.1 - 0.5)
    bounded = settings(bounds={"features": {"x": {"lower": 0, "upper": 16}}})
    alone = data_gate.checks(described(a, labels), None, bounded)
    assert {r["check"] for r in alone} == {"bounds"}
    assert {(r["feature"], r["statistic"]): r["passed"] for r in alone} == {
        ("x[0]", "min"): True,
        ("x[0]", "max"): True,
        ("x[1]", "min"): a[:, 1].min() >= 0,
        ("x[1]", "max"): a[:, 1].max() <= 16,
        ("x[2]", "min"): True,
        ("x[2]", "max"): True,
    }


def test_warn_mode_records_the_failure_without_refusing_and_off_drops_the_check():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    b[:, 1] *= 10
    rows = data_gate.checks(described(b, labels), described(a, labels), settings(mode="warn"))
    assert {r["mode"] for r in rows} == {"warn"} and any(not r["passed"] for r in rows)
    rows = data_gate.checks(described(b, labels), described(a, labels), settings(drift={"mode": "off"}))
    assert not by(rows, "drift")
