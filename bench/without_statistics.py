"""prepare_data without its data statistics and vocabularies (``make bench``'s yardstick of what computing them
costs): the stage itself, with the statistics module replaced by one that describes nothing and counts no value
(the train rows' moments, which normalize the numbers, are still computed; each vocabulary is one token). One
writer process only (a writer pool's processes would import the real module)."""

from __future__ import annotations

import types

from tfdist.trainer import prepare, statistics
from tfdist.trainer.runtime import run_stage


class NoCounts(statistics.ValueCounts):
    def add(self, values: list[bytes], rows: int, missing: int, hashed: dict[bytes, bytes] | None = None) -> None:
        pass

    def merge(self, other: statistics.ValueCounts) -> None:
        pass


prepare.statistics = types.SimpleNamespace(
    moments=statistics.moments,
    merged=statistics.merged,
    of_chunk=lambda values, stats: stats,
    summary=lambda stats: {key: [] for key in ("count", "mean", "std", "min", "max", "zero_share", "histogram")},
    capacity=statistics.capacity,
    ValueCounts=NoCounts,
    vocabulary=lambda ranked, min_count, max_tokens: ["token"],
    SCHEME=statistics.SCHEME,
)

if __name__ == "__main__":
    run_stage(prepare.main)
