"""prepare_data without its data statistics (``make bench``'s yardstick of what computing them costs): the
stage itself, with the statistics module replaced by one that computes nothing. One writer process only (a
writer pool's processes would import the real module)."""

from __future__ import annotations

import types

from tfdist.trainer import prepare, statistics
from tfdist.trainer.runtime import run_stage

NOTHING: dict = {}

prepare.statistics = types.SimpleNamespace(
    of_chunk=lambda values: NOTHING, merged=lambda a, b: a, summary=lambda stats: {}, SCHEME=statistics.SCHEME
)

if __name__ == "__main__":
    run_stage(prepare.main)
