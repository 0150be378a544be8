"""What prepare_data records of each feature, in the pass that writes the shards: per element, the count, mean
and standard deviation (from exactly merged moments), min, max, the share of zeros, and a histogram on fixed
bins. Merged over the input's pieces in input order, they are the same bytes whatever the number of writers.

The bins are the same for every run, so that any two runs' histograms compare bin by bin: zero has a bin of
its own, and every other value falls in a half-octave of its magnitude, on its sign's side (edges ±2^e and
±(1 + 53/128)·2^e ≈ ±√2·2^e, from 2^-40 to 2^40, the outermost bins open-ended). A value scaled by 10 moves
about 6.6 bins; half-octaves are fine enough for the counts and measurements features usually hold. Values are
binned as the float32 the shards hold, by a table of the float's top 16 bits (sign, exponent, 7 bits of
mantissa: the edges are exact there); |x| below 2^-133 counts as zero."""

from __future__ import annotations

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
    return BIN_TABLE[np.asarray(values, dtype=np.float32).view(np.uint32) >> 16]


def of_chunk(values: np.ndarray) -> dict[str, np.ndarray]:
    """The statistics of a chunk's values (rows × elements)."""
    flat = (bins(values) + NUM_BINS * np.arange(values.shape[1])).ravel()
    values = values.astype(np.float64)
    rows, size = values.shape
    mean = values.mean(axis=0) if rows else np.zeros(size)
    return {
        "count": np.int64(rows),
        "mean": mean,
        "m2": ((values - mean) ** 2).sum(axis=0),
        "min": values.min(axis=0) if rows else np.full(size, np.inf),
        "max": values.max(axis=0) if rows else np.full(size, -np.inf),
        "histogram": np.bincount(flat, minlength=NUM_BINS * size).reshape(size, NUM_BINS),
    }


def merged(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two parts' statistics as one: exact for counts, bounds and histograms; the moments as Chan et al. merge
    them (so the order of merging is fixed: input order)."""
    n = a["count"] + b["count"]
    if not b["count"]:
        return a
    if not a["count"]:
        return b
    delta = b["mean"] - a["mean"]
    return {
        "count": n,
        "mean": a["mean"] + delta * (b["count"] / n),
        "m2": a["m2"] + b["m2"] + delta**2 * (a["count"] * b["count"] / n),
        "min": np.minimum(a["min"], b["min"]),
        "max": np.maximum(a["max"], b["max"]),
        "histogram": a["histogram"] + b["histogram"],
    }


def summary(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """As JSON values, per element: count, mean, std, min, max, zero share, and the histogram's non-empty bins
    ({bin: count})."""
    n = int(stats["count"])
    return {
        "count": n,
        "mean": stats["mean"].tolist(),
        "std": np.sqrt(stats["m2"] / max(n, 1)).tolist(),
        "min": stats["min"].tolist(),
        "max": stats["max"].tolist(),
        "zero_share": (stats["histogram"][:, ZERO_BIN] / max(n, 1)).tolist(),
        "histogram": [{str(b): int(c) for b, c in enumerate(row) if c} for row in stats["histogram"]],
    }


def to_json(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """Exactly, as JSON values (a pod hands its parts' statistics to pod 0 this way)."""
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def from_json(stats: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.int64 if k in ("count", "histogram") else np.float64) for k, v in stats.items()}
