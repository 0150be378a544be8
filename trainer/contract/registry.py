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
WARM_START_CHECKPOINT = os.path.join("checkpoint", "ckpt")
"""In each version's directory: the training checkpoint it was exported from (model and optimizer), which a later
run's warm start restores: it never depends on another run's working directory."""


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


def warm_start_checkpoint(version_dir: str) -> str:
    """The checkpoint prefix of a version's training checkpoint (``tf.train.Checkpoint.read`` takes it)."""
    return os.path.join(version_dir, WARM_START_CHECKPOINT)


def lineage(model_dir: str, version: int) -> list[dict[str, Any]]:
    """``version``'s metadata, then its parent's (the version it was warm-started from), and so on back to a cold
    start or to a parent no longer kept (its number is in the last one's ``parent``)."""
    by_version = {m["version"]: m for m in versions(model_dir)}
    chain: list[dict[str, Any]] = []
    while version in by_version and len(chain) < len(by_version):
        chain.append(by_version[version])
        version = (by_version[version].get("parent") or {}).get("version")
    return chain


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
