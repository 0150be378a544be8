"""The hash-based split, and TFRecord shards: writing, checking and reading (raw input: tfdist.trainer.readers)."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract import EXIT_REFUSED, MANIFEST, read_json, sha256_file
from tfdist.trainer import readers
from tfdist.trainer.runtime import fail

if TYPE_CHECKING:
    from tfdist.spec import DataSpec

MANIFEST_VERSION = 4
"""Of the data manifest's layout (2: each shard's size recorded; 3: the data statistics; 4: feature kinds, label
tasks, vocabularies, missing values); part of the input fingerprint."""
READ_PARALLELISM = 2  # fixed: tf.data autotune stalls process exit for tens of seconds
VOCABULARIES = "vocabularies"
"""The data directory's folder of vocabulary files, ``<feature>.json``."""


def row_hashes(chunk: readers.Chunk) -> np.ndarray:
    """A stable 64-bit hash of each row's content (its numbers as float32, its text values): identical rows always
    land in the same split and shard."""
    numbers = list(chunk.numeric.values())
    texts = [_row_texts(values) for values in chunk.categorical.values()]
    if isinstance(chunk.labels, list):
        texts.append(chunk.labels)
    else:
        numbers.append(chunk.labels[:, None].astype(np.float32))
    blob = np.concatenate(numbers, axis=1) if numbers else np.zeros((chunk.rows, 0), np.float32)
    rows = (row.tobytes() for row in blob)
    if texts:
        rows = (row + b"\x1e".join(text) for row, text in zip(rows, zip(*texts, strict=True), strict=True))
    return np.array(
        [int.from_bytes(hashlib.blake2b(row, digest_size=8).digest(), "little") for row in rows], dtype=np.uint64
    )


def _row_texts(values: readers.Values) -> list[bytes]:
    if values.splits is None:
        return values.flat
    return [b"\x1f".join(values.flat[a:b]) for a, b in itertools.pairwise(values.splits.tolist())]


def split_and_shard(hashes: np.ndarray, eval_fraction: float, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether it is held out for evaluation, and its shard index."""
    is_eval = (hashes & np.uint64(0xFFFFFFFF)).astype(np.float64) / 2**32 < eval_fraction
    shard = ((hashes >> np.uint64(32)) % np.uint64(num_shards)).astype(np.int64)
    return is_eval, shard


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


LABEL_LISTS = {"index": "int64_list", "binary": "int64_list", "name": "bytes_list", "value": "float_list"}
"""The label's list in an Example, by label storage."""


class ExampleWriter:
    """Rows as tf.train.Example records, as docs/tabular.md ("Shards") says. One message is refilled per row from
    Python lists (protobuf takes lists ~2x faster than numpy rows; refilling beats building a message per row
    ~1.5x); keys sorted."""

    def __init__(self, tf, data_spec: DataSpec) -> None:
        self.example = tf.train.Example()
        feature = self.example.features.feature
        self.numeric = [feature[f.name].float_list.value for f in data_spec.numeric_features]
        self.categorical = [feature[f.name].bytes_list.value for f in data_spec.categorical_features]
        label = data_spec.label
        self.label = getattr(feature[label.name], LABEL_LISTS[readers.label_storage(label)]).value

    def columns(self, chunk: readers.Chunk) -> list[tuple[Any, list]]:
        """Each field of the Example with its values per row (a list each), for write."""
        columns = [(field, values.tolist()) for field, values in zip(self.numeric, chunk.numeric.values(), strict=True)]
        for field, values in zip(self.categorical, chunk.categorical.values(), strict=True):
            if values.splits is None:
                columns.append((field, [[v] for v in values.flat]))
            else:
                columns.append((field, [values.flat[a:b] for a, b in itertools.pairwise(values.splits.tolist())]))
        labels = chunk.labels
        columns.append((self.label, [[y] for y in labels] if isinstance(labels, list) else labels[:, None].tolist()))
        return columns

    def write(self, writer, columns: list[tuple[Any, list]], rows: list[int]) -> None:
        """Write these rows of the columns to an open tf.io.TFRecordWriter."""
        for i in rows:
            for field, values in columns:
                field[:] = values[i]
            writer.write(self.example.SerializeToString(deterministic=True))


def parse_fn(tf, manifest: dict[str, Any]):
    """Batched parser: serialized examples → ({feature: [batch, *shape]}, labels)."""
    label = manifest["label"]["name"]
    schema = {f["name"]: tf.io.FixedLenFeature([math.prod(f["shape"])], tf.float32) for f in manifest["features"]}
    schema[label] = tf.io.FixedLenFeature([], tf.int64)
    shapes = {f["name"]: f["shape"] for f in manifest["features"]}

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, schema)
        labels = parsed.pop(label)
        return {n: tf.reshape(v, [-1, *shapes[n]]) for n, v in parsed.items()}, labels

    return parse


def verified_manifest(data_dir: str, *splits: str) -> dict[str, Any]:
    """The data manifest, once every shard of ``splits`` and every vocabulary file is as prepare_data wrote it:
    present, of its size (shards), of its sha256 (streamed, after the size: a cut shard costs no hashing).
    Otherwise refuse (EXIT_REFUSED), naming the file, the check and the fix, before anything reads the data."""
    manifest_path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(manifest_path):
        _refuse(manifest_path, "missing", "the file does not exist")
    manifest = read_json(manifest_path)
    if manifest.get("version") != MANIFEST_VERSION:
        _refuse(manifest_path, "version", f"version {manifest.get('version')}, this trainer reads {MANIFEST_VERSION}")
    files = [(s["file"], s["bytes"], s["sha256"]) for split in splits for s in manifest[split]["shards"]]
    files += [
        (f["vocabulary"]["file"], None, f["vocabulary"]["sha256"]) for f in manifest["features"] if f.get("vocabulary")
    ]
    for name, size, sha256 in files:
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            _refuse(path, "missing", "the file does not exist")
        if size is not None and os.path.getsize(path) != size:
            _refuse(path, "size", f"{os.path.getsize(path)} bytes, the manifest says {size}")
        if sha256_file(path) != sha256:
            _refuse(path, "sha256", "its content is not what prepare_data wrote")
    return manifest


def _refuse(path: str, check: str, detail: str) -> None:
    fail(
        f"data check '{check}' failed for {path}: {detail}. The run's data changed after prepare_data wrote it: "
        "clear this run's prepare_data task (and the tasks after it) to prepare the data again",
        EXIT_REFUSED,
    )


def shard_paths(data_dir: str, manifest: dict[str, Any], split: str) -> list[str]:
    return [os.path.join(data_dir, s["file"]) for s in manifest[split]["shards"]]


def eval_dataset(tf, data_dir: str, manifest: dict[str, Any], batch_size: int = 1024):
    files = shard_paths(data_dir, manifest, "eval")
    return (
        tf.data.TFRecordDataset(files, num_parallel_reads=READ_PARALLELISM)
        .batch(batch_size)
        .map(parse_fn(tf, manifest), num_parallel_calls=READ_PARALLELISM)
    )
