"""The data statistics prepare_data records (trainer/statistics.py), against values computed here with numpy
and a plain-Python binning, whatever the chunks they were merged from."""

from __future__ import annotations

import json
import math

import numpy as np

from tfdist.trainer import statistics


def reference_bin(x: float) -> int:
    """A value's bin by the rule the module states, for the float32 nearest it: zero (or below 2^-133) alone,
    else k = 2e + (|x|/2^e ≥ 1 + 53/128) for 2^e ≤ |x| < 2^(e+1), k from -80 to 79 (the outermost open-ended),
    on the value's sign's side."""
    x = float(np.float32(x))
    if abs(x) < 2.0**-133:
        return statistics.ZERO_BIN
    e = math.floor(math.log2(abs(x)))
    k = min(max(2 * e + (abs(x) / 2.0**e >= 1 + 53 / 128), -80), 79)
    return statistics.ZERO_BIN + (1 + k + 80 if x > 0 else -(1 + k + 80))


def values() -> np.ndarray:
    rng = np.random.default_rng(7)
    columns = [
        rng.normal(0, 1, 500),
        np.zeros(500),
        rng.integers(0, 17, 500).astype(float),
        rng.lognormal(0, 6, 500) * rng.choice([-1, 1], 500),
        np.full(500, 3.0),
    ]
    return np.stack(columns, axis=1)


def in_chunks(data: np.ndarray, cuts: list[int]) -> dict:
    parts = np.split(data, cuts)
    merged = statistics.of_chunk(parts[0])
    for part in parts[1:]:
        merged = statistics.merged(merged, statistics.of_chunk(part))
    return merged


def test_each_statistic_is_what_numpy_and_the_stated_bins_give():
    data = values()
    summary = statistics.summary(in_chunks(data, [120, 121, 400]))
    assert summary["count"] == [len(data)] * 5 and summary["missing"] == [0] * 5
    np.testing.assert_allclose(summary["mean"], data.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(summary["std"], data.std(axis=0), rtol=1e-9, atol=1e-12)
    assert summary["min"] == data.min(axis=0).tolist() and summary["max"] == data.max(axis=0).tolist()
    assert summary["zero_share"] == ((data == 0).sum(axis=0) / len(data)).tolist()
    for column, histogram in enumerate(summary["histogram"]):
        expected: dict[str, int] = {}
        for x in data[:, column]:
            expected[str(reference_bin(float(x)))] = expected.get(str(reference_bin(float(x))), 0) + 1
        assert histogram == expected, column
    assert summary["histogram"][1] == {str(statistics.ZERO_BIN): 500}


def test_a_value_ten_times_larger_lands_six_or_seven_bins_higher_and_the_edges_are_half_octaves():
    edge = 1 + 53 / 128
    assert [
        int(b) - statistics.ZERO_BIN
        for b in statistics.bins(np.array([1.0, np.nextafter(edge, 0, dtype=np.float32), edge, 2.0, -1.0, -edge]))
    ] == [81, 81, 82, 83, -81, -82]
    shifted = statistics.bins(np.array([3.0, 7.0, 11.0]) * 10) - statistics.bins(np.array([3.0, 7.0, 11.0]))
    assert set(shifted.tolist()) <= {6, 7}
    assert statistics.bins(np.array([1e-30, 1e30, 1e-300])).tolist() == [
        statistics.ZERO_BIN + 1,
        statistics.NUM_BINS - 1,
        statistics.ZERO_BIN,
    ]


def test_any_cut_into_chunks_gives_the_same_bytes_in_the_same_order():
    """Counts, bounds and histograms merge exactly; the moments merge in a fixed order, so one cut of the rows
    gives one result whatever the writers (prepare_data merges its pieces in input order)."""
    data = values()
    whole = json.dumps(statistics.summary(in_chunks(data, [250])), sort_keys=True)
    assert json.dumps(statistics.summary(in_chunks(data, [250])), sort_keys=True) == whole
    other = statistics.summary(in_chunks(data, [17, 300, 499]))
    assert {k: v for k, v in other.items() if k not in ("mean", "std")} == {
        k: v for k, v in json.loads(whole).items() if k not in ("mean", "std")
    }
    np.testing.assert_allclose(other["std"], json.loads(whole)["std"], rtol=1e-12)
    roundtrip = statistics.from_json(json.loads(json.dumps(statistics.to_json(in_chunks(data, [250])))))
    assert json.dumps(statistics.summary(roundtrip), sort_keys=True) == whole


def test_missing_values_are_counted_apart_and_left_out_of_every_other_statistic():
    """NaN is a missing value: per element its rows are counted as missing, and the count, moments, bounds, zero
    share and histogram are those of the values present, whatever the cut into chunks (a chunk where an element
    has no value at all included)."""
    data = values()
    rng = np.random.default_rng(11)
    data[rng.random(data.shape) < 0.2] = np.nan
    data[:100, 3] = np.nan  # the first chunk below holds no value of this element
    summary = statistics.summary(in_chunks(data, [100, 101, 400]))
    present = ~np.isnan(data)
    assert summary["count"] == present.sum(axis=0).tolist()
    assert summary["missing"] == (~present).sum(axis=0).tolist()
    for j in range(data.shape[1]):
        column = data[present[:, j], j]
        np.testing.assert_allclose(summary["mean"][j], column.mean(), rtol=1e-12)
        np.testing.assert_allclose(summary["std"][j], column.std(), rtol=1e-9, atol=1e-12)
        assert (summary["min"][j], summary["max"][j]) == (column.min(), column.max())
        assert summary["zero_share"][j] == (column == 0).sum() / len(column)
        assert sum(summary["histogram"][j].values()) == len(column)
    empty = statistics.summary(statistics.of_chunk(np.full((3, 1), np.nan)))
    assert (empty["count"], empty["missing"], empty["min"], empty["max"]) == ([0], [3], [None], [None])
