"""trainer/data.py: the hash-based split and shard of each row, the shard names, the data check refusing a manifest
missing or of another layout; the shard writer (ExampleWriter): the records are those protobuf makes from the values
the plain way (FloatLists parsed from packed bytes change nothing), and its memory stays flat however many rows it
writes; the parser hands an int64 feature on as the string the shard holds, and int64 ids convert to those strings
and back."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import psutil
import pytest

from tests.support.roots import REPO
from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import read_record
from tfdist.spec import DataSpec
from tfdist.trainer import data, readers
from tfdist.trainer.data import MISSING_INT64

SPEC = DataSpec.model_validate(
    {
        "source": "unused",
        "format": "csv",
        "features": [
            {"name": "pixel", "shape": [64]},
            {"name": "age"},
            {"name": "city", "kind": "categorical"},
            {"name": "tags", "kind": "categorical_list"},
        ],
        "label": {"name": "label", "num_classes": 10},
    }
)


def chunk(rows: int, seed: int) -> readers.Chunk:
    rng = np.random.default_rng(seed)
    age = rng.normal(40, 10, (rows, 1)).astype(np.float32)
    age[::7] = np.nan
    tags = [[b"a", b"b"][: k % 3] for k in range(rows)]
    return readers.Chunk(
        {"pixel": rng.normal(0, 1e3, (rows, 64)).astype(np.float32), "age": age},
        {
            "city": readers.Values([f"city-{k % 13}".encode() for k in range(rows)]),
            "tags": readers.Values([t for row in tags for t in row], np.cumsum([0, *map(len, tags)])),
        },
        rng.integers(0, 10, rows),
    )


class Records:
    """What an open TFRecordWriter is given."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def write(self, record: bytes) -> None:
        self.records.append(record)


def test_the_records_are_those_protobuf_makes_from_the_values(tf):
    rows = chunk(50, 1)
    written = Records()
    writer = data.ExampleWriter(tf, SPEC)
    writer.write(written, writer.columns(rows), list(range(50))[::-1])
    expected = []
    for i in reversed(range(50)):
        example = tf.train.Example()
        feature = example.features.feature
        feature["pixel"].float_list.value[:] = rows.numeric["pixel"][i].tolist()
        feature["age"].float_list.value[:] = [math.nan if np.isnan(a) else float(a) for a in rows.numeric["age"][i]]
        feature["city"].bytes_list.value[:] = [rows.categorical["city"].flat[i]]
        splits = rows.categorical["tags"].splits
        feature["tags"].bytes_list.value[:] = rows.categorical["tags"].flat[splits[i] : splits[i + 1]]
        feature["label"].int64_list.value[:] = [int(rows.labels[i])]
        expected.append(example.SerializeToString(deterministic=True))
    assert written.records == expected


RELEASED_MANIFEST = os.path.join(
    REPO, "tests", "fixtures", "records", "0.2.0", "runs", "fixture_day2-e0149de211d6abcb", "data", "manifest.json"
)
"""A manifest prepare_data wrote, a feature of each kind: ``store`` is an int64 categorical feature."""


def test_the_parser_hands_an_int64_feature_on_as_the_decimal_string_the_shard_holds(tf):
    manifest = read_record(RELEASED_MANIFEST, Manifest)
    records = []
    for store in (b"42", b"-7", b""):
        example = tf.train.Example()
        feature = example.features.feature
        feature["age"].float_list.value[:] = [1.0]
        feature["scores"].float_list.value[:] = [0.0, 1.0]
        for name, value in (("country", b"de"), ("device", b"ios"), ("store", store), ("recent", b"tea")):
            feature[name].bytes_list.value[:] = [value]
        feature["y"].int64_list.value[:] = [1]
        records.append(example.SerializeToString())
    features, _ = data.parse_fn(tf, manifest)(tf.constant(records))
    assert features["store"].dtype == tf.string
    assert features["store"].numpy().tolist() == [b"42", b"-7", b""]


def test_int64_ids_convert_to_the_stored_strings_and_back_a_missing_one_as_missing_int64(tf):
    ids = tf.constant([42, -7, 0, MISSING_INT64, 2**63 - 1], tf.int64)
    strings = data.int64_as_strings(tf, ids)
    assert strings.numpy().tolist() == [b"42", b"-7", b"0", b"", b"9223372036854775807"]
    assert data.strings_as_int64(tf, strings).numpy().tolist() == ids.numpy().tolist()


@pytest.mark.e2e
def test_writing_many_rows_takes_no_more_memory(tf):
    """200,000 rows of 64 floats: ~51 MB if the message that each row refills kept what every refill allocates."""
    writer, rows = data.ExampleWriter(tf, SPEC), chunk(5000, 2)
    process = psutil.Process()

    def write(chunks: int) -> None:
        for _ in range(chunks):
            writer.write(Records(), writer.columns(rows), list(range(5000)))

    write(4)
    before = process.memory_info().rss
    write(40)
    assert process.memory_info().rss - before < 10e6


def test_a_rows_hash_is_of_its_content_alone_so_equal_rows_share_their_split_and_shard():
    rows = chunk(200, seed=1)
    again = readers.Chunk(rows.numeric, rows.categorical, rows.labels)
    hashes = data.row_hashes(rows)
    np.testing.assert_array_equal(data.row_hashes(again), hashes)
    assert len(set(hashes.tolist())) == 200  # distinct rows, distinct hashes
    other = chunk(200, seed=1)
    other.labels[5] = (other.labels[5] + 1) % 10
    changed = data.row_hashes(other) != hashes
    assert changed.tolist() == [k == 5 for k in range(200)]  # the label is part of the row


def test_the_split_holds_out_the_eval_fraction_and_spreads_the_rows_over_every_shard():
    hashes = data.row_hashes(chunk(4000, seed=2))
    is_eval, shard = data.split_and_shard(hashes, 0.25, 4)
    assert 0.22 < is_eval.mean() < 0.28
    assert sorted(set(shard.tolist())) == [0, 1, 2, 3] and min(np.bincount(shard)) > 900
    assert not data.split_and_shard(hashes, 0.0, 4)[0].any() and data.split_and_shard(hashes, 1.0, 4)[0].all()
    assert data.shard_name("train", 3, 16) == "train-00003-of-00016.tfrecord"


def test_a_manifest_missing_or_of_another_layout_is_refused_before_any_data_is_read(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        data.verified_manifest(str(tmp_path), "train")
    assert refused.value.code == EXIT_REFUSED
    assert (
        f"data check 'missing' failed for {tmp_path}/manifest.json: the file does not exist" in capsys.readouterr().err
    )
    (tmp_path / "manifest.json").write_text(json.dumps({"version": data.MANIFEST_VERSION - 1}))
    with pytest.raises(SystemExit):
        data.verified_manifest(str(tmp_path), "train")
    err = capsys.readouterr().err
    assert f"data check 'version' failed for {tmp_path}/manifest.json: version {data.MANIFEST_VERSION - 1}" in err
    assert "clear this run's prepare_data task" in err
