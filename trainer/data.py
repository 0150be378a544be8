"""The hash-based split, and TFRecord shards: writing, checking and reading (raw input: tfdist.trainer.readers)."""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any

import numpy as np

from tfdist.contract import EXIT_REFUSED, MANIFEST, read_json, sha256_file
from tfdist.trainer.runtime import fail

MANIFEST_VERSION = 3
"""Of the data manifest's layout (2: each shard's size recorded; 3: the data statistics); part of the input
fingerprint."""
READ_PARALLELISM = 2  # fixed: tf.data autotune stalls process exit for tens of seconds


def row_hashes(features: dict[str, np.ndarray], labels: np.ndarray) -> np.ndarray:
    """A stable 64-bit hash of each row's content: identical rows always land in the same split and shard."""
    blob = np.concatenate([*features.values(), labels[:, None].astype(np.float32)], axis=1)
    return np.array(
        [int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") for row in blob],
        dtype=np.uint64,
    )


def split_and_shard(hashes: np.ndarray, eval_fraction: float, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether it is held out for evaluation, and its shard index."""
    is_eval = (hashes & np.uint64(0xFFFFFFFF)).astype(np.float64) / 2**32 < eval_fraction
    shard = ((hashes >> np.uint64(32)) % np.uint64(num_shards)).astype(np.int64)
    return is_eval, shard


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


class ExampleWriter:
    """Rows as tf.train.Example records. One message is refilled per row from Python lists (protobuf takes
    lists ~2x faster than numpy rows; refilling beats building a message per row ~1.5x); keys sorted."""

    def __init__(self, tf, feature_names: list[str], label_name: str) -> None:
        self.example = tf.train.Example()
        self.values = {n: self.example.features.feature[n].float_list.value for n in feature_names}
        self.label = self.example.features.feature[label_name].int64_list.value

    def write(self, writer, features: dict[str, np.ndarray], labels: np.ndarray) -> None:
        """Write the rows to an open tf.io.TFRecordWriter."""
        columns = {n: v.tolist() for n, v in features.items()}
        for i, y in enumerate(labels.tolist()):
            for n, v in columns.items():
                self.values[n][:] = v[i]
            self.label[:] = [y]
            writer.write(self.example.SerializeToString(deterministic=True))


MISSING_INT64 = -(2**63)
"""A missing value of an int64 categorical feature as the model takes it (the shards hold ``b""``)."""
LABELS = {"index": "int64", "binary": "int64", "value": "float32", "name": "string"}
"""How the label is stored (the manifest's ``label.stored``) → its dtype in the Example."""


def parse_fn(tf, manifest: dict[str, Any]):
    """Batched parser: serialized examples → (the model's raw inputs by feature name, labels), as docs/tabular.md
    ("Formats") says: numeric float32 [batch, *shape] (NaN: missing); categorical string [batch] (int64 for dtype
    int64, MISSING_INT64: missing); categorical_list string [batch, None] padded with ""; labels the class index
    (int64; a class name mapped by the manifest's classes), 0/1 (int64) or the target (float32)."""
    label = manifest["label"]
    schema = {label["name"]: tf.io.FixedLenFeature([], getattr(tf, LABELS[label["stored"]]))}
    for f in manifest["features"]:
        if f["kind"] == "numeric":
            schema[f["name"]] = tf.io.FixedLenFeature([math.prod(f["shape"])], tf.float32)
        elif f["kind"] == "categorical":
            schema[f["name"]] = tf.io.FixedLenFeature([], tf.string)
        else:
            schema[f["name"]] = tf.io.RaggedFeature(tf.string)

    def raw(f: dict[str, Any], value):
        if f["kind"] == "numeric":
            return tf.reshape(value, [-1, *f["shape"]])
        if f["kind"] == "categorical_list":
            return value.to_tensor("")
        if f["dtype"] == "int64":
            missing = value == ""
            number = tf.strings.to_number(tf.where(missing, "0", value), tf.int64)
            return tf.where(missing, tf.constant(MISSING_INT64, tf.int64), number)
        return value

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, schema)
        labels = parsed.pop(label["name"])
        if label["stored"] == "name":  # made here, not with the parser: a strategy made later must come first
            classes = tf.constant(label["classes"], tf.string)
            labels = tf.argmax(tf.cast(tf.equal(labels[:, None], classes[None, :]), tf.int64), axis=1)
        return {f["name"]: raw(f, parsed[f["name"]]) for f in manifest["features"]}, labels

    return parse


def verified_manifest(data_dir: str, *splits: str) -> dict[str, Any]:
    """The data manifest, once every shard of ``splits`` is as prepare_data wrote it: present, of its size, of its
    sha256 (streamed, after the size: a cut shard costs no hashing). Otherwise refuse (EXIT_REFUSED), naming the
    file, the check and the fix, before anything reads the data."""
    manifest_path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(manifest_path):
        _refuse(manifest_path, "missing", "the file does not exist")
    manifest = read_json(manifest_path)
    if manifest.get("version") != MANIFEST_VERSION:
        _refuse(manifest_path, "version", f"version {manifest.get('version')}, this trainer reads {MANIFEST_VERSION}")
    for shard in (s for split in splits for s in manifest[split]["shards"]):
        path = os.path.join(data_dir, shard["file"])
        if not os.path.exists(path):
            _refuse(path, "missing", "the file does not exist")
        if os.path.getsize(path) != shard["bytes"]:
            _refuse(path, "size", f"{os.path.getsize(path)} bytes, the manifest says {shard['bytes']}")
        if sha256_file(path) != shard["sha256"]:
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
