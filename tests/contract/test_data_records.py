"""The data records (contract/data_records.py): each reads back in the shape the stages wrote before the models
(a key written only where it applies stays left out elsewhere), older shapes read, and a malformed or newer one
names the file and the field."""

from __future__ import annotations

import copy
import json

import pytest

from tfdist.contract.data_records import (
    DataStatistics,
    DataValidation,
    Manifest,
    ManifestHead,
    PodResult,
    PodsPlan,
    PrepareResult,
    ValidateDataResult,
)
from tfdist.contract.records import MalformedRecord, NewerRecord, read_record, write_record

HISTOGRAM = {"160": 3, "170": 5}
NUMERIC = {
    "count": [8],
    "missing": [1],
    "mean": [2.5],
    "std": [0.5],
    "min": [1.0],
    "max": [None],
    "zero_share": [0.0],
    "histogram": [HISTOGRAM],
}
STATISTICS = {
    "bins": {"zero": 160, "edges": "±2^e", "bins": 321},
    "features": {"x": NUMERIC},
    "categorical": {
        "city": {"rows": 9, "values": 9, "missing": 0, "distinct": 2, "distinct_exact": True, "top": [["a", 5]]}
    },
    "label": {"task": "binary", "classes": ["no", "yes"], "class_counts": [4, 5]},
    "train": {"rows": 6, "class_counts": [3, 3]},
    "eval": {"rows": 3, "class_counts": [1, 2]},
}
SHARD = {"file": "train-00000-of-00001.tfrecord", "bytes": 120, "sha256": "ab", "examples": 6}
MANIFEST = {
    "version": 4,
    "input_fingerprint": "f1",
    "inputs": [{"path": "/in/a.csv", "bytes": 300, "sha256": "cd"}],
    "features": [
        {"name": "x", "kind": "numeric", "shape": [], "missing_indicator": True},
        {
            "name": "city",
            "kind": "categorical",
            "dtype": "string",
            "ids": 3,
            "embedding_dim": 0,
            "vocabulary": {"file": "vocabularies/city.json", "size": 2, "sha256": "ef"},
            "oov_buckets": 1,
            "hash_buckets": None,
        },
        {
            "name": "recent",
            "kind": "categorical_list",
            "dtype": "string",
            "ids": 50,
            "embedding_dim": 8,
            "vocabulary": None,
            "oov_buckets": 0,
            "hash_buckets": 50,
            "combiner": "mean",
            "max_values": 64,
        },
    ],
    "label": {
        "name": "churn",
        "task": "binary",
        "stored": "binary",
        "classes": ["no", "yes"],
        "num_classes": 2,
        "positive": "yes",
        "mean": None,
        "std": None,
    },
    "eval_fraction": 0.3,
    "stats": {"x": {"mean": [2.5], "variance": [0.25]}},
    "statistics": STATISTICS,
    "class_counts": [4, 5],
    "train": {"examples": 6, "shards": [SHARD]},
    "eval": {"examples": 3, "shards": [SHARD | {"file": "eval-00000-of-00001.tfrecord", "examples": 3}]},
}
VALIDATION = {
    "decision": "refused",
    "run_id": "r1",
    "data_interval_end": "2026-01-02T00:00:00+00:00",
    "baseline": {"version": 3, "run_id": "r0", "path": "/models/m/3"},
    "baseline_version": 3,
    "compared": True,
    "why_not_compared": None,
    "not_compared": [{"feature": "new", "why": "new since the baseline"}],
    "settings": {"mode": "refuse", "drift": {"mode": None, "max_divergence": 0.1}},
    "formulas": {"drift": "JS"},
    "checks": [
        {
            "check": "drift",
            "feature": "x",
            "statistic": "Jensen–Shannon divergence",
            "value": 0.3,
            "baseline": None,
            "bound": 0.1,
            "margin": -0.2,
            "rule": "≤ 0.1",
            "mode": "refuse",
            "passed": False,
        },
        {
            "check": "drift",
            "feature": "city",
            "statistic": "L∞ distance",
            "value": 0.0,
            "baseline": None,
            "bound": 0.2,
            "margin": 0.2,
            "rule": "≤ 0.2",
            "top_value": {"value": "a", "share": 0.5, "baseline": 0.5},
            "within": 0.01,
            "mode": "warn",
            "passed": True,
        },
        {
            "check": "rows",
            "feature": "rows",
            "statistic": "rows over the baseline's",
            "value": 9,
            "baseline": 10,
            "bound": [0.5, 2.0],
            "margin": 0.4,
            "rule": "0.5 ≤ ratio ≤ 2.0",
            "mode": "refuse",
            "passed": True,
        },
    ],
    "checks_run": 3,
    "failed": 1,
    "refused": ["drift: x " + "long " * 60],
    "warned": [],
    "statistics": STATISTICS,
    "baseline_statistics": STATISTICS,
}


POD_PLAN = {
    "shares": [[{"url": "/in/a.csv", "start": 0, "end": 100}], [{"url": "/in/a.csv", "start": 100, "end": 180}]],
    "reuse": False,
}
PIECE = {
    "counts": {"train": [3, 2], "eval": [1, 0]},
    "classes": {"train": [["yes", 4], [0, 1]], "eval": [["no", 1]]},  # a class by name, or by index
    "train": {"x": {"count": [5], "mean": [0.5], "m2": [1.25]}},
    "statistics": {"x": {"count": [6], "missing": [0], "histogram": [[0, 6]]}},
    "values_file": "values-00001-00000.npz",
    "negative": ["no", {"url": "/in/a.csv", "offset": 120, "record": 0}],
}
POD_RESULT = {"pieces": [PIECE, {**PIECE, "values_file": None, "negative": None}], "import_seconds": 2.5}


@pytest.mark.parametrize(
    "model, record",
    [
        (Manifest, MANIFEST),
        (DataStatistics, STATISTICS),
        (DataValidation, VALIDATION),
        (PrepareResult, {"data_dir": "/d", "train_examples": 6, "eval_examples": 3, "input_fingerprint": "f1"}),
        (PodsPlan, POD_PLAN),
        (PodsPlan, {"shares": None, "reuse": True}),
        (PodResult, POD_RESULT),
    ],
)
def test_a_record_of_the_previous_release_reads_and_writes_back_its_shape(tmp_path, model, record):
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))  # no schema_version: as the releases before versioning wrote it
    read = read_record(str(path), model)
    write_record(str(path), read)
    written = json.loads(path.read_text())
    assert _without_versions(written) == record and written["schema_version"] == 1
    assert read_record(str(path), model) == read


def _without_versions(record):
    """The record without the schema versions of it and of the records nested in it (the statistics)."""
    if isinstance(record, dict):
        return {k: _without_versions(v) for k, v in record.items() if k != "schema_version"}
    return [_without_versions(v) for v in record] if isinstance(record, list) else record


def test_keys_written_only_where_they_apply_stay_left_out():
    regression = copy.deepcopy(MANIFEST)
    del regression["class_counts"]
    regression["statistics"]["label"] = {
        "task": "regression",
        "count": 9,
        "mean": 1.5,
        "std": 0.5,
        "min": 0.0,
        "max": 3.0,
        "histogram": HISTOGRAM,
    }
    for split in ("train", "eval"):
        del regression["statistics"][split]["class_counts"]
    dumped = Manifest.parse(regression, "m").payload()
    assert "class_counts" not in dumped and "class_counts" not in dumped["statistics"]["train"]
    assert dumped["statistics"]["label"]["task"] == "regression"
    assert "combiner" not in dumped["features"][1] and dumped["features"][2]["combiner"] == "mean"


def test_statistics_of_manifest_version_3_read_without_the_newer_keys():
    old = copy.deepcopy(STATISTICS)
    del old["categorical"], old["label"], old["features"]["x"]["missing"]
    read = DataStatistics.parse(old, "data_statistics.json")
    assert read.label is None and read.categorical == {} and read.features["x"].missing is None
    assert read.task == "multiclass" and read.rows == 9
    assert "label" not in read.payload() and "missing" not in read.payload()["features"]["x"]


def test_a_data_gate_record_from_before_not_compared_and_formulas_reads():
    old = {k: v for k, v in VALIDATION.items() if k not in ("not_compared", "formulas")}
    read = DataValidation.parse(old, "data_validation.json")
    assert read.not_compared == [] and read.formulas == {}
    assert [row.top_value.value for row in read.checks if row.top_value] == ["a"]


def test_the_validate_data_result_holds_the_first_failures_cut():
    result = ValidateDataResult.of(DataValidation.parse(VALIDATION, "v")).payload()
    assert result == {
        "schema_version": 1,
        "decision": "refused",
        "baseline_version": 3,
        "checks_run": 3,
        "failed": 1,
        "refused": [VALIDATION["refused"][0][:200]],
        "warned": [],
    }


def test_the_head_of_a_manifest_of_another_layout_reads():
    head = ManifestHead.parse({"version": 2, "input_fingerprint": "f0", "train": {"shards": [{"file": "x"}]}}, "m")
    assert (head.version, head.input_fingerprint) == (2, "f0")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda m: m["train"]["shards"][0].update(bytes="many"), "train.shards.0.bytes"),
        (lambda m: m["features"][1].pop("ids"), "features.1.categorical.ids"),
        (lambda m: m["features"][0].update(kind="image"), "features.0"),
        (lambda m: m["statistics"]["label"].update(task="ranking"), "statistics.label"),
        (lambda m: m.update(inputs_used=[]), "inputs_used"),
    ],
)
def test_a_malformed_manifest_names_the_file_and_the_field(tmp_path, change, field):
    manifest = copy.deepcopy(MANIFEST)
    change(manifest)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(MalformedRecord) as raised:
        read_record(str(tmp_path / "manifest.json"), Manifest)
    assert raised.value.source == str(tmp_path / "manifest.json") and raised.value.field == field


def test_a_newer_data_gate_record_asks_for_an_upgrade():
    with pytest.raises(NewerRecord, match="upgrade tfdist"):
        DataValidation.parse(VALIDATION | {"schema_version": 2}, "data_validation.json")


def test_a_pods_result_that_lost_a_count_names_the_piece_and_the_field():
    broken = {**POD_RESULT, "pieces": [{k: v for k, v in PIECE.items() if k != "counts"}]}
    with pytest.raises(MalformedRecord) as raised:
        PodResult.parse(broken, "result-1.json")
    assert (raised.value.source, raised.value.field) == ("result-1.json", "pieces.0.counts")
