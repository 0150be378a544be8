"""The hash-based split, and TFRecord shards: writing, checking and reading (raw input: tfdist.trainer.readers)."""

from __future__ import annotations

import itertools
import math
import os
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from tfdist.contract.data_records import FeatureEntry, Manifest, ManifestHead, NumericEntry
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import MANIFEST
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json, sha256_file
from tfdist.trainer import readers, scratch
from tfdist.trainer.runtime import fail

if TYPE_CHECKING:
    from tfdist.spec import DataSpec

MANIFEST_VERSION = 4
"""Of the data manifest's layout (2: each shard's size recorded; 3: the data statistics; 4: feature kinds, label
tasks, vocabularies, missing values); part of the input fingerprint."""
READ_PARALLELISM = 2  # fixed: tf.data autotune stalls process exit for tens of seconds


def row_hashes(chunk: readers.Chunk) -> np.ndarray:
    """A stable 64-bit hash of each row's content (its numbers as float32, its text values, its label): identical
    rows always land in the same split and shard. Vectorized: each 64-bit word of the numbers, then each text
    value's own hash (a list's by position), folded in by the SplitMix64 finalizer."""
    numbers = list(chunk.numeric.values())
    texts = list(chunk.categorical.values())
    if isinstance(chunk.labels, list):
        texts.append(readers.Values(chunk.labels))
    else:
        numbers.append(chunk.labels[:, None].astype(np.float32))
    width = sum(n.shape[1] for n in numbers)
    blob = np.concatenate([*numbers, np.zeros((chunk.rows, width % 2), np.float32)], axis=1)
    hashes = np.full(chunk.rows, HASH_SEED, np.uint64)
    for word in np.ascontiguousarray(blob).view(np.uint64).T:
        hashes = _mix(hashes ^ word)
    for values in texts:
        hashes = _mix(hashes ^ _text_hashes(values))
    return hashes


HASH_SEED = 0x243F6A8885A308D3


def _mix(h: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: every bit of the input moves about half the output's."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _text_hashes(values: readers.Values) -> np.ndarray:
    """Per row, a hash of its values (their digests); a list's values by position, summed, with the list's
    length."""
    flat = np.frombuffer(b"".join(map(values.digests.__getitem__, values.flat)), "<u8")
    if values.splits is None:
        return flat
    counts = np.diff(values.splits)
    row_of = np.repeat(np.arange(len(counts)), counts)
    position = np.arange(len(flat), dtype=np.uint64) - values.splits[row_of].astype(np.uint64)
    summed = counts.astype(np.uint64) * np.uint64(HASH_SEED)
    np.add.at(summed, row_of, _mix(flat ^ position))
    return summed


def split_and_shard(hashes: np.ndarray, eval_fraction: float, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether it is held out for evaluation, and its shard index."""
    is_eval = (hashes & np.uint64(0xFFFFFFFF)).astype(np.float64) / 2**32 < eval_fraction
    shard = ((hashes >> np.uint64(32)) % np.uint64(num_shards)).astype(np.int64)
    return is_eval, shard


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


LABEL_LISTS = {"index": "int64_list", "binary": "int64_list", "name": "bytes_list", "value": "float_list"}
"""The label's list in an Example, by label storage."""


Columns = tuple[Any, list[tuple[Any, list]], list[tuple[Any, list]]]
"""A chunk as ExampleWriter.write takes it: (its message, each numeric feature's FloatList parser with its
serialized FloatList per row, each other field with its values per row)."""


class ExampleWriter:
    """Rows as tf.train.Example records, as docs/tabular.md ("Shards") says, keys sorted. A message is refilled per
    row: a numeric feature's FloatList parsed from its packed float32 bytes (~2x faster than from a Python list,
    which is ~2x faster than from numpy), the other fields from Python lists. Each chunk gets a message of its own:
    upb keeps what every refill allocates until its message is gone (~256 bytes a parse of 64 floats)."""

    def __init__(self, tf, data_spec: DataSpec) -> None:
        self.tf, self.spec = tf, data_spec
        self.label_list = LABEL_LISTS[readers.label_storage(data_spec.label)]

    def columns(self, chunk: readers.Chunk) -> Columns:
        """The chunk's rows, for write."""
        example = self.tf.train.Example()
        feature = example.features.feature
        parsed = [
            (feature[name].float_list.ParseFromString, _float_lists(values)) for name, values in chunk.numeric.items()
        ]
        filled = []
        for name, values in chunk.categorical.items():
            if values.splits is None:
                filled.append((feature[name].bytes_list.value, [[v] for v in values.flat]))
            else:
                rows = [values.flat[a:b] for a, b in itertools.pairwise(values.splits.tolist())]
                filled.append((feature[name].bytes_list.value, rows))
        labels = chunk.labels
        label = getattr(feature[self.spec.label.name], self.label_list).value
        filled.append((label, [[y] for y in labels] if isinstance(labels, list) else labels[:, None].tolist()))
        return example, parsed, filled

    def write(self, writer, columns: Columns, rows: list[int]) -> None:
        """Write these rows of the columns to an open tf.io.TFRecordWriter."""
        example, parsed, filled = columns
        serialize, write = example.SerializeToString, writer.write
        for i in rows:
            for parse, values in parsed:
                parse(values[i])
            for field, values in filled:
                field[:] = values[i]
            write(serialize(deterministic=True))


def _float_lists(values: np.ndarray) -> list[bytes]:
    """Each row's serialized FloatList: field 1 (packed), its length in bytes as a varint, the float32 values."""
    rows, size = values.shape
    length, head = 4 * size, bytearray(b"\x0a")
    while length >= 0x80:
        head.append(length & 0x7F | 0x80)
        length >>= 7
    head.append(length)
    out = np.empty((rows, len(head) + 4 * size), np.uint8)
    out[:, : len(head)] = np.frombuffer(head, np.uint8)
    out[:, len(head) :] = np.ascontiguousarray(values, "<f4").view(np.uint8).reshape(rows, 4 * size)
    return out.view(f"V{out.shape[1]}").ravel().tolist()


MISSING_INT64 = -(2**63)
"""A missing value of an int64 categorical feature where it is handed over as int64 (the serving signature's input);
the shards and the Keras model hold an int64 value as its decimal string, a missing one as ``""``."""


def int64_as_strings(tf, values):
    """int64 values as the decimal strings the shards hold (MISSING_INT64: ``""``)."""
    return tf.where(values == MISSING_INT64, "", tf.strings.as_string(values))


def strings_as_int64(tf, strings):
    """The decimal strings the shards hold as int64 values (``""``: MISSING_INT64)."""
    missing = strings == ""
    number = tf.strings.to_number(tf.where(missing, "0", strings), tf.int64)
    return tf.where(missing, tf.constant(MISSING_INT64, tf.int64), number)


LABELS = {"index": "int64", "binary": "int64", "value": "float32", "name": "string"}
"""How the label is stored (the manifest's ``label.stored``) → its dtype in the Example."""


def parse_fn(tf, manifest: Manifest):
    """Batched parser: serialized examples → (the model's raw inputs by feature name, labels), as docs/tabular.md
    ("Formats") says: numeric float32 [batch, *shape] (NaN: missing); categorical string [batch] as stored (dtype
    int64: its decimal string; "": missing); categorical_list string [batch, None] padded with ""; labels the class
    index (int64; a class name mapped by the manifest's classes), 0/1 (int64) or the target (float32)."""
    label = manifest.label
    schema = {label.name: tf.io.FixedLenFeature([], getattr(tf, LABELS[label.stored]))}
    for f in manifest.features:
        if f.kind == "numeric":
            schema[f.name] = tf.io.FixedLenFeature([math.prod(f.shape)], tf.float32)
        elif f.kind == "categorical":
            schema[f.name] = tf.io.FixedLenFeature([], tf.string)
        else:
            schema[f.name] = tf.io.RaggedFeature(tf.string)

    def raw(f: FeatureEntry, value):
        if isinstance(f, NumericEntry):
            return tf.reshape(value, [-1, *f.shape])
        return value.to_tensor("") if f.kind == "categorical_list" else value

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, schema)
        labels = parsed.pop(label.name)
        if label.stored == "name":  # made here, not with the parser: a strategy made later must come first
            classes = tf.constant(label.classes, tf.string)
            labels = tf.argmax(tf.cast(tf.equal(labels[:, None], classes[None, :]), tf.int64), axis=1)
        return {f.name: raw(f, parsed[f.name]) for f in manifest.features}, labels

    return parse


def verified_manifest(data_dir: str, *splits: str) -> tuple[Manifest, str]:
    """(The data manifest, the local directory holding its files) once every shard of ``splits`` and every
    vocabulary file is as prepare_data wrote it: present, of its size (shards), of its sha256 (streamed, after the
    size: a cut shard costs no hashing). An object store's are checked in their local copy (``scratch.fetch``),
    the manifest's too.
    Otherwise refuse (EXIT_REFUSED), naming the file, the check and the fix, before anything reads the data."""
    manifest_path = storage.join(data_dir, MANIFEST)
    try:
        payload = read_json(os.path.join(scratch.fetch(data_dir, [MANIFEST]), MANIFEST))
    except FileNotFoundError:
        _refuse(manifest_path, "missing", "the file does not exist")
    if (version := ManifestHead.parse(payload, manifest_path).version) != MANIFEST_VERSION:
        _refuse(manifest_path, "version", f"version {version}, this trainer reads {MANIFEST_VERSION}")
    manifest = Manifest.parse(payload, manifest_path)
    files: list[tuple[str, int | None, str]] = [
        (s.file, s.bytes, s.sha256) for split in splits for s in manifest.split(split).shards
    ]
    files += [(f.vocabulary.file, None, f.vocabulary.sha256) for f in manifest.with_vocabulary if f.vocabulary]
    try:
        local = scratch.fetch(data_dir, [name for name, _, _ in files])
    except FileNotFoundError as missing:
        _refuse(str(missing), "missing", "the file does not exist")
    for name, size, sha256 in files:
        path, shown = os.path.join(local, name), storage.join(data_dir, name)
        if not os.path.exists(path):
            _refuse(shown, "missing", "the file does not exist")
        if size is not None and os.path.getsize(path) != size:
            _refuse(shown, "size", f"{os.path.getsize(path)} bytes, the manifest says {size}")
        if sha256_file(path) != sha256:
            _refuse(shown, "sha256", "its content is not what prepare_data wrote")
    return manifest, local


def _refuse(path: str, check: str, detail: str) -> NoReturn:
    fail(
        f"data check '{check}' failed for {path}: {detail}. The run's data changed after prepare_data wrote it: "
        "clear this run's prepare_data task (and the tasks after it) to prepare the data again",
        EXIT_REFUSED,
    )


def shard_paths(data_dir: str, manifest: Manifest, split: str) -> list[str]:
    return [os.path.join(data_dir, s.file) for s in manifest.split(split).shards]


def eval_dataset(tf, data_dir: str, manifest: Manifest, batch_size: int = 1024):
    files = shard_paths(data_dir, manifest, "eval")
    return (
        tf.data.TFRecordDataset(files, num_parallel_reads=READ_PARALLELISM)
        .batch(batch_size)
        .map(parse_fn(tf, manifest), num_parallel_calls=READ_PARALLELISM)
    )
