"""The shard writer (trainer/data.py ExampleWriter): the records are those protobuf makes from the values the plain
way (FloatLists parsed from packed bytes change nothing), and its memory stays flat however many rows it writes."""

from __future__ import annotations

import math

import numpy as np
import psutil
import pytest

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


@pytest.fixture(scope="module")
def tf():
    from tfdist.trainer.runtime import import_tensorflow

    return import_tensorflow()


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
