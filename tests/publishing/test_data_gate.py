"""The data gate's checks (tfdist.publishing.data_gate) on statistics made from known data, each figure
against one computed here with numpy: drift (Jensen–Shannon), constant features, labels, rows, bounds, and
what each mode does."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from tests.support.specs import make_spec
from tfdist.contract.data_records import CheckRow, DataStatistics
from tfdist.contract.stages import ValidateDataArgs
from tfdist.contract.train_records import RunRecord
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.publishing import data_gate, registry
from tfdist.spec.data_checks import DataChecks
from tfdist.spec.load import load_spec
from tfdist.trainer import statistics, validate_data


def checks(now: dict, base: dict | None, settings: DataChecks, vocabularies: dict) -> list[dict]:
    """data_gate.checks of statistics as the files hold them, its rows as the record holds them."""
    compared = data_gate.checks(as_read(now), base and as_read(base), settings, vocabularies)
    return [row.model_dump(mode="json") for row in compared]


def not_compared(now: dict, base: dict, vocabularies: dict) -> list[dict]:
    return [note.model_dump() for note in data_gate.not_compared(as_read(now), as_read(base), vocabularies)]


def failure_line(row: dict) -> str:
    return data_gate.failure_line(CheckRow.model_validate(row))


def as_read(statistics: dict) -> DataStatistics:
    return DataStatistics.parse(statistics, "the test's statistics")


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


def settings(**changes) -> DataChecks:
    return DataChecks.model_validate(changes)


def data(rows: int = 2000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = np.stack([rng.integers(0, 17, rows), rng.normal(5, 2, rows), np.zeros(rows)], axis=1).astype(float)
    return features, rng.integers(0, 3, rows)


def by(rows: list[dict], check: str, feature: str | None = None) -> list[dict]:
    return [r for r in rows if r["check"] == check and (feature is None or r["feature"] == feature)]


def test_an_ordinary_next_day_passes_every_default_check():
    base, now = described(*data(seed=1)), described(*data(seed=2))
    rows = checks(now, base, settings(), {})
    assert rows and all(r["passed"] for r in rows), [failure_line(r) for r in rows if not r["passed"]]
    assert {r["check"] for r in rows} == {"drift", "labels", "rows"}


def test_drift_is_the_jensen_shannon_divergence_of_the_histograms():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    b[:, 1] *= 10  # a unit change
    rows = checks(described(b, labels), described(a, labels), settings(), {})
    for i in range(3):
        (row,) = by(rows, "drift", f"x[{i}]")
        assert row["value"] == pytest.approx(js_numpy(b[:, i], a[:, i]), abs=1e-12)
    (shifted,) = by(rows, "drift", "x[1]")
    assert not shifted["passed"] and shifted["value"] > 0.5 and shifted["mode"] == "refuse"
    assert failure_line(shifted).startswith("drift: x[1] Jensen–Shannon divergence from the baseline's histogram 0.")
    assert data_gate.divergence({"1": 5}, {"2": 7}) == 1.0 and data_gate.divergence({"1": 5}, {"1": 9}) == 0.0


def test_a_feature_constant_now_but_not_in_the_baseline_fails_and_the_reverse_too():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    b[:, 0] = 5.0  # constant now
    b[: len(b) // 10, 2] = 1.0  # 10% of a feature that was always 0
    rows = by(checks(described(b, labels), described(a, labels), settings(), {}), "constant")
    assert {r["feature"]: r["passed"] for r in rows} == {"x[0]": False, "x[2]": False}
    assert by(rows, "constant", "x[2]")[0]["value"] == pytest.approx(0.1)
    b[: len(b) // 10, 2] = 0.0
    b[:5, 2] = 1.0  # 0.25% off zero: below min_share, not a change of constant-ness
    (row,) = by(checks(described(b, labels), described(a, labels), settings(), {}), "constant", "x[2]")
    assert row["passed"] and row["margin"] == pytest.approx(0.01 - 0.0025)


def test_labels_fail_on_the_largest_share_change_and_on_a_missing_class():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    keep = labels != 2
    rows = by(checks(described(b[keep], labels[keep]), described(a, labels), settings(), {}), "labels")
    shares = np.bincount(labels[keep], minlength=3) / keep.sum() - np.bincount(labels, minlength=3) / len(labels)
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max()) and not largest["passed"]
    assert [r["feature"] for r in rows if r["statistic"] == "rows of the class"] == ["class 2"]


def test_labels_compare_a_class_one_side_has_no_count_for_as_no_rows():
    """The label's num_classes changed since the baseline: a class one side does not count has no rows there."""
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    more = np.where(np.arange(len(labels)) % 4 == 0, 3, labels)  # a fourth class, a quarter of the rows
    rows = by(checks(described(b, labels), described(a, more, classes=4), settings(), {}), "labels")
    assert [r["feature"] for r in rows if r["statistic"] == "rows of the class"] == ["class 3"]
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    shares = np.bincount(labels, minlength=4) / len(labels) - np.bincount(more, minlength=4) / len(more)
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max()) and not largest["passed"]
    rows = by(checks(described(a, more, classes=4), described(b, labels), settings(), {}), "labels")
    largest = next(r for r in rows if r["statistic"].startswith("change"))
    assert largest["margin"] == pytest.approx(0.05 - np.abs(shares).max())


def test_a_feature_new_since_the_baseline_or_of_another_shape_has_no_drift_to_compare():
    (a, labels), (b, _) = data(seed=1), data(seed=2)
    narrower = described(a[:, :2], labels)
    for now, base in ((described(b, labels), narrower), (narrower, described(b, labels))):
        rows = checks(now, base, settings(), {})
        assert not by(rows, "drift") and not by(rows, "constant") and by(rows, "labels")
    assert not_compared(described(b, labels), narrower, {}) == [
        {"feature": "x", "why": "3 elements now, 2 in the baseline"}
    ]
    renamed = {**described(a, labels), "features": {"y": described(a, labels)["features"]["x"]}}
    assert not by(checks(described(b, labels), renamed, settings(), {}), "drift")


def test_rows_against_the_baseline_and_bounds_without_one():
    (a, labels) = data(rows=2000)
    few, few_labels = a[:200], labels[:200]
    rows = checks(described(few, few_labels), described(a, labels), settings(), {})
    (count,) = by(rows, "rows")
    assert (count["value"], count["baseline"], count["passed"]) == (200, 2000, False)
    assert count["margin"] == pytest.approx(0.1 - 0.5)
    bounded = settings(bounds={"features": {"x": {"lower": 0, "upper": 16}}})
    alone = checks(described(a, labels), None, bounded, {})
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
    rows = checks(described(b, labels), described(a, labels), settings(mode="warn"), {})
    assert {r["mode"] for r in rows} == {"warn"} and any(not r["passed"] for r in rows)
    rows = checks(described(b, labels), described(a, labels), settings(drift={"mode": "off"}), {})
    assert not by(rows, "drift")


# ---- categorical features, the missing rate and the label by task, on statistics shaped as docs/tabular.md says


def categorical(values: list[str | None], top: int = 1000) -> dict:
    """statistics.categorical.<f> of a scalar feature's values (None: missing): the top values most frequent
    first, ties in byte order."""
    counts = Counter(v for v in values if v is not None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].encode()))
    return {
        "rows": len(values),
        "values": sum(counts.values()),
        "missing": values.count(None),
        "distinct": len(counts),
        "distinct_exact": True,
        "top": [[v, n] for v, n in ranked[:top]],
    }


def classes(labels: list[str], names: list[str], task: str = "multiclass") -> dict:
    """statistics.label, train and eval of a classification label (all rows counted as train)."""
    counts = [labels.count(n) for n in names]
    return {
        "label": {"task": task, "classes": names, "class_counts": counts},
        "train": {"rows": len(labels), "class_counts": counts},
        "eval": {"rows": 0, "class_counts": [0] * len(names)},
    }


def target(values: np.ndarray) -> dict:
    """statistics.label, train and eval of a regression target."""
    label = {"task": "regression", "count": len(values), "mean": float(values.mean()), "std": float(values.std())}
    label |= {"min": float(values.min()), "max": float(values.max()), "histogram": {}}
    return {"label": label, "train": {"rows": len(values)}, "eval": {"rows": 0}}


def tabular(label: dict, numeric: dict | None = None, **features: list[str | None]) -> dict:
    """Data statistics with these categorical features' values and this label."""
    return {
        "bins": statistics.SCHEME,
        "features": numeric or {},
        "categorical": {name: categorical(values) for name, values in features.items()},
    } | label


COUNTRIES = ["DE"] * 30 + ["FR"] * 25 + ["US"] * 20 + ["IT"] * 15 + ["ES"] * 10
LABELS = ["no"] * 70 + ["yes"] * 30


def test_categorical_drift_is_the_l_infinity_distance_of_the_value_shares_naming_the_value_that_moved_most():
    base = tabular(classes(LABELS, ["no", "yes"]), country=COUNTRIES)
    moved = ["DE"] * 45 + ["FR"] * 20 + ["US"] * 15 + ["IT"] * 12 + ["ES"] * 5 + ["PL"] * 3
    now = tabular(classes(LABELS, ["no", "yes"]), country=moved)
    (row,) = by(checks(now, base, settings(), {}), "drift", "country")
    shares = lambda xs: {v: n / len(xs) for v, n in Counter(xs).items()}  # noqa: E731
    p, q = shares(moved), shares(COUNTRIES)
    assert row["value"] == pytest.approx(max(abs(p.get(v, 0) - q.get(v, 0)) for v in p | q)) == 0.15
    assert row["top_value"] == {"value": "DE", "share": 0.45, "baseline": 0.30} and not row["passed"]
    assert "within" not in row  # both lists hold every value: exact
    assert failure_line(row) == (
        "drift: country L∞ distance of the value shares from the baseline's 0.15; allowed ≤ 0.1 "
        "(value 'DE': share 0.45, baseline 0.3)"
    )
    same = tabular(classes(LABELS, ["no", "yes"]), country=sorted(COUNTRIES))
    (row,) = by(checks(same, base, settings(), {}), "drift", "country")
    assert row["value"] == 0 and row["passed"]


def test_a_value_beyond_a_cut_top_list_has_share_zero_there_and_the_row_says_how_close_that_is():
    base = tabular(classes(LABELS, ["no", "yes"]), country=COUNTRIES)
    now = tabular(classes(LABELS, ["no", "yes"]), country=COUNTRIES)
    now["categorical"]["country"] = categorical(COUNTRIES, top=3)  # DE, FR, US listed; IT, ES cut
    (row,) = by(checks(now, base, settings(), {}), "drift", "country")
    assert row["value"] == pytest.approx(0.15) and row["top_value"]["value"] == "IT"  # IT: 0 here, 0.15 there
    assert row["within"] == pytest.approx(0.20)  # IT and ES have at most US's share here


def test_the_share_of_values_outside_the_baselines_vocabulary_and_no_check_without_one():
    base = tabular(classes(LABELS, ["no", "yes"]), country=COUNTRIES, city=COUNTRIES)
    now_values = COUNTRIES[:90] + ["PL"] * 6 + ["CZ"] * 4  # ES lost 10 rows to two new values
    now = tabular(classes(LABELS, ["no", "yes"]), country=now_values, city=now_values)
    vocabulary = ["DE", "FR", "US", "IT", "ES"]
    rows = checks(now, base, settings(), {"country": vocabulary})  # city: hashed, no vocabulary
    (row,) = by(rows, "vocabulary")
    assert (row["feature"], row["value"], row["passed"]) == ("country", pytest.approx(0.10), False)
    assert row["top_value"] == {"value": "PL", "share": 0.06, "baseline": None} and "beyond_top" not in row
    assert failure_line(row).endswith("allowed ≤ 0.05 (value 'PL': share 0.06)")
    (row,) = by(checks(now, base, settings(), {"country": [*vocabulary, "PL", "CZ"]}), "vocabulary")
    assert row["value"] == 0 and row["top_value"] is None and row["passed"]
    now["categorical"]["country"] = categorical(now_values, top=5)  # CZ (4 rows) beyond the list: not known
    (row,) = by(checks(now, base, settings(), {"country": vocabulary}), "vocabulary")
    assert row["value"] == pytest.approx(0.06) and row["beyond_top"] == pytest.approx(0.04)
    notes = not_compared(now, base, {"country": None})
    assert notes == [
        {
            "feature": "country",
            "why": "the baseline version has no vocabulary of it (hashed, or published before vocabularies)",
        }
    ]
    assert not by(checks(now, base, settings(), {"country": None}), "vocabulary")


def test_the_missing_rate_of_categorical_features_and_of_numeric_elements_with_a_missing_value():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(100, 2))

    def numeric(missing: list[int] | None) -> dict:
        return {"x": statistics.summary(statistics.of_chunk(x)) | ({"missing": missing} if missing else {})}

    base = tabular(classes(LABELS, ["no", "yes"]), numeric(None), country=COUNTRIES)  # before missing values
    now = tabular(classes(LABELS, ["no", "yes"]), numeric([0, 8]), country=COUNTRIES[:92] + [None] * 8)
    rows = by(checks(now, base, settings(), {}), "missing")
    assert {r["feature"]: (r["value"], r["baseline"], r["passed"]) for r in rows} == {
        "x[1]": (0.08, 0.0, False),  # x[0]: no missing value on either side, no row
        "country": (0.08, 0.0, False),
    }
    assert rows[0]["margin"] == pytest.approx(0.05 - 0.08)
    rows = by(checks(now, now, settings(), {}), "missing")
    assert [(r["feature"], r["passed"]) for r in rows] == [("x[1]", True), ("country", True)]
    assert not by(checks(now, base, settings(missing={"mode": "off"}), {}), "missing")


def test_multiclass_shares_compare_by_class_name_whatever_the_order_and_a_class_gone_fails():
    animals = ["dog"] * 50 + ["cat"] * 30 + ["bird"] * 20
    base = tabular(classes(animals, ["bird", "cat", "dog"]))
    reordered = tabular(classes(animals, ["dog", "cat", "bird"]))  # the same shares, the classes in another order
    assert all(r["passed"] for r in by(checks(reordered, base, settings(), {}), "labels"))
    no_birds = [a for a in animals if a != "bird"] + ["fish"] * 10 + ["dog"] * 10  # bird −0.2, fish and dog +0.1
    rows = by(checks(tabular(classes(no_birds, ["cat", "dog", "fish"])), base, settings(), {}), "labels")
    largest, gone = rows
    assert (largest["feature"], largest["value"], largest["baseline"]) == ("class bird", 0.0, 0.2)
    assert largest["margin"] == pytest.approx(0.05 - 0.2) and not largest["passed"]
    assert (gone["feature"], gone["statistic"], gone["baseline"], gone["passed"]) == (
        "class bird",
        "rows of the class",
        20,
        False,
    )


def test_binary_compares_the_positive_rate_and_regression_the_mean_in_the_baselines_deviations():
    base = tabular(classes(LABELS, ["no", "yes"], "binary"))
    now = tabular(classes(["0"] * 60 + ["1"] * 40, ["0", "1"], "binary"))  # renamed: compared by position
    (row,) = by(checks(now, base, settings(), {}), "labels")
    assert (row["feature"], row["statistic"], row["value"], row["baseline"]) == (
        "class 1",
        "change of the positive rate",
        0.4,
        0.3,
    )
    assert row["margin"] == pytest.approx(0.05 - 0.1) and not row["passed"]
    gone = by(checks(tabular(classes(["0"] * 100, ["0", "1"], "binary")), base, settings(), {}), "labels")
    assert [r["feature"] for r in gone] == ["class 1", "class 1"] and gone[1]["statistic"] == "rows of the class"

    rng = np.random.default_rng(4)
    price = rng.normal(100, 20, 1000)
    for shift, passed in ((5, True), (15, False)):
        (row,) = by(checks(tabular(target(price + shift)), tabular(target(price)), settings(), {}), "labels")
        assert row["margin"] == pytest.approx(0.5 - shift / price.std()) and row["passed"] is passed
    assert failure_line(row).startswith("labels: target mean of the target 1")
    assert "allowed |mean − baseline's| ≤ 0.5 × the baseline's std (" in failure_line(row)


def test_a_feature_new_or_of_another_kind_and_a_label_of_another_task_have_nothing_to_compare_with():
    rng = np.random.default_rng(5)
    x = {"x": statistics.summary(statistics.of_chunk(rng.normal(size=(100, 1))))}
    base = tabular(classes(LABELS, ["no", "yes"], "binary"), x, country=COUNTRIES)
    now = tabular(target(rng.normal(size=100)), {"country": x["x"]}, x=COUNTRIES, city=COUNTRIES)
    assert not_compared(now, base, {}) == [
        {"feature": "country", "why": "numeric now, categorical in the baseline"},
        {"feature": "x", "why": "categorical now, numeric in the baseline"},
        {"feature": "city", "why": "new since the baseline"},
        {"feature": "label", "why": "task regression now, binary in the baseline"},
    ]
    assert {r["check"] for r in checks(now, base, settings(), {})} == {"rows"}


def test_validate_data_checks_the_vocabulary_of_each_feature_mapped_through_one_against_the_baselines(tmp_path):
    """The baseline version keeps its vocabularies (vocabularies/<feature>.json): a feature with a vocabulary now is
    checked against it, a hashed one is not, and one the version has no vocabulary of is recorded as such."""
    version = str(tmp_path / "models" / "m" / "1")
    end = "2026-11-17T00:00:00+00:00"
    metadata = {"version": 1, "run_id": "a", "data_interval_end": end, "metrics": {"accuracy": 0.9}}
    write_json_atomic(registry.metadata_file(version), metadata)
    base = tabular(classes(LABELS, ["no", "yes"]), country=COUNTRIES, city=COUNTRIES, device=COUNTRIES)
    write_json_atomic(os.path.join(version, registry.DATA_STATISTICS), base)
    for feature in ("country", "city"):
        write_json_atomic(os.path.join(registry.vocabulary_dir(version), f"{feature}.json"), ["DE", "FR"])
    spec = make_spec(
        str(tmp_path),
        data={
            **make_spec("/")["data"],
            "features": [
                {"name": "country", "kind": "categorical"},
                {"name": "city", "kind": "categorical", "hash_buckets": 100},
                {"name": "device", "kind": "categorical", "vocabulary": {"max_tokens": 10}},
            ],
            "label": {"name": "churned", "task": "binary", "positive": "yes"},
        },
    )
    args = ValidateDataArgs("", "", "", os.path.dirname(version), "", "")
    run = RunRecord(run_id="b", data_interval_start="2026-11-16T00:00:00+00:00", data_interval_end=end)
    record = validate_data.decision_record(args, load_spec(spec), run, as_read(base)).payload()
    (row,) = by(record["checks"], "vocabulary")
    assert (row["feature"], row["value"]) == ("country", pytest.approx(0.45))  # US, IT, ES
    assert record["not_compared"] == [
        {
            "feature": "device",
            "why": "the baseline version has no vocabulary of it (hashed, or published before vocabularies)",
        }
    ]
    assert record["decision"] == "refused" and record["refused"] == [failure_line(row)]
