"""What prepare_data records of each feature, in the pass that writes the shards. Numeric features, per element:
the count of values present and of missing ones (NaN), the mean and standard deviation of those present (from
exactly merged moments), min, max, the share of zeros, and a histogram on fixed bins. Categorical features: their
value counts in bounded memory (ValueCounts), whence the top values, the distinct count and the vocabulary.
Merged over the input's pieces in input order, they are the same bytes whatever the number of writers.

The bins are the same for every run, so that any two runs' histograms compare bin by bin: zero has a bin of
its own, and every other value falls in a half-octave of its magnitude, on its sign's side (edges ±2^e and
±(1 + 53/128)·2^e ≈ ±√2·2^e, from 2^-40 to 2^40, the outermost bins open-ended). A value scaled by 10 moves
about 6.6 bins; half-octaves are fine enough for the counts and measurements features usually hold. Values are
binned as the float32 the shards hold, by a table of the float's top 16 bits (sign, exponent, 7 bits of
mantissa: the edges are exact there); |x| below 2^-133 counts as zero."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

MAGNITUDES = 160
"""Half-octave bins per sign: 2^-40 to 2^40."""
LOWEST_EXPONENT = -40
ZERO_BIN = MAGNITUDES
NUM_BINS = 2 * MAGNITUDES + 1
"""Negative values (largest magnitude first), zero, positive values."""
UPPER_HALF = 0x35
"""The top 7 mantissa bits (of 128) from which a value is in its octave's upper half: 1 + 53/128 ≈ √2."""
SCHEME = {"zero": ZERO_BIN, "edges": "±2^e and ±(1 + 53/128)·2^e, 2^-40 to 2^40, of float32", "bins": NUM_BINS}
"""Recorded with the histograms: statistics binned otherwise are not compared."""


def _bin_table() -> np.ndarray:
    """The bin of every float32 by its top 16 bits."""
    top = np.arange(1 << 16, dtype=np.int64)
    half = 2 * (((top >> 7) & 0xFF) - 127) + ((top & 0x7F) >= UPPER_HALF)  # value in [edge_half, edge_half+1)
    magnitude = np.clip(half - 2 * LOWEST_EXPONENT, 0, MAGNITUDES - 1) + 1
    table = np.where(top >> 15, ZERO_BIN - magnitude, ZERO_BIN + magnitude)
    table[(top & 0x7FFF) == 0] = ZERO_BIN
    return table.astype(np.int16)


BIN_TABLE = _bin_table()


def bins(values: np.ndarray) -> np.ndarray:
    """Each value's bin (see the module's docstring)."""
    return BIN_TABLE.take(np.asarray(values, dtype=np.float32).view(np.uint32) >> 16)


def moments(values: np.ndarray) -> dict[str, np.ndarray]:
    """Per element (rows × elements): the count of values present, their mean and sum of squared deviations, in
    float64; a missing value (NaN) is left out."""
    x = values.astype(np.float64)
    missing = np.isnan(x)
    any_missing = missing.any()
    count = len(x) - missing.sum(axis=0) if any_missing else np.full(x.shape[1], len(x), np.int64)
    if any_missing:
        x[missing] = 0.0
    mean = x.sum(axis=0) / np.maximum(count, 1)
    x -= mean
    if any_missing:
        x[missing] = 0.0
    return {"count": count, "mean": mean, "m2": np.einsum("ij,ij->j", x, x)}


def of_chunk(values: np.ndarray, stats: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The statistics of a chunk's values (rows × elements; NaN: missing); ``stats``: their moments, if known."""
    stats = stats or moments(values)
    rows, size = values.shape
    flat = bins(values) + NUM_BINS * np.arange(size)
    flat[np.isnan(values)] = NUM_BINS * size  # a bin past the last, dropped
    return {
        **stats,
        "missing": rows - stats["count"],
        "min": np.fmin.reduce(values, axis=0, initial=np.inf).astype(np.float64),
        "max": np.fmax.reduce(values, axis=0, initial=-np.inf).astype(np.float64),
        "histogram": np.bincount(flat.ravel(), minlength=NUM_BINS * size + 1)[:-1].reshape(size, NUM_BINS),
    }


MERGES = {"missing": np.add, "min": np.minimum, "max": np.maximum, "histogram": np.add}


def merged(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two parts' statistics (or moments) as one: exact for counts, bounds and histograms; the moments as Chan et
    al. merge them, per element (so the order of merging is fixed: input order)."""
    n = a["count"] + b["count"]
    some = n > 0
    delta = b["mean"] - a["mean"]
    out = {
        "count": n,
        "mean": a["mean"] + delta * np.divide(b["count"], n, out=np.zeros(n.shape), where=some),
        "m2": a["m2"] + b["m2"] + delta**2 * np.divide(a["count"] * b["count"], n, out=np.zeros(n.shape), where=some),
    }
    return out | {key: merge(a[key], b[key]) for key, merge in MERGES.items() if key in a}


def summary(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """As JSON values, per element: count of values present, missing rows, mean, std, min, max (null without a
    value), zero share (of the values present), and the histogram's non-empty bins ({bin: count})."""
    count = stats["count"]
    present = np.maximum(count, 1)
    return {
        "count": count.tolist(),
        "missing": stats["missing"].tolist(),
        "mean": stats["mean"].tolist(),
        "std": np.sqrt(stats["m2"] / present).tolist(),
        "min": [v if c else None for v, c in zip(stats["min"].tolist(), count, strict=True)],
        "max": [v if c else None for v, c in zip(stats["max"].tolist(), count, strict=True)],
        "zero_share": (stats["histogram"][:, ZERO_BIN] / present).tolist(),
        "histogram": [{str(b): int(c) for b, c in enumerate(row) if c} for row in stats["histogram"]],
    }


INTEGERS = ("count", "missing", "histogram")


def to_json(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """Exactly, as JSON values (a pod hands its parts' statistics to pod 0 this way)."""
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def from_json(stats: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.int64 if k in INTEGERS else np.float64) for k, v in stats.items()}


# Categorical features ---------------------------------------------------------------------------------------

TOP_VALUES = 1000
"""Most frequent values recorded in the statistics."""
MIN_CAPACITY = 1 << 16
SKETCH_BITS = 14
"""HyperLogLog registers: 2^14 (a standard error of 1.04/√2^14 ≈ 0.8%)."""
HASH_BITS = 64 - SKETCH_BITS


def capacity(max_tokens: int) -> int:
    """Values a counter keeps when it prunes (it prunes on reaching twice as many): enough for a vocabulary of
    ``max_tokens`` (0: none) with room to spare."""
    return max(2 * max_tokens, MIN_CAPACITY)


def digests(values: Iterable[bytes]) -> dict[bytes, bytes]:
    """Each distinct value's 64-bit BLAKE2b digest: its hash in the HyperLogLog sketch, and in the row hashes that
    split the rows (tfdist.trainer.data)."""
    return {v: hashlib.blake2b(v, digest_size=8).digest() for v in dict.fromkeys(values)}


class ValueCounts:
    """A categorical feature's value counts over some rows, in bounded memory: on reaching twice its capacity it
    keeps the top ``capacity`` values by (count desc, value bytes asc), so the counts are exact while nothing was
    pruned; the distinct count then comes from a HyperLogLog sketch (Ertl's improved estimator) of every value
    seen. Deterministic: the same adds and merges in the same order give the same counts."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts: Counter[bytes] = Counter()
        self.rows = self.values = self.missing = 0
        self.registers = np.zeros(1 << SKETCH_BITS, np.uint8)
        self.pruned = False

    def add(self, values: list[bytes], rows: int, missing: int, hashed: dict[bytes, bytes] | None = None) -> None:
        """A chunk's values (a list feature's: every list's items) of ``rows`` rows, ``missing`` of them without a
        value; ``hashed``: their digests, if known."""
        chunk = Counter(values)
        _sketch(self.registers, (hashed or digests(chunk)).values())
        _add_counts(self.counts, chunk)
        self.rows, self.values, self.missing = self.rows + rows, self.values + len(values), self.missing + missing
        self._bound()

    def merge(self, other: ValueCounts) -> None:
        """Add the counts of the rows after these."""
        _add_counts(self.counts, Counter(other.counts))
        self.rows, self.values, self.missing = (
            self.rows + other.rows,
            self.values + other.values,
            self.missing + other.missing,
        )
        np.maximum(self.registers, other.registers, out=self.registers)
        self.pruned |= other.pruned
        self._bound()

    def _bound(self) -> None:
        """Past twice the capacity, keep the top ``capacity`` values: every value counted more often than the
        capacity-th largest count, then of those counted as often the first in byte order."""
        if len(self.counts) <= 2 * self.capacity:
            return
        keys = np.array(list(self.counts), dtype=object)
        counts = np.fromiter(self.counts.values(), np.int64, len(keys))
        cut = np.partition(counts, len(keys) - self.capacity)[len(keys) - self.capacity]
        kept = keys[counts > cut].tolist()
        kept += sorted(keys[counts == cut].tolist())[: self.capacity - len(kept)]
        self.counts, self.pruned = Counter({k: self.counts[k] for k in kept}), True

    def ranked(self) -> list[tuple[bytes, int]]:
        """(value, count), most frequent first, ties in byte order."""
        keys = sorted(self.counts)
        counts = np.fromiter(map(self.counts.__getitem__, keys), np.int64, len(keys))
        order = np.argsort(-counts, kind="stable")
        return list(zip([keys[i] for i in order.tolist()], counts[order].tolist(), strict=True))

    def distinct(self) -> tuple[int, bool]:
        """(the count of distinct values, whether it is exact)."""
        return (round(estimate(self.registers)), False) if self.pruned else (len(self.counts), True)

    def summary(self, ranked: list[tuple[bytes, int]]) -> dict[str, Any]:
        """As the manifest's statistics record it (``ranked``: this counter's)."""
        distinct, exact = self.distinct()
        return {
            "rows": self.rows,
            "values": self.values,
            "missing": self.missing,
            "distinct": distinct,
            "distinct_exact": exact,
            "top": [[value.decode(), count] for value, count in ranked[:TOP_VALUES]],
        }

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Exactly, as arrays (how a writer hands a piece's counts on, in an .npz file)."""
        keys = list(self.counts)
        return {
            "sizes": np.array([self.capacity, self.rows, self.values, self.missing, self.pruned], np.int64),
            "values": np.frombuffer(b"".join(keys), np.uint8),
            "lengths": np.fromiter(map(len, keys), np.int64, len(keys)),
            "counts": np.fromiter(self.counts.values(), np.int64, len(keys)),
            "registers": self.registers,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> ValueCounts:
        capacity, rows, values, missing, pruned = arrays["sizes"].tolist()
        counts = cls(capacity)
        counts.rows, counts.values, counts.missing, counts.pruned = rows, values, missing, bool(pruned)
        blob, ends = arrays["values"].tobytes(), np.cumsum(arrays["lengths"]).tolist()
        keys = [blob[a:b] for a, b in itertools.pairwise([0, *ends])]
        counts.counts = Counter(dict(zip(keys, arrays["counts"].tolist(), strict=True)))
        counts.registers = arrays["registers"].copy()
        return counts


def _add_counts(counts: Counter[bytes], more: Counter[bytes]) -> None:
    """counts += more, with ``more`` changed on the way: Counter.update loops in Python over every key, this only
    over the keys both have (an id column's are mostly new)."""
    for key in more.keys() & counts.keys():
        more[key] += counts[key]
    dict.update(counts, more)


def vocabulary(ranked: list[tuple[bytes, int]], min_count: int, max_tokens: int) -> list[str]:
    """The tokens: values seen at least ``min_count`` times, most frequent first (ties in byte order), at most
    ``max_tokens``."""
    return [value.decode() for value, count in ranked[:max_tokens] if count >= min_count]


def _sketch(registers: np.ndarray, hashed: Iterable[bytes]) -> np.ndarray:
    """Add values to the HyperLogLog registers (in place), by their 64-bit digests: its top bits pick a register,
    which keeps the largest rank (leading zeros + 1) of the rest."""
    hashes = np.frombuffer(b"".join(hashed), "<u8")
    rest = (hashes & np.uint64((1 << HASH_BITS) - 1)).astype(np.float64)  # exact: below 2^53
    rank = HASH_BITS + 1 - np.frexp(rest)[1]  # frexp's exponent is the bit length (0 for 0: rank HASH_BITS + 1)
    np.maximum.at(registers, (hashes >> np.uint64(HASH_BITS)).astype(np.intp), rank.astype(np.uint8))
    return registers


def estimate(registers: np.ndarray) -> float:
    """The distinct values a HyperLogLog sketch has seen, by Ertl's improved raw estimator (arXiv:1702.01284,
    algorithm 6: no bias tables, accurate from 0 up)."""
    m, q = len(registers), HASH_BITS
    c = np.bincount(registers, minlength=q + 2).tolist()
    z = m * _tau(1 - c[q + 1] / m)
    for k in range(q, 0, -1):
        z = 0.5 * (z + c[k])
    z += m * _sigma(c[0] / m)
    return m * m / (2 * math.log(2)) / z


def _sigma(x: float) -> float:
    if x == 1:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        z, before = z + x * y, z
        y += y
        if z == before:
            return z


def _tau(x: float) -> float:
    if x in (0, 1):
        return 0.0
    y, z = 1.0, 1 - x
    while True:
        x = math.sqrt(x)
        y *= 0.5
        z, before = z - (1 - x) ** 2 * y, z
        if z == before:
            return z / 3
