"""Where a run's artifacts live (the run key, the run's file layout) and the run's record."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

from tfdist.contract.records import write_record
from tfdist.contract.train_records import RunRecord
from tfdist.infra.jsonfiles import read_json_if_exists, write_json_atomic

RUN_KEY_READABLE = 64
"""At most this many characters of a run id stay readable in its run key."""


def run_key(run_id: str) -> str:
    """A run's directory name, one-to-one with its exact run id, whoever chose it (a trigger may): up to
    RUN_KEY_READABLE characters of it to read (letters, digits, '_' and '-'; others become '_'), then a hash of
    all of it. Never empty, '.' or '..', never more than one path component."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", run_id)[:RUN_KEY_READABLE] or "run"
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}"


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc: NUL, newlines, ESC of a terminal's escape codes): no pipeline or run
id holds one; text from users or records shown on a terminal has them escaped (``printable``)."""


def printable(text: str) -> str:
    r"""``text`` with its control characters as Python escapes (``\x1b``, ``\n``): safe on a terminal."""
    return CONTROL_CHARACTERS.sub(lambda found: repr(found[0])[1:-1], text)


PIPELINE_ID = re.compile(r"[\w.-]+")
"""What Airflow takes as a DAG id (``KEY_REGEX``), and so as a pipeline id ('<dag id>.<task group id>' too)."""


class UnsafePipelineId(ValueError):
    """A pipeline id that is no one directory below the artifact root ('..', '/', control characters)."""


def runs_root(artifact_root: str, pipeline_id: str) -> str:
    """Where a pipeline's run directories live under its artifact root (its id: the DAG's id, or
    '<dag id>.<task group id>' for a pipeline embedded in a DAG); UnsafePipelineId for an id that would lead
    elsewhere."""
    if not PIPELINE_ID.fullmatch(pipeline_id) or pipeline_id in (".", ".."):
        raise UnsafePipelineId(
            f"pipeline_id: {pipeline_id!r} is no pipeline id: give the DAG's id, or '<dag id>.<task group "
            "id>' for an embedded pipeline (letters, digits, '_', '-' and '.'; not '.' or '..')"
        )
    return os.path.join(artifact_root, pipeline_id, "runs")


def run_path(artifact_root: str, pipeline_id: str, run_id: str) -> str:
    """One run's directory: keyed by its pipeline and run, never by wall-clock time."""
    return os.path.join(runs_root(artifact_root, pipeline_id), run_key(run_id))


MANIFEST, BLESSING, APPROVAL = "manifest.json", "blessing.json", "approval.json"
"""In the data directory, what prepare_data produced (shards, counts, hashes, statistics); in the eval
directory, the gate's decision; in the run directory, the human approval's (``export.approval``)."""
EVAL_METRICS = "metrics.json"
"""In the eval directory: the chosen checkpoint's metrics, and per class."""


@dataclass(frozen=True)
class RunLayout:
    """Where one run's artifacts live: ``<artifact root>/<pipeline>/runs/<run key>/``."""

    run_dir: str

    spec_file = property(lambda self: os.path.join(self.run_dir, "spec.json"))
    run_file = property(lambda self: os.path.join(self.run_dir, "run.json"))
    data_dir = property(lambda self: os.path.join(self.run_dir, "data"))
    checkpoint_dir = property(lambda self: os.path.join(self.run_dir, "checkpoints"))
    eval_dir = property(lambda self: os.path.join(self.run_dir, "eval"))
    heartbeat_dir = property(lambda self: os.path.join(self.run_dir, "train", "heartbeats"))
    progress_file = property(lambda self: os.path.join(self.run_dir, "train", "progress.json"))
    curve_file = property(lambda self: os.path.join(self.run_dir, "train", "curve.jsonl"))
    warm_start_file = property(lambda self: os.path.join(self.run_dir, "train", "warm_start.json"))
    """Where the run's training started from (the parent version, or why it started cold) and what was restored."""
    manifest_file = property(lambda self: os.path.join(self.data_dir, MANIFEST))
    blessing_file = property(lambda self: os.path.join(self.eval_dir, BLESSING))
    approval_file = property(lambda self: os.path.join(self.run_dir, APPROVAL))
    data_validation_dir = property(lambda self: os.path.join(self.run_dir, "validate_data"))

    def tensorboard(self, part: str) -> str:
        """TensorBoard event files of ``part``: 'train' (the chief's) or 'eval'; ``tensorboard --logdir <artifact
        root>/<pipeline>/runs`` shows every run side by side (as ``<run key>/tensorboard/<part>``)."""
        return os.path.join(self.run_dir, "tensorboard", part)

    def result(self, task_id: str) -> str:
        """The result record of the stage ``task_id``."""
        return os.path.join(self.run_dir, task_id, "result.json")


class RunMismatch(ValueError):
    """The run directory was produced from another spec."""


def record_run(layout: RunLayout, spec: dict[str, Any], run: RunRecord) -> None:
    """Write the run's record (identity, window, overrides) and effective spec once; refuse a run directory
    that was made from another spec. Safe to call from every process of a stage at once."""
    recorded = read_json_if_exists(layout.spec_file)
    if recorded is not None:
        if recorded != spec:
            raise RunMismatch(
                f"{layout.run_dir} was produced from a different spec (see {layout.spec_file}); "
                "use a new run, or move that directory away to redo this run"
            )
        return
    write_record(layout.run_file, run)
    write_json_atomic(layout.spec_file, spec)
