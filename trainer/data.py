"""Raw input reading (CSV, NPZ), the hash-based split, and TFRecord shards: writing and reading."""

from __future__ import annotations

import csv
import glob
import hashlib
import math
import os
from typing import Any

import numpy as np

from trainer.artifacts import read_json, sha256_file
from trainer.contract import EXIT_REFUSED
from trainer.runtime import fail

MANIFEST_VERSION = 2
"""Of the data manifest's layout (2: each shard's size recorded); part of the input fingerprint."""
READ_PARALLELISM = 2  # fixed: tf.data autotune stalls process exit for tens of seconds


def feature_columns(feature: dict[str, Any]) -> list[str]:
    """CSV columns of a feature: its name when scalar, else ``<name>_0 .. <name>_<size-1>``."""
    size = math.prod(feature["shape"])
    return [feature["name"]] if not feature["shape"] else [f"{feature['name']}_{i}" for i in range(size)]


def expand_sources(patterns: list[str]) -> list[str]:
    return sorted({path for pattern in patterns for path in glob.glob(pattern) if os.path.isfile(path)})


def read_inputs(paths: list[str], data_spec: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """All rows of the input files: features as float32 arrays of shape [rows, size], labels as int64."""
    features = data_spec["features"]
    label = data_spec["label"]["name"]
    columns: dict[str, list[np.ndarray]] = {f["name"]: [] for f in features}
    labels = []
    for path in paths:
        if data_spec["format"] == "csv":
            with open(path, newline="") as f:
                reader = csv.reader(f)
                header = next(reader)
                rows = np.array(list(reader), dtype=object)
            index = {name: i for i, name in enumerate(header)}
            wanted = [label, *(c for f in features for c in feature_columns(f))]
            missing = [c for c in wanted if c not in index]
            if missing:
                raise ValueError(f"{path}: missing columns {missing[:5]}{'…' if len(missing) > 5 else ''}")
            for f in features:
                cols = [index[c] for c in feature_columns(f)]
                columns[f["name"]].append(rows[:, cols].astype(np.float32) if len(rows) else np.zeros((0, len(cols))))
            labels.append(rows[:, index[label]].astype(np.int64) if len(rows) else np.zeros(0, np.int64))
        else:
            with np.load(path) as arrays:
                missing = [n for n in [label, *columns] if n not in arrays]
                if missing:
                    raise ValueError(f"{path}: missing arrays {missing}")
                for f in features:
                    columns[f["name"]].append(arrays[f["name"]].reshape(len(arrays[label]), -1).astype(np.float32))
                labels.append(arrays[label].astype(np.int64))
    return {n: np.concatenate(v) for n, v in columns.items()}, np.concatenate(labels)


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


def write_shard(tf, path: str, features: dict[str, np.ndarray], labels: np.ndarray, label_name: str) -> None:
    """One tf.train.Example per row. One message is refilled per row from Python lists (protobuf takes
    lists ~2x faster than numpy rows; refilling beats building a message per row ~1.5x); keys sorted."""
    example = tf.train.Example()
    values = {n: example.features.feature[n].float_list.value for n in features}
    label = example.features.feature[label_name].int64_list.value
    with tf.io.TFRecordWriter(path) as writer:
        for i, y in enumerate(labels.tolist()):
            for n, v in features.items():
                values[n][:] = v[i].tolist()
            label[:] = [y]
            writer.write(example.SerializeToString(deterministic=True))


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
    """The data manifest, once every shard of ``splits`` is as prepare_data wrote it: present, of its size, of its
    sha256 (streamed, after the size: a cut shard costs no hashing). Otherwise refuse (EXIT_REFUSED), naming the
    file, the check and the fix, before anything reads the data."""
    manifest_path = os.path.join(data_dir, "manifest.json")
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
    fail(f"data check '{check}' failed for {path}: {detail}. The run's data changed after prepare_data wrote it: "
         "clear this run's prepare_data task (and the tasks after it) to prepare the data again", EXIT_REFUSED)


def shard_paths(data_dir: str, manifest: dict[str, Any], split: str) -> list[str]:
    return [os.path.join(data_dir, s["file"]) for s in manifest[split]["shards"]]


def eval_dataset(tf, data_dir: str, manifest: dict[str, Any], batch_size: int = 1024):
    files = shard_paths(data_dir, manifest, "eval")
    return (
        tf.data.TFRecordDataset(files, num_parallel_reads=READ_PARALLELISM)
        .batch(batch_size)
        .map(parse_fn(tf, manifest), num_parallel_calls=READ_PARALLELISM)
    )
