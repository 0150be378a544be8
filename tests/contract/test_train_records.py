"""The training's and the run's records (contract/train_records.py, and the progress record of contract/progress.py):
each reads back as written, one written before versions (or before a later optional key) reads, and a malformed one
raises an error naming its file and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tfdist.contract.layout import RunLayout
from tfdist.contract.progress import CurveWrite, TrainProgress, curve_line, read_curve, warm_start_summary
from tfdist.contract.records import MalformedRecord, NewerRecord, read_record, write_record
from tfdist.contract.train_records import (
    CurvePoint,
    RunRecord,
    TrainResult,
    WarmStartChoice,
    WarmStartParent,
    WarmStartRecord,
    WarmStartSummary,
)


def train_result(**fields: Any) -> TrainResult:
    """A train stage's result as the chief writes it; ``fields`` changed."""
    written: dict[str, Any] = {
        "checkpoint": "/runs/r/checkpoints/ckpt-180",
        "checkpoint_dir": "/runs/r/checkpoints",
        "final_step": 180,
        "resumed_from_step": 0,
        "data_manifest_sha256": "ab" * 32,
        "metrics": {"loss": 0.1, "accuracy": 0.95},
        "loss_per_epoch": [0.5, 0.1],
        "examples_per_sec": 9000.0,
        "workers": 2,
        "train_seconds": 20.0,
        "warm_start": None,
    }
    return TrainResult.model_validate(written | fields)


def warm_start_record(parent_version: int | None, cold_start: str | None = None, **fields: Any) -> WarmStartRecord:
    """The chief's warm-start record: warm from ``parent_version`` (of run ``parent_run_id``, its final values
    ``parent_final``), else cold for ``cold_start``."""
    run_id = fields.pop("parent_run_id", f"scheduled__{parent_version}")
    parent = parent_version and WarmStartParent(
        version=parent_version,
        run_id=run_id,
        path=f"/models/digits/{parent_version}",
        data_interval_end="2026-11-17T00:00:00+00:00",
    )
    written: dict[str, Any] = {
        "source": "baseline",
        "on_mismatch": "cold",
        "parent": parent or None,
        "parent_final": fields.pop("parent_final", parent and {"loss": 0.2, "accuracy": 0.95}) or None,
        "restored": (parent and "model and optimizer") or None,
        "cold_start": cold_start,
        "mismatched": [],
        "normalization": "this run's data",
        "weights": [("dense/kernel", "0123456789abcdef")],
    }
    return WarmStartRecord.model_validate(written | fields)


RUN = RunRecord(
    pipeline_id="digits",
    run_id="scheduled__2026-11-17",
    overrides={"training.epochs": 8},
    data_interval_start="2026-11-16T00:00:00+00:00",
    data_interval_end="2026-11-17T00:00:00+00:00",
    window="its data interval",
    partition_key=None,
)


def test_each_record_reads_back_as_written_with_its_keys_as_before(tmp_path):
    cases = [
        (RUN, {"pipeline_id", "run_id", "overrides", "data_interval_start", "data_interval_end", "window"}),
        (train_result(warm_start=warm_start_record(3).summary()), {"checkpoint", "final_step", "warm_start"}),
        (warm_start_record(3), {"from", "on_mismatch", "parent", "parent_final", "restored", "weights"}),
        (WarmStartChoice(version=None), {"version"}),
    ]
    for record, keys in cases:
        path = str(tmp_path / f"{type(record).__name__}.json")
        write_record(path, record)
        written = json.loads(open(path).read())
        assert keys <= set(written) and written["schema_version"] == 1
        assert read_record(path, type(record)) == record
    assert "source" not in json.loads(open(tmp_path / "WarmStartRecord.json").read())  # the key is 'from'


def test_records_from_before_versions_and_before_their_optional_keys_read(tmp_path):
    """run.json before pipeline ids and windows, a train result before the warm-start summary, a warm-start record
    before vocabularies, a progress record before the train metrics (``accuracy`` alone)."""
    old = {
        "run.json": ({"run_id": "r", "data_interval_start": "a", "data_interval_end": "b"}, RunRecord),
        "result.json": (train_result().model_dump(exclude={"warm_start", "schema_version"}), TrainResult),
        "warm_start.json": (warm_start_record(None, "no baseline").payload(), WarmStartRecord),
    }
    del old["warm_start.json"][0]["vocabularies"], old["warm_start.json"][0]["schema_version"]
    for name, (payload, model) in old.items():
        (tmp_path / name).write_text(json.dumps(payload))
        assert read_record(str(tmp_path / name), model).schema_version == 1
    assert read_record(str(tmp_path / "run.json"), RunRecord).overrides == {}
    progress = {"step": 10, "total_steps": 40, "epoch": 0.5, "epochs": 2, "loss": 0.6, "accuracy": 0.8}
    progress |= {"examples_per_sec": 640.0, "workers": 2, "global_batch_size": 64, "elapsed_seconds": 1.0}
    (tmp_path / "progress.json").write_text(json.dumps(progress | {"updated_at": 1.0}))
    found = read_record(str(tmp_path / "progress.json"), TrainProgress)
    assert (found.metrics, found.seconds_left) == ({"accuracy": 0.8}, 3.0)


@pytest.mark.parametrize(
    "model, payload, field",
    [
        (RunRecord, {"run_id": "r", "data_interval_start": "a"}, "data_interval_end"),
        (TrainResult, train_result().payload() | {"final_step": "last"}, "final_step"),
        (TrainResult, train_result().payload() | {"warm_start": {"parent_version": 3}}, "warm_start.parent_run_id"),
        (WarmStartRecord, warm_start_record(3).payload() | {"parent": {"version": 3}}, "parent.run_id"),
    ],
)
def test_a_malformed_record_names_its_file_and_field(tmp_path, model, payload, field):
    path = tmp_path / "record.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(MalformedRecord) as raised:
        read_record(str(path), model)
    assert (raised.value.source, raised.value.field) == (str(path), field)


def test_a_record_of_a_newer_release_is_refused_by_name(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(train_result().payload() | {"schema_version": 2}))
    with pytest.raises(NewerRecord, match="upgrade tfdist"):
        read_record(str(path), TrainResult)


def test_a_curve_point_keeps_its_train_metrics_at_the_top_level_of_its_line(tmp_path):
    """On disk and over the wire a point is {step, loss, <metrics>, examples_per_sec, learning_rate}; the line holds
    its schema version, the point the page charts (each key a chart) does not."""
    written = {"step": 20, "loss": 0.5, "accuracy": 0.9, "auc": None, "examples_per_sec": 8000.0, "learning_rate": 0.01}
    point = CurvePoint.model_validate(written)
    assert point.metrics == {"accuracy": 0.9, "auc": None}
    assert json.loads(curve_line(point)) == written | {"schema_version": 1}
    assert point.model_dump(mode="json") == written and list(point.model_dump()) == list(written)
    path = str(tmp_path / "curve.jsonl")
    old = json.dumps({"step": 10, "loss": 0.7, "accuracy": 0.8, "examples_per_sec": None, "learning_rate": 0.01})
    with open(path, "w") as f:
        f.write(old + "\n")  # a line from before versions
    CurveWrite(path, curve_line(point))()
    assert [p.step for p in read_curve(path)] == [10, 20]
    with open(path, "a") as f:
        f.write(json.dumps({"loss": 0.4}) + "\n")  # no step
    with pytest.raises(MalformedRecord) as raised:
        read_curve(path)
    assert (raised.value.source, raised.value.field) == (f"{path}, line 3", "step")


def test_the_warm_start_summary_is_what_the_train_result_keeps(tmp_path):
    layout = RunLayout(str(tmp_path))
    assert warm_start_summary(layout.warm_start_file) is None  # before the chief wrote it
    write_record(layout.warm_start_file, warm_start_record(None, "x" * 300))
    assert warm_start_summary(layout.warm_start_file) == WarmStartSummary(
        parent_version=None, parent_run_id=None, cold_start="x" * 200, parent_final=None
    )
    write_record(layout.warm_start_file, warm_start_record(3))
    summary = warm_start_summary(layout.warm_start_file)
    assert summary and (summary.parent_version, summary.parent_run_id) == (3, "scheduled__3")
