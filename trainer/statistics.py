"""What prepare_data records of each feature, in the pass that writes the shards: per element, the count, mean
and standard deviation (from exactly merged moments), min, max, the share of zeros, and a histogram on fixed
bins. Merged over the input's pieces in input order, they are the same bytes whatever the number of writers.

The bins are the same for every run, so that any two runs' histograms compare bin by bin: zero has a bin of
its own, and every other value falls in a half-octave of its magnitude, on its sign's side (edges ±2^(k/2),
from 2^-40 to 2^40, the outermost bins open-ended). A value scaled by 10 moves about 6.6 bins; half-octaves
are fine enough for the counts and measurements features usually hold, and a bin is found from the float's
own exponent, with no logarithm."""

from __future__ import annotations

from typing import Any

import numpy as np

MAGNITUDES = 160
"""Half-octave bins per sign: 2^-40 to 2^40."""
LOWEST_EXPONENT = -40
SQRT_HALF = np.sqrt(0.5)
ZERO_BIN = MAGNITUDES
NUM_BINS = 2 * MAGNITUDES + 1
"""Negative values (largest magnitude first), zero, positive values."""
SCHEME = {"zero": ZERO_BIN, "edges": "±2^(k/2), k = -80 .. 80", "bins": NUM_BINS}
"""Recorded with the histograms: statistics binned otherwise are not compared."""


def bins(values: np.ndarray) -> np.ndarray:
    """Each value's bin (see the module's docstring)."""
    mantissa, exponent = np.frexp(values)  # x = m·2^e, |m| in [0.5, 1); 0 → (0, 0)
    magnitude = 2 * exponent + (np.abs(mantissa) >= SQRT_HALF) - (2 * LOWEST_EXPONENT + 2)
    np.clip(magnitude, 0, MAGNITUDES - 1, out=magnitude)
    magnitude += 1
    found = np.where(mantissa < 0, -magnitude, magnitude)
    found[mantissa == 0] = 0
    return found + ZERO_BIN


def of_chunk(values: np.ndarray) -> dict[str, np.ndarray]:
    """The statistics of a chunk's values (rows × elements)."""
    values = values.astype(np.float64)
    rows, size = values.shape
    mean = values.mean(axis=0) if rows else np.zeros(size)
    flat = (bins(values) + NUM_BINS * np.arange(size)).ravel()
    return {"count": np.int64(rows), "mean": mean, "m2": ((values - mean) ** 2).sum(axis=0),
            "min": values.min(axis=0) if rows else np.full(size, np.inf),
            "max": values.max(axis=0) if rows else np.full(size, -np.inf),
            "histogram": np.bincount(flat, minlength=NUM_BINS * size).reshape(size, NUM_BINS)}


def merged(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two parts' statistics as one: exact for counts, bounds and histograms; the moments as Chan et al. merge
    them (so the order of merging is fixed: input order)."""
    n = a["count"] + b["count"]
    if not b["count"]:
        return a
    if not a["count"]:
        return b
    delta = b["mean"] - a["mean"]
    return {"count": n, "mean": a["mean"] + delta * (b["count"] / n),
            "m2": a["m2"] + b["m2"] + delta ** 2 * (a["count"] * b["count"] / n),
            "min": np.minimum(a["min"], b["min"]), "max": np.maximum(a["max"], b["max"]),
            "histogram": a["histogram"] + b["histogram"]}


def summary(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """As JSON values, per element: count, mean, std, min, max, zero share, and the histogram's non-empty bins
    ({bin: count})."""
    n = int(stats["count"])
    return {"count": n, "mean": stats["mean"].tolist(), "std": np.sqrt(stats["m2"] / max(n, 1)).tolist(),
            "min": stats["min"].tolist(), "max": stats["max"].tolist(),
            "zero_share": (stats["histogram"][:, ZERO_BIN] / max(n, 1)).tolist(),
            "histogram": [{str(b): int(c) for b, c in enumerate(row) if c} for row in stats["histogram"]]}


def to_json(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """Exactly, as JSON values (a pod hands its parts' statistics to pod 0 this way)."""
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def from_json(stats: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.int64 if k in ("count", "histogram") else np.float64)
            for k, v in stats.items()}
