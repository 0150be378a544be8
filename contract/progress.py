"""How the train stage shows it is alive and how far it got: heartbeats, the progress record, checkpoints."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import model_validator

from tfdist.contract.records import Metrics, Record, read_record_if_exists
from tfdist.contract.train_records import CurvePoint, WarmStartRecord, WarmStartSummary
from tfdist.infra import storage

CHECKPOINT_STATE = "checkpoint"
"""In a checkpoint directory: TensorFlow's state file, naming the latest checkpoint and the ones kept (relative to
the directory: CheckpointManager writes relative paths)."""


class Beat(NamedTuple):
    time: float
    """When the member last finished a step call (the file's mtime)."""
    pid: int
    step: int
    """The global step it had reached."""


def beat(heartbeat_dir: str, member: str, step: int) -> None:
    """Mark ``member`` (a training process: ``worker-1``, ``rank-3``) as progressing, at global ``step``."""
    path = os.path.join(heartbeat_dir, member)
    with storage.naming(path + ".tmp"), open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {step}")
    os.replace(path + ".tmp", path)


def last_beats(heartbeat_dir: str) -> dict[str, Beat]:
    """Each training process's last heartbeat, by member name."""
    beats = {}
    for entry in os.scandir(heartbeat_dir) if os.path.isdir(heartbeat_dir) else ():
        if not entry.name.endswith(".tmp"):
            try:
                with open(entry.path) as f:
                    pid, step = f.read().split()
                beats[entry.name] = Beat(entry.stat().st_mtime, int(pid), int(step))
            except (FileNotFoundError, ValueError):
                continue
    return beats


def stalled(beats: dict[str, Beat], since: float, timeout: float) -> dict[str, Beat] | None:
    """Of ``beats`` (``last_beats``'), those since ``since`` when none of them is newer than ``timeout`` seconds,
    else None (also before the first beat: starting a cluster is bounded by its own timeouts)."""
    beats = {m: b for m, b in beats.items() if b.time >= since}
    if not beats or time.time() - max(b.time for b in beats.values()) < timeout:
        return None
    return beats


def longest_silent(beats: dict[str, Beat]) -> tuple[str, str]:
    """(the member silent longest, how long each has been silent): in a hung collective every member waits for
    the one that stopped stepping first."""
    now = time.time()
    return min(beats, key=lambda m: beats[m].time), "the others wait for it: " + ", ".join(
        f"{m} last stepped {now - b.time:.0f} s ago" for m, b in sorted(beats.items())
    )


class TrainProgress(Record):
    """Where the train stage is, written by its chief (``progress.json``) at most every few seconds while it
    trains and once at the end; the training-runs page shows it live."""

    step: int
    total_steps: int
    epoch: float
    """Epochs done, fractional."""
    epochs: int
    loss: float
    """The current epoch's mean training loss so far."""
    metrics: Metrics
    """The current epoch's train metrics so far, by name (the task's: multiclass accuracy; binary accuracy and auc;
    regression rmse); None where there is no value yet (an AUC without both classes)."""
    examples_per_sec: float | None
    """Since the first step call (tracing excluded); None until a second call ended."""
    workers: int
    global_batch_size: int
    elapsed_seconds: float
    updated_at: float
    """Unix time of the write."""

    @model_validator(mode="before")
    @classmethod
    def _accuracy_alone(cls, data: Any) -> Any:
        """A record from before the train metrics has ``accuracy`` alone."""
        if isinstance(data, dict) and "metrics" not in data and "accuracy" in data:
            data = {k: v for k, v in data.items() if k != "accuracy"} | {"metrics": {"accuracy": data["accuracy"]}}
        return data

    @property
    def seconds_left(self) -> float | None:
        """At the current rate (None until there is one)."""
        if not self.examples_per_sec:
            return None
        return round((self.total_steps - self.step) * self.global_batch_size / self.examples_per_sec, 1)


def curve_line(point: CurvePoint) -> bytes:
    """One point of the training curve (``curve.jsonl``) as its line: the values the chief writes to TensorBoard at
    the first step call at or past every ``training.summary_every_steps`` steps and at the last."""
    return (json.dumps(point.payload()) + "\n").encode()


@dataclass(frozen=True)
class CurveWrite:
    """The write of the training curve at ``path``, whole (an object has no append): the lines it held before this
    process's first write (a resumed training's earlier points), then ``lines``, every one this process made. A
    later write of the same process covers an earlier one: the uploads skip one a later follows."""

    path: str
    lines: bytes

    def __call__(self) -> None:
        storage.write_bytes(self.path, curve_before(self.path) + self.lines)


@functools.cache
def curve_before(path: str) -> bytes:
    """The whole lines of the curve at ``path`` as this process first found it (read once: its later writes hold
    them)."""
    try:
        earlier = storage.read_bytes(path)
    except FileNotFoundError:
        return b""
    return earlier[: earlier.rfind(b"\n") + 1]  # a line cut short by a crash dropped


def read_curve(path: str) -> list[CurvePoint]:
    """The training curve by step: a step written again (a resumed or restarted training) keeps its last point; a
    line cut short by a crash is skipped (a whole line that is no point raises a RecordError naming it)."""
    points: dict[int, CurvePoint] = {}
    try:
        lines = storage.read_bytes(path).decode().splitlines()  # one request: an object rewritten meanwhile is whole
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, 1):
        try:
            payload = json.loads(line)
        except ValueError:
            continue
        point = CurvePoint.parse(payload, f"{path}, line {number}")
        points[point.step] = point
    return [points[step] for step in sorted(points)]


def warm_start_summary(path: str) -> WarmStartSummary | None:
    """What the train stage's result (the task's XCom) and the runs page keep of its warm-start record at ``path``
    (``RunLayout.warm_start_file``, written by the chief as training starts); None before, or for a run that
    started before tfdist recorded it."""
    record = read_record_if_exists(path, WarmStartRecord)
    return record.summary() if record else None


def kept_checkpoints(state: str) -> list[str]:
    """The checkpoint names (``ckpt-<step>``) TensorFlow's state file keeps, the latest last."""
    kept = re.findall(r'^all_model_checkpoint_paths: "(?:.*/)?([^/"]+)"', state, re.MULTILINE)
    latest = re.search(r'^model_checkpoint_path: "(?:.*/)?([^/"]+)"', state, re.MULTILINE)
    return [*[k for k in kept if not latest or k != latest[1]], *([latest[1]] if latest else [])]


def checkpoint_state(kept: list[str], at: float) -> str:
    """TensorFlow's state file keeping the checkpoints ``kept`` (their names, the latest last), each stamped ``at``
    (Unix time): a CheckpointManager restoring from it deletes them in turn as it saves, as it does its own."""
    lines = [f'model_checkpoint_path: "{kept[-1]}"', *(f'all_model_checkpoint_paths: "{k}"' for k in kept)]
    return "".join(f"{line}\n" for line in [*lines, *(f"all_model_checkpoint_timestamps: {at}" for _ in kept)])


def checkpoint_step(checkpoint_dir: str) -> int:
    """The global step of the latest checkpoint (``ckpt-<step>``, named in TensorFlow's ``checkpoint`` state
    file), 0 when there is none."""
    try:
        state = storage.read_bytes(storage.join(checkpoint_dir, CHECKPOINT_STATE)).decode()
    except FileNotFoundError:
        return 0
    found = re.fullmatch(r"ckpt-(\d+)", (kept_checkpoints(state) or [""])[-1])
    return int(found.group(1)) if found else 0


if __name__ == "__main__":  # an MPIJob's launcher pod runs this in its worker pods over SSH (tfdist.trainer.pod)
    print(json.dumps(last_beats(sys.argv[1])))
