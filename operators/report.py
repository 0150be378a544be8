"""What each run of a pipeline produced, read from its run directories: window, training, gate, export."""

from __future__ import annotations

import os
from typing import Any, Iterable

from trainer.artifacts import read_json


def _maybe(path: str) -> Any:
    return read_json(path) if os.path.exists(path) else None


def list_runs(dag_id: str, artifact_roots: Iterable[str]) -> list[dict[str, Any]]:
    """One summary per run directory of ``dag_id`` under any of ``artifact_roots``, newest data interval first."""
    runs_dirs = [os.path.join(root, dag_id, "runs") for root in artifact_roots]
    runs = []
    for run_dir in (os.path.join(d, key) for d in runs_dirs if os.path.isdir(d) for key in sorted(os.listdir(d))):
        run = _maybe(os.path.join(run_dir, "run.json")) or {"run_id": os.path.basename(run_dir)}
        train = _maybe(os.path.join(run_dir, "train", "result.json")) or {}
        blessing = _maybe(os.path.join(run_dir, "eval", "blessing.json")) or {}
        export = _maybe(os.path.join(run_dir, "export", "result.json")) or {}
        runs.append({
            **run,
            "run_dir": run_dir,
            "final_step": train.get("final_step"),
            "train_examples_per_sec": train.get("examples_per_sec"),
            "metrics": blessing.get("metrics"),
            "blessed": blessing.get("blessed"),
            "gate": blessing.get("gate"),
            "failures": blessing.get("failures"),
            "export_version": export.get("version"),
        })
    return sorted(runs, key=lambda r: (r.get("data_interval_end") or "", r["run_id"]), reverse=True)


def format_runs(runs: list[dict[str, Any]]) -> str:
    """A side-by-side table: window, overrides, metrics, gate decision, exported version."""
    header = ("run", "window", "overrides", "accuracy", "loss", "gate", "version")
    rows = [header]
    for r in runs:
        metrics = r["metrics"] or {}
        gate = {True: "blessed", False: "NOT blessed", None: "-"}[r["blessed"]]
        window = f"{(r.get('data_interval_start') or '?')[:16]} → {(r.get('data_interval_end') or '?')[:16]}"
        overrides = ", ".join(f"{k}={v}" for k, v in (r.get("overrides") or {}).items()) or "-"
        rows.append((r["run_id"], window, overrides, *(f"{metrics[k]:.4f}" if k in metrics else "-"
                                                       for k in ("accuracy", "loss")),
                     gate, str(r["export_version"] or "-")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
