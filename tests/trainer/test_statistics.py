"""trainer/statistics.py. A numeric feature's statistics as prepare_data records them, against values computed here
with numpy and a plain-Python binning, whatever the chunks they were merged from. A categorical feature's value
counts (ValueCounts): exact while they fit, bounded in memory past that, the same whatever the cut into chunks and
pieces, a distinct count within a few percent of the truth once it is estimated; and the vocabulary rules."""

from __future__ import annotations

import io
import json
import math
import random
import tracemalloc
from collections import Counter

import numpy as np
import pytest

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


CAPACITY = 1000  # small, so that pruning happens at test sizes (the stage's is statistics.capacity's)


def counts_of(values: list[bytes], cuts: list[int], capacity: int = CAPACITY) -> statistics.ValueCounts:
    """Counted chunk by chunk, each piece (between cuts) in its own counter, the pieces merged in order; each
    piece's counts handed on through an .npz file, as writers hand them on."""
    total = statistics.ValueCounts(capacity)
    for piece in np.split(np.arange(len(values)), cuts):
        counts = statistics.ValueCounts(capacity)
        for chunk in np.array_split(piece, max(1, len(piece) // 700)):
            part = [values[i] for i in chunk]
            counts.add(part, len(part), part.count(b""))
        file = io.BytesIO()
        np.savez(file, **counts.to_arrays())
        file.seek(0)
        with np.load(file) as arrays:
            total.merge(statistics.ValueCounts.from_arrays(arrays))
    return total


def state(counts: statistics.ValueCounts) -> tuple:
    """Everything a counter holds, as comparable values."""
    return {k: v.tolist() for k, v in counts.to_arrays().items()}, counts.counts


def zipf(n: int, distinct: int, seed: int = 3) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [f"v{k}".encode() for k in np.minimum(rng.zipf(1.3, n), distinct)]


def test_counts_are_exact_while_they_fit_and_ranked_by_count_then_bytes():
    values = [b"b", b"a", b"", b"c", b"a", b"b", b"\xc3\xa9", b"", b"a"]
    counts = counts_of(values, [4])
    assert counts.ranked() == [(b"a", 3), (b"", 2), (b"b", 2), (b"c", 1), (b"\xc3\xa9", 1)]
    assert counts.summary(counts.ranked()) == {
        "rows": 9,
        "values": 9,
        "missing": 2,
        "distinct": 5,
        "distinct_exact": True,
        "top": [["a", 3], ["", 2], ["b", 2], ["c", 1], ["é", 1]],
    }


def test_the_vocabulary_keeps_min_count_at_most_max_tokens_ties_in_byte_order_and_the_missing_value():
    ranked = counts_of([b"x"] * 5 + [b""] * 3 + [b"b"] * 3 + [b"a"] * 3 + [b"z"], []).ranked()
    assert statistics.vocabulary(ranked, min_count=1, max_tokens=10) == ["x", "", "a", "b", "z"]
    assert statistics.vocabulary(ranked, min_count=3, max_tokens=10) == ["x", "", "a", "b"]
    assert statistics.vocabulary(ranked, min_count=1, max_tokens=3) == ["x", "", "a"]
    assert statistics.vocabulary(ranked, min_count=6, max_tokens=10) == []
    assert "z" not in statistics.vocabulary(ranked, min_count=2, max_tokens=10)  # out of vocabulary: an OOV bucket


def test_any_cut_into_chunks_and_pieces_gives_the_same_counts_exactly_while_they_fit():
    values = zipf(20_000, 900)
    whole = counts_of(values, [])
    assert whole.counts == Counter(values) and whole.distinct() == (len(set(values)), True)
    for cuts in ([5000], [1, 7000, 7001, 19_999]):
        assert state(counts_of(values, cuts)) == state(whole)


def test_past_capacity_the_top_values_survive_and_the_same_order_of_merges_gives_the_same_bytes():
    """A long tail of values seen once (ids) beside frequent ones: pruning keeps the frequent ones with their
    exact counts, memory stays bounded, and the result depends only on the pieces and their order."""
    rng = np.random.default_rng(5)
    frequent = [f"top{k}".encode() for k in rng.integers(0, 50, 30_000)]
    tail = [f"id{k}".encode() for k in range(30_000)]
    values = [v for pair in zip(frequent, tail, strict=True) for v in pair]
    counts = counts_of(values, [20_000, 40_000])
    assert len(counts.counts) <= 2 * CAPACITY and counts.distinct()[1] is False
    assert dict(counts.ranked()[:50]) == dict(Counter(frequent).most_common(50))
    assert state(counts_of(values, [20_000, 40_000])) == state(counts)


@pytest.mark.e2e
@pytest.mark.parametrize("distinct", [3 * CAPACITY, 50_000, 300_000])
def test_the_distinct_count_past_the_exact_bound_is_within_a_few_percent(distinct):
    values = [f"user-{k}".encode() for k in np.random.default_rng(distinct).integers(0, distinct, 2 * distinct)]
    truth = len(set(values))
    estimated, exact = counts_of(values, [len(values) // 3]).distinct()
    assert not exact and abs(estimated / truth - 1) < 0.03, (estimated, truth)


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_memory_stays_flat_for_millions_of_distinct_values():
    """The stage's own capacity (65,536 values kept, pruned at twice that): the counter's memory at 1.2 million
    distinct values is what it is at 300,000."""

    def peak(n: int) -> int:
        counts = statistics.ValueCounts(statistics.capacity(0))
        tracemalloc.start()
        for start in range(0, n, 16384):
            chunk = [f"id-{k}".encode() for k in range(start, min(n, start + 16384))]
            counts.add(chunk, len(chunk), 0)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(counts.counts) <= 2 * statistics.capacity(0)
        return top

    assert peak(1_200_000) <= 1.2 * peak(300_000)


def test_values_are_ranked_in_byte_order_whatever_their_lengths_and_shared_prefixes():
    """Values of any length, sharing long prefixes, or differing only by trailing NUL bytes."""
    parts = [b"", b"a", b"\x00", b"b", b"\xff", "é".encode(), b"abcdefghijklmnop", b"abcdefghijklmnop\x00", b"q" * 17]
    rng = random.Random(1)
    for _ in range(200):
        values = [rng.choice(parts) + rng.choice(parts) for _ in range(rng.randint(0, 40))]
        counts = counts_of(values, [])
        assert counts.ranked() == sorted(Counter(values).items(), key=lambda vc: (-vc[1], vc[0])), values


def test_pruning_keeps_the_top_capacity_values_by_count_then_bytes():
    rng = random.Random(2)
    values = [f"v{rng.randint(0, 5000)}".encode() for _ in range(20_000)]  # ~5,000 values, most counts tied
    counts = statistics.ValueCounts(CAPACITY)
    counts.add(values, len(values), 0)
    top = sorted(Counter(values).items(), key=lambda vc: (-vc[1], vc[0]))[:CAPACITY]
    assert counts.pruned and counts.counts == dict(top)
