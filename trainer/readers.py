"""Input readers (CSV, JSON lines, NPZ, Parquet, TFRecord of tf.train.Example): the rows of the run's input as
chunks of bounded size, from local paths or any fsspec URL.

The input is cut into pieces (a file, or a byte range of a large CSV or JSON-lines file: the lines that start
in it) whatever the number of processes reading it, so the same input always gives the same pieces, chunks
and rows in the same order. A row that does not fit the data spec raises BadData naming the file, the line
(or record) and the field."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import fsspec
import numpy as np

from tfdist.spec import DataSpec, Feature

PIECE_BYTES = 64 << 20
"""A CSV or JSON-lines file larger than this is read as several pieces."""
BLOCK_BYTES = 4 << 20
"""Text read at a time: a chunk holds the complete lines of one block."""
CHUNK_ROWS = 16384
"""Rows per chunk of the other formats."""
LINE_FORMATS = ("csv", "jsonl")


class BadData(Exception):
    """A row of the input that does not fit the data spec (the message names file, row and field)."""


@dataclass(frozen=True)
class Piece:
    url: str
    start: int
    end: int
    """Byte range [start, end) whose lines this piece reads (line formats); the whole file otherwise."""


@dataclass
class Chunk:
    features: dict[str, np.ndarray]
    """float32 [rows, size] per feature."""
    labels: np.ndarray
    """int64 [rows]."""


def expand(patterns: Iterable[str]) -> list[tuple[str, int]]:
    """The files (URL, size; 0 when the server does not say) the patterns match (globs are expanded, on any file
    system that lists), sorted, once each."""
    found: dict[str, int] = {}
    for pattern in patterns:
        fs, path = fsspec.core.url_to_fs(pattern)
        for match in fs.glob(path) if fsspec.core.has_magic(path) else [path] if fs.exists(path) else []:
            info = fs.info(match)
            if info["type"] == "file":
                found[fs.unstrip_protocol(match) if "://" in pattern else match] = info.get("size") or 0
    return sorted(found.items())


def pieces(files: list[tuple[str, int]], fmt: str) -> list[Piece]:
    """The input cut into pieces of about PIECE_BYTES (line formats, of a known size), else one per file."""
    if fmt not in LINE_FORMATS:
        return [Piece(url, 0, size) for url, size in files]
    cut = []
    for url, size in files:
        if not size:  # unknown (or empty): read to its end
            cut.append(Piece(url, 0, sys.maxsize))
            continue
        count = max(1, math.ceil(size / PIECE_BYTES))
        bounds = [size * k // count for k in range(count + 1)]
        cut += [Piece(url, a, b) for a, b in itertools.pairwise(bounds)]
    return cut


def chunks(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """The piece's rows, checked against the data spec, in chunks."""
    yield from READERS[data_spec.format](piece, data_spec)


def feature_columns(feature: Feature) -> list[str]:
    """Flat columns of a feature (CSV, Parquet): its name when scalar, else ``<name>_0 .. <name>_<size-1>``."""
    return [feature.name] if not feature.shape else [f"{feature.name}_{i}" for i in range(feature.size)]


def _checked(url: str, features: dict[str, np.ndarray], labels: np.ndarray, data_spec: DataSpec, row_name) -> Chunk:
    """The chunk, once every feature value is finite and every label an integer class; else BadData naming
    the row (``row_name(i)``: its line or record) and the field."""
    num_classes, label = data_spec.label.num_classes, data_spec.label.name
    for name, values in features.items():
        if not np.isfinite(values).all():
            i, j = map(int, np.argwhere(~np.isfinite(values))[0])
            column = name if values.shape[1] == 1 else f"{name}[{j}]"
            raise BadData(f"{url}, {row_name(i)}, field '{column}': {values[i, j]} is not a finite number")
    bad = (labels < 0) | (labels >= num_classes) | (labels != np.floor(labels)) | ~np.isfinite(labels)
    if bad.any():
        i = int(np.argmax(bad))
        raise BadData(
            f"{url}, {row_name(i)}, field '{label}': {labels[i]:g} is not a class in [0, {num_classes}) "
            f"(data.label.num_classes)"
        )
    return Chunk({n: v.astype(np.float32, copy=False) for n, v in features.items()}, labels.astype(np.int64))


# CSV and JSON lines -------------------------------------------------------------------------------------


def _line_blocks(f, piece: Piece) -> Iterator[tuple[int, list[bytes]]]:
    """(offset of the first line, lines) of each block of the lines that start in the piece's range; blank
    lines are kept (as b'') so that line numbers stay countable."""
    if piece.start:
        f.seek(piece.start - 1)
        f.readline()  # through the end of the line in progress: it belongs to the piece before
    offset, pending = f.tell(), b""
    while offset < piece.end:
        block = f.read(BLOCK_BYTES)
        lines = (pending + block).split(b"\n")
        pending = lines.pop() if block else b""
        first, taken = offset, []
        for line in lines:
            if offset >= piece.end:
                break
            taken.append(line.rstrip(b"\r"))
            offset += len(line) + 1
        if taken:
            yield first, taken
        if not block:
            return


def _line_number(url: str, offset: int) -> int:
    """The 1-based line number of the line starting at ``offset`` (counted only for an error message)."""
    with fsspec.open(url, "rb") as f:
        count, read = 0, 0
        while read < offset:
            data = f.read(min(BLOCK_BYTES, offset - read))
            count, read = count + data.count(b"\n"), read + len(data)
    return count + 1


def _read_lines(piece: Piece, data_spec: DataSpec, parse) -> Iterator[Chunk]:
    with fsspec.open(piece.url, "rb") as f:
        header = f.readline() if data_spec.format == "csv" else b""
        for offset, lines in _line_blocks(f, Piece(piece.url, piece.start or len(header), piece.end)):
            kept = [k for k, line in enumerate(lines) if line.strip()]

            def row_name(i: int, offset=offset, lines=lines, kept=kept) -> str:
                k = kept[i]
                return f"line {_line_number(piece.url, offset + sum(len(x) + 1 for x in lines[:k]))}"

            if kept:
                features, labels = parse(header, [lines[k] for k in kept], row_name)
                yield _checked(piece.url, features, labels, data_spec, row_name)


def _csv(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    def parse(header: bytes, lines: list[bytes], row_name) -> tuple[dict, np.ndarray]:
        names = next(csv.reader([header.decode().rstrip("\r\n")]))
        index = {name: i for i, name in enumerate(names)}
        label = data_spec.label.name
        wanted = [label, *(c for f in data_spec.features for c in feature_columns(f))]
        if missing := [c for c in wanted if c not in index]:
            raise BadData(
                f"{piece.url}: missing columns {missing[:5]}{'…' if len(missing) > 5 else ''} "
                f"(data.features and data.label name the CSV header's columns)"
            )
        try:
            table = np.loadtxt(
                [line.decode() for line in lines],
                delimiter=",",
                quotechar='"',
                dtype=np.float64,
                ndmin=2,
                usecols=[index[c] for c in wanted],
            )
            if any(line.count(b",") != len(names) - 1 for line in lines if b'"' not in line):
                raise ValueError("column count")
        except ValueError:
            find_bad_row(lines, names, wanted, row_name)
            raise
        out, at = {}, 1
        for f in data_spec.features:
            out[f.name], at = table[:, at : at + f.size], at + f.size
        return out, table[:, 0]

    def find_bad_row(lines, names, wanted, row_name) -> None:
        for i, fields in enumerate(csv.reader(line.decode() for line in lines)):
            if len(fields) != len(names):
                raise BadData(f"{piece.url}, {row_name(i)}: {len(fields)} fields, the header has {len(names)}")
            for column in wanted:
                value = fields[names.index(column)]
                try:
                    float(value)
                except ValueError:
                    raise BadData(f"{piece.url}, {row_name(i)}, field '{column}': {value!r} is not a number") from None

    return _read_lines(piece, data_spec, parse)


def _jsonl(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """One JSON object per line: each feature a number or a (nested) list of its shape's size, the label an
    integer."""
    label = data_spec.label.name

    def parse(_: bytes, lines: list[bytes], row_name) -> tuple[dict, np.ndarray]:
        try:
            rows = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            for i, line in enumerate(lines):
                try:
                    json.loads(line)
                except ValueError as exc:
                    raise BadData(f"{piece.url}, {row_name(i)}: not a JSON object ({exc})") from None
            raise
        out = {}
        for name, size in [(f.name, f.size) for f in data_spec.features] + [(label, 1)]:
            try:
                out[name] = np.asarray([row[name] for row in rows], dtype=np.float64).reshape(len(rows), size)
            except (KeyError, TypeError, ValueError):
                for i, row in enumerate(rows):
                    value = row.get(name) if isinstance(row, dict) else None
                    try:
                        if np.asarray(value, dtype=np.float64).size != size:
                            raise ValueError
                    except (TypeError, ValueError):
                        raise BadData(
                            f"{piece.url}, {row_name(i)}, field '{name}': {value!r} is not "
                            f"{'a number' if size == 1 else f'{size} numbers'}"
                        ) from None
                raise
        return out, out.pop(label)[:, 0]

    return _read_lines(piece, data_spec, parse)


# NPZ and Parquet ----------------------------------------------------------------------------------------


def _records(url: str, data_spec: DataSpec, features: dict[str, np.ndarray], labels: np.ndarray, first: int) -> Chunk:
    return _checked(url, features, labels, data_spec, lambda i: f"record {first + i + 1}")


def _npz(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """One array per feature and one for the label, a row per record. A file is read whole (its arrays are
    compressed members of a zip), so memory grows with the largest file, not with the input."""
    label = data_spec.label.name
    with fsspec.open(piece.url, "rb") as f, np.load(io.BytesIO(f.read())) as arrays:
        names = [label, *(f.name for f in data_spec.features)]
        if missing := [n for n in names if n not in arrays]:
            raise BadData(f"{piece.url}: missing arrays {missing} (data.features and data.label name its arrays)")
        labels = arrays[label]
        columns = {}
        for f in data_spec.features:
            values = arrays[f.name]
            if len(values) != len(labels) or values[0:1].size not in (0, f.size):
                raise BadData(
                    f"{piece.url}: array '{f.name}' has shape {values.shape}, expected "
                    f"({len(labels)}, {', '.join(map(str, f.shape))}) (data.features[].shape)"
                )
            columns[f.name] = values.reshape(len(labels), -1)
    for first in range(0, len(labels), CHUNK_ROWS):
        rows = slice(first, first + CHUNK_ROWS)
        yield _records(
            piece.url,
            data_spec,
            {n: v[rows].astype(np.float64) for n, v in columns.items()},
            labels[rows].astype(np.float64),
            first,
        )


def _parquet(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """A column per scalar feature and for the label; a vector feature is one list column named as the
    feature or a column per element (``<name>_0`` ..). Read by row batches."""
    import pyarrow.parquet as pq

    label = data_spec.label.name
    with fsspec.open(piece.url, "rb") as f:
        file = pq.ParquetFile(f)
        present = set(file.schema_arrow.names)
        sources = {
            feat.name: [feat.name] if feat.name in present else feature_columns(feat) for feat in data_spec.features
        }
        if missing := [c for c in [label, *(c for cols in sources.values() for c in cols)] if c not in present]:
            raise BadData(
                f"{piece.url}: missing columns {missing[:5]}{'…' if len(missing) > 5 else ''} "
                f"(data.features and data.label name its columns)"
            )
        first = 0
        wanted = sorted(present & {label, *itertools.chain.from_iterable(sources.values())})
        for batch in file.iter_batches(batch_size=CHUNK_ROWS, columns=wanted):
            n = batch.num_rows
            columns = {}
            for feat in data_spec.features:
                names, size = sources[feat.name], feat.size
                if len(names) == 1 and names[0] == feat.name and feat.shape:
                    values = batch.column(feat.name)
                    try:
                        columns[feat.name] = np.asarray(
                            values.flatten().to_numpy(zero_copy_only=False), dtype=np.float64
                        ).reshape(n, size)
                    except (AttributeError, TypeError, ValueError):
                        sizes = [len(v) if isinstance(v, list) else 0 for v in values.to_pylist()]
                        i = next(k for k, s in enumerate(sizes) if s != size)
                        raise BadData(
                            f"{piece.url}, record {first + i + 1}, field '{feat.name}': "
                            f"{sizes[i]} values, expected {size}"
                        ) from None
                else:
                    columns[feat.name] = np.column_stack([_numbers(piece.url, batch, c, first) for c in names])
            yield _records(piece.url, data_spec, columns, _numbers(piece.url, batch, label, first), first)
            first += n


def _numbers(url: str, batch, column: str, first: int) -> np.ndarray:
    values = batch.column(column)
    if values.null_count:
        i = next(k for k, v in enumerate(values.is_null().to_pylist()) if v)
        raise BadData(f"{url}, record {first + i + 1}, field '{column}': no value (null)")
    try:
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    except (TypeError, ValueError):
        i, value = next((k, v) for k, v in enumerate(values.to_pylist()) if not isinstance(v, (int, float)))
        raise BadData(f"{url}, record {first + i + 1}, field '{column}': {value!r} is not a number") from None


# TFRecord files of tf.train.Example ---------------------------------------------------------------------


def _tfrecord(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """tf.train.Example records (a float_list per feature, an int64_list label), each record's length and
    data checked against their CRC-32C as TensorFlow writes them, parsed a chunk at a time by TensorFlow
    (already imported by the writer process)."""
    import tensorflow as tf

    label = data_spec.label.name
    schema = {f.name: tf.io.FixedLenFeature([f.size], tf.float32) for f in data_spec.features}
    schema[label] = tf.io.FixedLenFeature([], tf.int64)
    with fsspec.open(piece.url, "rb") as f:
        first = 0
        while records := _framed_records(f, piece.url, first):
            try:
                parsed = {k: v.numpy() for k, v in tf.io.parse_example(records, schema).items()}
            except tf.errors.InvalidArgumentError:
                for i, record in enumerate(records):
                    try:
                        tf.io.parse_example([record], schema)
                    except tf.errors.InvalidArgumentError as exc:
                        why = re.sub(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$", "", exc.message)
                        why = why.removeprefix("Name: <unknown>, ")
                        field = re.search(r"(?:Key|Feature): (\w+)", why)
                        where = f", field '{field[1]}'" if field else ""
                        raise BadData(f"{piece.url}, record {first + i + 1}{where}: {why}") from None
                raise
            labels = parsed.pop(label).astype(np.float64)
            yield _records(piece.url, data_spec, {k: v.astype(np.float64) for k, v in parsed.items()}, labels, first)
            first += len(records)


def _framed_records(f, url: str, first: int) -> list[bytes]:
    """Up to CHUNK_ROWS records of a TFRecord file: length (uint64), its masked CRC-32C, data, its masked
    CRC-32C; a cut or damaged record raises BadData."""
    import google_crc32c

    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    records: list[bytes] = []
    while len(records) < CHUNK_ROWS and (header := f.read(12)):
        where = f"{url}, record {first + len(records) + 1}"
        length, length_crc = struct.unpack("<QI", header) if len(header) == 12 else (None, None)
        if length is None or masked(header[:8]) != length_crc:
            raise BadData(
                f"{where}: its length is {'cut short' if length is None else 'damaged (CRC mismatch)'}: "
                "not a complete TFRecord file"
            )
        data = f.read(length + 4)
        if len(data) < length + 4:
            raise BadData(f"{where}: cut short ({len(data)} of {length + 4} bytes): not a complete TFRecord file")
        if masked(data[:length]) != struct.unpack("<I", data[length:])[0]:
            raise BadData(f"{where}: its data is damaged (CRC mismatch)")
        records.append(data[:length])
    return records


READERS = {"csv": _csv, "jsonl": _jsonl, "npz": _npz, "parquet": _parquet, "tfrecord": _tfrecord}
