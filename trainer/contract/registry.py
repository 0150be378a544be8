"""The published versions of a model: ``<model dir>/<integer version>/`` each with ``metadata.json``."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from typing import Any

from tfdist.trainer.contract.records import read_json

METADATA = "metadata.json"
"""In each version's directory: what was published, from which run, data and checkpoint, and why."""
DATA_STATISTICS = "data_statistics.json"
"""In each version's directory: the statistics of the data it was trained on (the data manifest's), which the
data gate of a later run compares its own with."""


def metadata_file(version_dir: str) -> str:
    return os.path.join(version_dir, METADATA)


def versions(model_dir: str) -> list[dict[str, Any]]:
    """Every published version's metadata (plus its ``path``), oldest first."""
    found = []
    for name in os.listdir(model_dir) if os.path.isdir(model_dir) else []:
        metadata_path = metadata_file(os.path.join(model_dir, name))
        if name.isdigit() and os.path.exists(metadata_path):
            found.append({**read_json(metadata_path), "path": os.path.join(model_dir, name)})
    return sorted(found, key=lambda m: m["version"])


def baseline_for(model_dir: str, interval_end: str, run_id: str) -> dict[str, Any] | None:
    """The newest version published for a data interval ending no later than ``interval_end`` by another
    run: what was live for this run's window (a backfill of last Tuesday compares with last Tuesday's)."""
    end = dt.datetime.fromisoformat(interval_end)
    earlier = [m for m in versions(model_dir)
               if m["run_id"] != run_id and dt.datetime.fromisoformat(m["data_interval_end"]) <= end]
    return earlier[-1] if earlier else None


def prune(model_dir: str, keep: int, protect: set[int]) -> list[int]:
    """Delete all but the newest ``keep`` versions, never one in ``protect``; return the deleted ones."""
    published = [m["version"] for m in versions(model_dir)]
    doomed = [v for v in published[:-keep] if v not in protect]
    for version in doomed:
        hidden = os.path.join(model_dir, f".deleting-{version}")
        os.rename(os.path.join(model_dir, str(version)), hidden)  # invisible at once, then removed
        shutil.rmtree(hidden)
    return doomed
