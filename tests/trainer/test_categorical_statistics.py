"""A categorical feature's value counts (trainer/statistics.py ValueCounts): exact while they fit, bounded in memory
past that, the same whatever the cut into chunks and pieces, a distinct count within a few percent of the truth
once it is estimated; and the vocabulary rules."""

from __future__ import annotations

import io
import random
import tracemalloc
from collections import Counter

import numpy as np
import pytest

from tfdist.trainer import statistics

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
