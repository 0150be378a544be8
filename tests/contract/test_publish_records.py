"""The publishing records (contract/publish_records.py): each reads back as written, in the shape the stages wrote
before records had versions, and a malformed one names its file and field."""

from __future__ import annotations

import json

import pytest

from tfdist.contract.publish_records import (
    Approval,
    Blessing,
    ChangeCheck,
    Claim,
    EvaluateResult,
    ExportResult,
    LockTicket,
    ReaderMarker,
    ScoredBaseline,
    UnscoredBaseline,
    ValueCheck,
    VersionMetadata,
    WarmStart,
    Withdrawn,
)
from tfdist.contract.records import MalformedRecord, NewerRecord, create_record, read_record, write_record

CHECKS = [
    {
        "metric": "accuracy",
        "kind": "value",
        "rule": "≥ 0.9",
        "bound": 0.9,
        "value": 0.93,
        "margin": 0.03,
        "passed": True,
    },
    {
        "metric": "accuracy",
        "kind": "change",
        "value": 0.93,
        "baseline": 0.95,
        "rule": "≥ baseline − 0.01",
        "delta": -0.02,
        "allowed": 0.01,
        "margin": -0.01,
        "passed": False,
    },
]
BLESSING = {
    "blessed": False,
    "gate": "value thresholds and change thresholds",
    "run_id": "scheduled__2026-11-20",
    "data_interval_end": "2026-11-20T00:00:00+00:00",
    "checkpoint": "/runs/x/checkpoints/ckpt-180",
    "step": 180,
    "integrity": {"checks": ["restores", "finite_weights", "step", "data_manifest"], "failed": None},
    "eval_examples": 360,
    "task": "multiclass",
    "metrics": {"accuracy": 0.93, "loss": 0.2},
    "directions": {"accuracy": "higher_is_better", "loss": "lower_is_better"},
    "per_class": {"0": {"examples": 36, "accuracy": 0.9}, "1": {"examples": 0, "accuracy": None}},
    "candidates": [{"checkpoint": "/runs/x/checkpoints/ckpt-180", "step": 180, "metrics": {"accuracy": 0.93}}],
    "checkpoint_selection": {"metric": "accuracy", "direction": "higher_is_better"},
    "thresholds": {"accuracy": {"lower": 0.9, "upper": None}},
    "change_thresholds": {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}},
    "baseline": {"version": 7, "path": "/models/digits/7", "run_id": "earlier", "metrics": {"accuracy": 0.95}},
    "deltas": {"accuracy": {"absolute": -0.02, "relative": -0.021}},
    "checks": CHECKS,
    "failures": ["accuracy = 0.9300 is worse than the baseline"],
    "report": ["validated /runs/x/checkpoints/ckpt-180 on 360 eval examples"],
}
METADATA = {
    "model_name": "digits",
    "version": 20261120000000,
    "run_id": "scheduled__2026-11-20",
    "data_interval_start": "2026-11-19T00:00:00+00:00",
    "data_interval_end": "2026-11-20T00:00:00+00:00",
    "spec_sha256": "ab" * 32,
    "data_manifest_sha256": "cd" * 32,
    "input_fingerprint": "ef" * 32,
    "metrics": {"accuracy": 0.96, "loss": 0.1},
    "gate": "value thresholds",
    "blessing": {
        "blessed": True,
        "gate": "value thresholds",
        "metrics": {"accuracy": 0.96, "loss": 0.1},
        "baseline": {"version": 7, "path": "/models/digits/7", "error": "its classes differ"},
        "deltas": {},
        "thresholds": {"accuracy": {"lower": 0.9, "upper": None}},
        "change_thresholds": {},
        "step": 180,
    },
    "serving_eval_metrics": {"accuracy": 0.96, "loss": 0.1},
    "serving_skew": {"examples": 360, "max_abs_difference": 1e-7, "tolerance": 1e-4},
    "approval": None,
    "source_checkpoint": "/runs/x/checkpoints/ckpt-180",
    "parent": {"version": 7, "run_id": "earlier"},
    "warm_start": {"from": "baseline", "restored": "model and optimizer", "cold_start": None, "mismatched": []},
    "train_metrics": {"loss": 0.12, "accuracy": 0.95},
    "label": {
        "name": "label",
        "task": "multiclass",
        "stored": "index",
        "classes": ["0", "1"],
        "num_classes": 2,
        "positive": None,
        "mean": None,
        "std": None,
    },
    "signature": {
        "inputs": [{"name": "pixels", "kind": "numeric", "dtype": "float32", "shape": [None, 64], "missing": "NaN"}],
        "outputs": {
            "probabilities": {"dtype": "float32", "shape": [None, 2]},
            "classes": {"dtype": "string", "shape": [None]},
        },
    },
    "tensorflow_version": "2.21.0",
}
APPROVAL = {
    "run_id": "manual__1",
    "decision": "rejected",
    "by": "ana",
    "comment": "class 3 got worse",
    "timed_out": False,
    "at": "2026-11-21T09:30:00+00:00",
    "asked": None,
    "excluded": "tom",
    "refused": None,
}
WITHDRAWN = {"version": 3, "by": "alice", "reason": "shifted labels", "at": "2026-11-21T09:30:00+00:00"}
EVALUATE_RESULT = {
    **{k: BLESSING[k] for k in ("blessed", "gate", "run_id", "checkpoint", "step", "eval_examples", "metrics")},
    **{k: BLESSING[k] for k in ("deltas", "failures")},
    "baseline_version": 7,
}
EXPORT_RESULT = {
    "path": "/models/digits/20261120000000",
    "version": 20261120000000,
    "model_name": "digits",
    "metrics": {"accuracy": 0.96},
    "parent_version": 7,
    "cold_start": None,
}
LOCK_TICKET = {"holder": {"host": "worker-1", "pid": 4242}, "until": "2026-11-21T09:35:00+00:00", "released": True}
READER_MARKER = {
    "version": 7,
    "run_id": "manual__1",
    "host": "worker-1",
    "pid": 4242,
    "until": "2026-11-21T09:35:00+00:00",
}
RECORDS = [
    (Blessing, BLESSING),
    (VersionMetadata, METADATA),
    (Approval, APPROVAL),
    (Withdrawn, WITHDRAWN),
    (EvaluateResult, EVALUATE_RESULT),
    (ExportResult, EXPORT_RESULT),
    (LockTicket, LOCK_TICKET),
    (ReaderMarker, READER_MARKER),
]


@pytest.mark.parametrize("model, written", RECORDS, ids=[m.__name__ for m, _ in RECORDS])
def test_a_record_of_the_previous_release_reads_and_is_written_back_in_the_same_shape(tmp_path, model, written):
    """Written without ``schema_version`` (the previous release): it reads as version 1, and written again it is
    the same JSON plus its schema version."""
    path = str(tmp_path / "record.json")
    (tmp_path / "record.json").write_text(json.dumps(written))
    record = read_record(path, model)
    assert record.schema_version == 1
    write_record(path, record)
    assert json.loads((tmp_path / "record.json").read_text()) == {**written, "schema_version": 1}
    assert read_record(path, model) == record


def test_the_two_kinds_of_check_and_of_baseline_read_as_their_own_models():
    blessing = Blessing.parse(BLESSING, "blessing.json")
    assert [type(c) for c in blessing.checks or []] == [ValueCheck, ChangeCheck]
    assert isinstance(blessing.baseline, ScoredBaseline) and blessing.scored_baseline == blessing.baseline
    unscored = VersionMetadata.parse(METADATA, "metadata.json").blessing
    assert unscored and isinstance(unscored.baseline, UnscoredBaseline)
    assert EvaluateResult.of(blessing).payload() == {**EVALUATE_RESULT, "schema_version": 1}


def test_a_refused_blessing_and_a_version_published_before_lineage_read_with_their_defaults():
    refused = Blessing.parse(
        {
            "blessed": False,
            "checkpoint": "/ckpt-9",
            "integrity": {"failed": "finite_weights"},
            "failures": ["non-finite values"],
            "report": ["non-finite values"],
            "run_id": "r",
        },
        "blessing.json",
    )
    assert refused.integrity.failed == "finite_weights" and refused.metrics is None and refused.checks is None
    assert refused.thresholds is None and refused.baseline_version is None
    old = VersionMetadata.parse(
        {"version": 1, "run_id": "r", "data_interval_end": "2026-11-01T00:00:00+00:00", "metrics": {"accuracy": 0.9}},
        "metadata.json",
    )
    assert old.parent is None and old.label is None and old.warm_start == WarmStart()
    assert Claim.parse({"pruning": True}, ".claim-3").pruning


@pytest.mark.parametrize(
    "model, written, field",
    [
        (Blessing, {**BLESSING, "blessed": "maybe"}, "blessed"),
        (Blessing, {**BLESSING, "checks": [{**CHECKS[0], "kind": "ratio"}]}, "checks.0"),
        (VersionMetadata, {k: v for k, v in METADATA.items() if k != "run_id"}, "run_id"),
        (VersionMetadata, {**METADATA, "serving_skew": {"examples": 3}}, "serving_skew.max_abs_difference"),
        (VersionMetadata, {**METADATA, "label": {**METADATA["label"], "task": "ranking"}}, "label.task"),
        (Approval, {**APPROVAL, "decision": "maybe"}, "decision"),
        (Withdrawn, {**WITHDRAWN, "who": "alice"}, "who"),
        (ExportResult, {**EXPORT_RESULT, "version": "latest"}, "version"),
        (LockTicket, {**LOCK_TICKET, "holder": {"host": "worker-1"}}, "holder.pid"),
        (ReaderMarker, {k: v for k, v in READER_MARKER.items() if k != "version"}, "version"),
    ],
)
def test_a_malformed_record_names_its_file_and_field(tmp_path, model, written, field):
    path = tmp_path / "record.json"
    path.write_text(json.dumps(written))
    with pytest.raises(MalformedRecord) as malformed:
        read_record(str(path), model)
    assert (malformed.value.source, malformed.value.field) == (str(path), field)
    assert str(path) in str(malformed.value)


def test_a_record_of_a_newer_release_is_refused_by_name(tmp_path):
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps({**METADATA, "schema_version": 2}))
    with pytest.raises(NewerRecord, match="upgrade tfdist here") as newer:
        read_record(str(path), VersionMetadata)
    assert newer.value.field == "schema_version"


def test_a_record_is_created_once_and_a_second_maker_finds_it_there(tmp_path):
    path = str(tmp_path / "1.json")
    ticket = LockTicket.parse(LOCK_TICKET, "1.json")
    assert create_record(path, ticket) and read_record(path, LockTicket) == ticket
    assert not create_record(path, ticket.model_copy(update={"released": False}))
    assert read_record(path, LockTicket).released  # the first maker's
