"""trainer/data.py: the hash-based split and shard of each row, the shard names, the data check refusing a manifest
missing or of another layout; the shard writer (ExampleWriter): the records are those protobuf makes from the values
the plain way (FloatLists parsed from packed bytes change nothing), and its memory stays flat however many rows it
writes."""

from __future__ import annotations

import json
import math

import numpy as np
import psutil
import pytest

from tfdist.contract.launch import EXIT_REFUSED
from tfdist.spec import DataSpec
from tfdist.trainer import data, readers

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
