"""Input readers (CSV, JSON lines, NPZ, Parquet, TFRecord of tf.train.Example): the rows of the run's input as
chunks of bounded size, from local paths or any fsspec URL.

The input is cut into pieces (a file, or a byte range of a large CSV or JSON-lines file: the lines that start
in it) whatever the number of processes reading it, so the same input always gives the same pieces, chunks
and rows in the same order.

Whatever the format, a row's fields become: a numeric feature's float32 values, NaN where missing (an empty CSV
cell or one of MISSING_WORDS, null, NaN); a categorical feature's one UTF-8 value (a string, or an integer as its
decimal string; missing: b""); a categorical_list feature's values (in CSV one cell split by its separator;
empty items dropped; missing: none); the label as its task stores it (label_storage). A row that does not fit
the data spec raises BadData naming the file, the line (or record), the field and the fix."""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import math
import re
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfdist.contract.data_records import LabelStorage
from tfdist.spec import Categorical, DataSpec, Feature, Label, NumericFeature, label_value
from tfdist.trainer import statistics

PIECE_BYTES = 64 << 20
"""A CSV or JSON-lines file larger than this is read as several pieces."""
BLOCK_BYTES = 4 << 20
"""Text read at a time: a chunk holds the complete lines of one block."""
CHUNK_ROWS = 16384
"""Rows per chunk of the other formats."""
LINE_FORMATS = ("csv", "jsonl")
MISSING_WORDS = ("", "NA", "N/A", "NaN", "nan", "null", "NULL")
"""A numeric CSV cell (or an int64 categorical one) holding one of these is missing."""
BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "y": True, "on": True}
BOOLEAN_WORDS |= {"0": False, "false": False, "no": False, "n": False, "off": False}
"""A binary label's values (any case) when data.label.positive is a boolean or not given."""
NO_LABEL = "no value (every row needs its label)"


class BadData(Exception):
    """A row of the input that does not fit the data spec (the message names file, row, field and the fix)."""


@dataclass(frozen=True)
class Piece:
    url: str
    start: int
    end: int
    """Byte range [start, end) whose lines this piece reads (line formats); the whole file otherwise."""


@dataclass(frozen=True)
class Where:
    """A row of the input, as a message names it: its line (by the byte offset it starts at; the line number is
    counted only when shown) or its record."""

    url: str
    offset: int | None = None
    record: int = 0

    def __str__(self) -> str:
        if self.offset is None:
            return f"{self.url}, record {self.record}"
        return f"{self.url}, line {_line_number(self.url, self.offset)}"


@dataclass(frozen=True)
class Values:
    """A categorical feature's values in a chunk: row i's are ``flat[splits[i]:splits[i+1]]`` (``splits`` None:
    one value per row, ``flat[i]``)."""

    flat: list[bytes]
    splits: np.ndarray | None = None

    @functools.cached_property
    def digests(self) -> dict[bytes, bytes]:
        """Each distinct value's digest (statistics.digests), once for the split and the sketch."""
        return statistics.digests(self.flat)

    def missing(self) -> int:
        """Rows without a value (b"", or an empty list)."""
        return self.flat.count(b"") if self.splits is None else int((np.diff(self.splits) == 0).sum())


Negative = tuple[str, Where] | None
"""A binary label's negative value seen, and its first row (None: none seen)."""


@dataclass
class Chunk:
    numeric: dict[str, np.ndarray]
    """float32 [rows, size] per numeric feature; NaN: missing."""
    categorical: dict[str, Values]
    labels: Any
    """By label_storage: int64 [rows] class indices ('index') or 0/1 ('binary'), float32 [rows] ('value'), or a
    list of class names as UTF-8 ('name')."""
    negative: Negative = None
    """binary with a named positive: the negative value seen, and its first row."""

    @property
    def rows(self) -> int:
        return len(self.labels)


def label_storage(label: Label) -> LabelStorage:
    """How the label is held (chunks, shards): 'index' (multiclass with num_classes or classes), 'name' (multiclass
    learning its classes), 'binary' (0 or 1), 'value' (regression)."""
    if label.task != "multiclass":
        return "value" if label.task == "regression" else "binary"
    return "index" if label.class_names else "name"


def _numeric_label(label: Label) -> bool:
    """Whether the label is read as a number: a regression target, or a class index (num_classes)."""
    return label.task == "regression" or (
        label.task == "multiclass" and label.classes is None and label.num_classes is not None
    )


def binary_classes(label: Label, negative: str | None) -> list[str | None]:
    """A binary label's [negative, positive] by name: 'false' and 'true' (swapped for positive: false), or the
    negative value seen (None if no row had one) and the positive named."""
    if label.positive is None or isinstance(label.positive, bool):
        return ["true", "false"] if label.positive is False else ["false", "true"]
    return [negative, label_value(label.positive)]


def same_negative(first: Negative, then: Negative, label: str) -> Negative:
    """The negative value of two parts of the input in order; two different ones are a binary label with a third
    value (BadData naming both and where each was first seen)."""
    if first and then and first[0] != then[0]:
        raise BadData(_third_value(label, first, then))
    return first or then


def _third_value(label: str, first: tuple[str, Where], then: tuple[str, Where]) -> str:
    return (
        f"{then[1]}, field '{label}': a binary label with a third value: {then[0]!r} here and {first[0]!r} "
        f"first at {first[1]}, besides the positive one. Fix the rows, or map them to one negative value"
    )


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
    """Flat columns of a feature (CSV, Parquet): a numeric vector's ``<name>_0 .. <name>_<size-1>``, else its
    name."""
    if isinstance(feature, NumericFeature) and feature.shape:
        return [f"{feature.name}_{i}" for i in range(feature.size)]
    return [feature.name]


# What a row's fields become, whatever the format ------------------------------------------------------------

Rows = Callable[[int], Where]
"""A chunk's row i → where it is in the input."""
NumericColumns = np.ndarray | list[tuple[str, pa.Array]]
"""A numeric feature as read: float values [rows, size] (NaN: missing), or arrow columns by name: one per element,
or one of lists."""


def _chunk(data_spec: DataSpec, columns: dict[str, Any], where: Rows) -> Chunk:
    """The chunk from each field's column as read (numeric features: NumericColumns; the others an arrow array)."""
    labels, negative = _labels(data_spec.label, columns[data_spec.label.name], where)
    return Chunk(
        {f.name: _numeric(f, columns[f.name], where) for f in data_spec.numeric_features},
        {f.name: _categorical(f, columns[f.name], where) for f in data_spec.categorical_features},
        labels,
        negative,
    )


def _numeric(feature: NumericFeature, columns: NumericColumns, where: Rows) -> np.ndarray:
    """float32 [rows, size], NaN where missing (one NaN's bytes, whatever the input's); a value that is infinite
    (or beyond float32's range) is a bad row."""
    if isinstance(columns, np.ndarray):
        values = columns.reshape(len(columns), feature.size)
    elif len(columns) == 1 and feature.shape:
        values = _number_lists(*columns[0], feature.size, where)
    else:
        values = np.column_stack([_numbers(column, array, where) for column, array in columns])
    out = values.astype(np.float32)
    if np.isinf(out).any():
        i, j = map(int, np.argwhere(np.isinf(out))[0])
        column = feature.name if out.shape[1] == 1 else f"{feature.name}[{j}]"
        raise BadData(f"{where(i)}, field '{column}': {values[i, j]} is not a finite number (of float32's range)")
    missing = np.isnan(out)
    if missing.any():
        out[missing] = np.nan
    return out


def _is_list(type_: pa.DataType) -> bool:
    return pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_)


def _numbers(column: str, array: pa.Array, where: Rows) -> np.ndarray:
    """float64 [rows], NaN where null; a value that is not a number is a bad row."""
    try:
        if not _is_list(array.type):
            return array.cast(pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    for i, value in enumerate(array.to_pylist()):
        try:
            float(value) if value is not None else None
        except (TypeError, ValueError):
            raise BadData(f"{where(i)}, field '{column}': {value!r} is not a number") from None
    raise BadData(f"{where(0)}, field '{column}': a column of {array.type}, not of numbers")


def _number_lists(column: str, array: pa.Array, size: int, where: Rows) -> np.ndarray:
    """float64 [rows, size] from a column of (nested) lists: a null list is missing; a list of another size is a
    bad row."""
    rows = len(array)
    if pa.types.is_null(array.type):
        return np.full((rows, size), np.nan)
    row_of, flat = np.arange(rows), array
    while _is_list(flat.type):
        row_of, flat = row_of[pc.list_parent_indices(flat).to_numpy()], pc.list_flatten(flat)
    counts = np.bincount(row_of, minlength=rows)
    bad = (counts != size) & (counts > 0) | (counts == 0) & array.is_valid().to_numpy(zero_copy_only=False)
    if bad.any():
        i = int(np.argmax(bad))
        value = array[i].as_py()
        why = f"{counts[i]} values, expected {size}" if isinstance(value, list) else f"{value!r} is not {size} numbers"
        raise BadData(f"{where(i)}, field '{column}': {why}")
    values = np.full((rows, size), np.nan)
    values[counts == size] = _numbers(column, flat, lambda j: where(int(row_of[j]))).reshape(-1, size)
    return values


def canonical(value: Any) -> str | None:
    """A scalar value as the text it stands for (None: missing): an integer (or an integral float) its decimal
    string, a boolean 'true'/'false', bytes as UTF-8; ValueError for a list or an object."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ValueError(f"{value!r} is not UTF-8 text") from None
    if isinstance(value, (list, dict)):
        raise ValueError(f"{value!r} is a {type(value).__name__}, not one value")
    return label_value(value) if isinstance(value, (bool, int, str)) else str(value)


def _tokens(feature: Categorical, array: pa.Array, where: Rows) -> pa.Array:
    """The values as UTF-8 strings (null: missing): a string, or an integer as its decimal string (dtype int64: an
    integer only); a value of another kind, or longer than max_value_length bytes, is a bad row."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    kind = array.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        try:
            array, kind = array.cast(pa.string()), pa.string()
        except pa.ArrowInvalid:  # not UTF-8: the value is named below
            pass
    if pa.types.is_integer(kind) or pa.types.is_null(kind) or (pa.types.is_string(kind) and feature.dtype == "string"):
        tokens = array.cast(pa.string())
    else:
        texts = []
        for i, value in enumerate(array.to_pylist()):
            try:
                texts.append(_token(value, feature.dtype))
            except ValueError as exc:
                raise BadData(f"{where(i)}, field '{feature.name}': {exc}") from None
        tokens = pa.array(texts, pa.string())
    lengths = pc.binary_length(tokens).fill_null(0).to_numpy()
    if len(lengths) and lengths.max() > feature.max_value_length:
        i = int(np.argmax(lengths > feature.max_value_length))
        raise BadData(
            f"{where(i)}, field '{feature.name}': a value of {lengths[i]} bytes ({tokens[i].as_py()[:40]!r}…), "
            f"longer than max_value_length {feature.max_value_length}: raise data.features[].max_value_length, "
            "or shorten the value"
        )
    return tokens


def _token(value: Any, dtype: str) -> str | None:
    text = canonical(value)
    if text and dtype == "int64":
        if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"{value!r} is not an integer (the feature's dtype is int64; use dtype: string)")
        return str(int(text))
    if isinstance(value, float) and text is not None and dtype == "string":
        raise ValueError(f"{value!r} is a number, not a string or an integer (integer ids: dtype int64)")
    return text


def _categorical(feature: Categorical, array: pa.Array, where: Rows) -> Values:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if feature.kind == "categorical":
        if _is_list(array.type) and array.null_count < len(array):
            i = int(np.argmax(array.is_valid().to_numpy(zero_copy_only=False)))
            raise BadData(
                f"{where(i)}, field '{feature.name}': {array[i].as_py()!r} is a list, not one value (kind: "
                "categorical_list takes a list)"
            )
        return Values(_bytes(_tokens(feature, array, where).fill_null("")))
    if pa.types.is_null(array.type):
        return Values([], np.zeros(len(array) + 1, np.int64))
    if not _is_list(array.type):
        i = int(np.argmax(array.is_valid().to_numpy(zero_copy_only=False)))
        raise BadData(f"{where(i)}, field '{feature.name}': {_not_a_list(array[i].as_py())}")
    row_of = pc.list_parent_indices(array).to_numpy()
    flat = _tokens(feature, pc.list_flatten(array), lambda j: where(int(row_of[j])))
    kept = pc.fill_null(pc.greater(pc.binary_length(flat), 0), False)
    row_of, flat = row_of[kept.to_numpy(zero_copy_only=False)], flat.filter(kept)
    counts = np.bincount(row_of, minlength=len(array))
    if len(counts) and counts.max() > feature.max_values:
        i = int(np.argmax(counts > feature.max_values))
        raise BadData(
            f"{where(i)}, field '{feature.name}': {counts[i]} values, more than max_values {feature.max_values}: "
            "raise data.features[].max_values, or shorten the list"
        )
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Values(_bytes(flat), splits)


def _bytes(tokens: pa.Array) -> list[bytes]:
    return tokens.cast(pa.binary()).to_numpy(zero_copy_only=False).tolist()


def _not_a_list(value: Any) -> str:
    return f"{value!r} is not a list (kind: categorical_list; in CSV one cell, its values split by its separator)"


def _labels(label: Label, array: pa.Array, where: Rows) -> tuple[Any, Negative]:
    """The labels as label_storage holds them, and the negative value seen (binary with a named positive)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    storage, name = label_storage(label), label.name
    if _numeric_label(label):
        values = _numbers(name, array, where)
        if np.isnan(values).any():
            raise BadData(f"{where(int(np.argmax(np.isnan(values))))}, field '{name}': {NO_LABEL}")
        if storage == "value":
            if np.isinf(values).any():
                i = int(np.argmax(np.isinf(values)))
                raise BadData(f"{where(i)}, field '{name}': {values[i]} is not a finite number (a regression target)")
            return values.astype(np.float32), None
        n = label.num_classes
        bad = (values < 0) | (values >= n) | (values != np.floor(values))
        if bad.any():
            i = int(np.argmax(bad))
            raise BadData(
                f"{where(i)}, field '{name}': {values[i]:g} is not a class in [0, {n}) (data.label.num_classes)"
            )
        return values.astype(np.int64), None
    codes, names = _label_names(name, array, where)
    if storage == "name":
        return np.array([n.encode() for n in names], dtype=object)[codes].tolist(), None
    if storage == "index":
        index = {c: i for i, c in enumerate(label.classes or ())}
        if unknown := [k for k, n in enumerate(names) if n not in index]:
            i = int(_first_rows(codes, len(names))[unknown].min())
            classes = ", ".join(map(repr, list(index)[:10])) + (", …" if len(index) > 10 else "")
            raise BadData(
                f"{where(i)}, field '{name}': {names[codes[i]]!r} is not one of the classes {classes} "
                "(data.label.classes): add it there, or fix the row"
            )
        return np.array([index[n] for n in names], np.int64)[codes], None
    return _binary(label, codes, names, _first_rows(codes, len(names)), where)


def _first_rows(codes: np.ndarray, count: int) -> np.ndarray:
    """Per code 0 .. count-1, the first row that has it."""
    first = np.full(count, len(codes))
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first


def _label_names(name: str, array: pa.Array, where: Rows) -> tuple[np.ndarray, list[str]]:
    """(per row the index of its label in the names, the distinct labels as text); a missing label is a bad row."""
    encoded = array.dictionary_encode() if not pa.types.is_dictionary(array.type) else array
    names = []
    for k, value in enumerate(encoded.dictionary.to_pylist()):
        try:
            names.append(canonical(value))
        except ValueError as exc:
            i = int(np.argmax(encoded.indices.to_numpy(zero_copy_only=False) == k))
            raise BadData(f"{where(i)}, field '{name}': {exc}") from None
    codes = encoded.indices.fill_null(-1).to_numpy()
    missing = (codes < 0) | np.isin(codes, [k for k, n in enumerate(names) if not n])
    if missing.any():
        raise BadData(f"{where(int(np.argmax(missing)))}, field '{name}': {NO_LABEL}")
    return codes, [n or "" for n in names]


def _binary(
    label: Label, codes: np.ndarray, names: list[str], first_row: np.ndarray, where: Rows
) -> tuple[np.ndarray, Negative]:
    if label.positive is None or isinstance(label.positive, bool):
        is_positive = []
        for k, n in enumerate(names):
            if n.lower() not in BOOLEAN_WORDS:
                raise BadData(
                    f"{where(int(first_row[k]))}, field '{label.name}': {n!r} is not a yes/no value: a binary label "
                    "takes 1/0, true/false, yes/no, y/n or on/off (any case); for two other values name the positive "
                    "one (data.label.positive)"
                )
            is_positive.append(BOOLEAN_WORDS[n.lower()] == (label.positive is not False))
        return np.array(is_positive, np.int64)[codes], None
    positive = label_value(label.positive)
    negatives = sorted((int(first_row[k]), n) for k, n in enumerate(names) if n != positive)
    if len(negatives) > 1:
        (i, first), (j, then) = negatives[:2]
        raise BadData(_third_value(label.name, (first, where(i)), (then, where(j))))
    negative = (negatives[0][1], where(negatives[0][0])) if negatives else None
    return np.array([n == positive for n in names], np.int64)[codes], negative


# CSV and JSON lines -------------------------------------------------------------------------------------


def _line_blocks(f, piece: Piece) -> Iterator[tuple[list[int], list[bytes]]]:
    """(the byte offset of each line, the lines) of each block of the non-blank lines that start in the piece's
    range."""
    if piece.start:
        f.seek(piece.start - 1)
        f.readline()  # through the end of the line in progress: it belongs to the piece before
    offset, pending = f.tell(), b""
    while offset < piece.end:
        block = f.read(BLOCK_BYTES)
        lines = (pending + block).split(b"\n")
        pending = lines.pop() if block else b""
        starts, taken = [], []
        for line in lines:
            if offset >= piece.end:
                break
            if line.strip():
                starts.append(offset)
                taken.append(line.rstrip(b"\r"))
            offset += len(line) + 1
        if taken:
            yield starts, taken
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
        for starts, lines in _line_blocks(f, Piece(piece.url, piece.start or len(header), piece.end)):
            yield parse(header, lines, lambda i, starts=starts: Where(piece.url, starts[i]))


def _csv(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """A header row, then a column per scalar feature (a numeric vector: ``<name>_0`` ..) and for the label."""
    import pyarrow.csv as pa_csv

    types = _csv_types(data_spec)

    def parse(header: bytes, lines: list[bytes], where: Rows) -> Chunk:
        names = next(csv.reader([header.decode().rstrip("\r\n")]))
        if missing := [c for c in types if c not in names]:
            raise BadData(
                f"{piece.url}: missing columns {missing[:5]}{'…' if len(missing) > 5 else ''} "
                f"(data.features and data.label name the CSV header's columns)"
            )
        text = b"\n".join(lines)
        try:
            table = pa_csv.read_csv(
                io.BytesIO(text),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=len(text) + 1),
                convert_options=pa_csv.ConvertOptions(
                    include_columns=list(types),
                    column_types=types,
                    null_values=list(MISSING_WORDS),
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        except pa.ArrowInvalid as exc:
            _find_bad_row(lines, names, types, where)
            raise BadData(f"{piece.url}: {exc}") from None
        columns: dict[str, Any] = {c: table.column(c).combine_chunks() for c in types}
        for f in data_spec.features:
            if isinstance(f, NumericFeature):
                columns[f.name] = [(c, columns[c]) for c in feature_columns(f)]
            elif f.kind == "categorical_list":
                columns[f.name] = pc.split_pattern(columns[f.name], f.separator)
        return _chunk(data_spec, columns, where)

    def _find_bad_row(lines: list[bytes], names: list[str], types: dict[str, pa.DataType], where: Rows) -> None:
        for i, line in enumerate(lines):
            try:
                fields = next(csv.reader([line.decode()]))
            except UnicodeDecodeError:
                raise BadData(f"{where(i)}: not UTF-8 text") from None
            if len(fields) != len(names):
                raise BadData(f"{where(i)}: {len(fields)} fields, the header has {len(names)}")
            for column, kind in types.items():
                value = fields[names.index(column)]
                if value in MISSING_WORDS or pa.types.is_string(kind):
                    continue
                try:
                    int(value) if pa.types.is_integer(kind) else float(value)
                except ValueError:
                    what = "an integer (the feature's dtype is int64)" if pa.types.is_integer(kind) else "a number"
                    raise BadData(f"{where(i)}, field '{column}': {value!r} is not {what}") from None

    return _read_lines(piece, data_spec, parse)


def _csv_types(data_spec: DataSpec) -> dict[str, pa.DataType]:
    """Each column's type as read: numbers, integers (int64 categorical) or text."""
    types: dict[str, pa.DataType] = {}
    for f in data_spec.features:
        for column in feature_columns(f):
            if isinstance(f, NumericFeature):
                types[column] = pa.float64()
            else:
                types[column] = pa.int64() if f.dtype == "int64" and f.kind == "categorical" else pa.string()
    return {data_spec.label.name: pa.float64() if _numeric_label(data_spec.label) else pa.string(), **types}


def _jsonl(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """One JSON object per line: a numeric feature a number or a (nested) list of its shape's size, a categorical
    one a string or an integer, a categorical_list a list of them, the label as its task takes it; a field that
    is absent or null is missing."""
    label = data_spec.label
    fields = [(label.name, False, _number if _numeric_label(label) else canonical)]
    for f in data_spec.features:
        if isinstance(f, NumericFeature):
            fields.append((f.name, bool(f.shape), _number))
        else:
            fields.append((f.name, f.kind == "categorical_list", functools.partial(_token, dtype=f.dtype)))

    def parse(_: bytes, lines: list[bytes], where: Rows) -> Chunk:
        try:
            rows = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            for i, line in enumerate(lines):
                try:
                    json.loads(line)
                except ValueError as exc:
                    raise BadData(f"{where(i)}: not a JSON object ({exc})") from None
            raise
        if not all(isinstance(row, dict) for row in rows):
            i = next(k for k, row in enumerate(rows) if not isinstance(row, dict))
            raise BadData(f"{where(i)}: {rows[i]!r} is not a JSON object")
        columns: dict[str, Any] = {}
        for name, listed, convert in fields:
            columns[name] = _json_column([row.get(name) for row in rows], name, listed, convert, where)
        for f in data_spec.numeric_features:
            columns[f.name] = [(f.name, columns[f.name])]
        return _chunk(data_spec, columns, where)

    return _read_lines(piece, data_spec, parse)


def _json_column(values: list, name: str, listed: bool, convert: Callable[[Any], Any], where: Rows) -> pa.Array:
    """A JSON field's values as an arrow array. Values of mixed kinds (7 and "7") that arrow cannot hold together
    are converted one by one as the field takes them (``convert``, of each list item if ``listed``), so that the
    bad one is named."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    converted = []
    for i, value in enumerate(values):
        try:
            if listed and value is not None and not isinstance(value, list):
                raise ValueError(_not_a_list(value))
            converted.append(_converted(value, convert) if listed else convert(value))
        except (TypeError, ValueError) as exc:
            raise BadData(f"{where(i)}, field '{name}': {exc}") from None
    return pa.array(converted)


def _converted(value: Any, convert: Callable[[Any], Any]) -> Any:
    return [_converted(v, convert) for v in value] if isinstance(value, list) else convert(value)


def _number(value: Any) -> float | None:
    if isinstance(value, (list, dict)):
        raise ValueError(f"{value!r} is a {type(value).__name__}, not one value")
    try:
        return None if value is None else float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None


# NPZ and Parquet ----------------------------------------------------------------------------------------


def _records(url: str, first: int) -> Rows:
    return lambda i: Where(url, record=first + i + 1)


def _npz(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """One array per feature and one for the label, a row per record (numeric features only). A file is read whole
    (its arrays are compressed members of a zip), so memory grows with the largest file, not with the input."""
    label = data_spec.label.name
    with fsspec.open(piece.url, "rb") as f, np.load(io.BytesIO(f.read())) as arrays:
        names = [label, *(f.name for f in data_spec.features)]
        if missing := [n for n in names if n not in arrays]:
            raise BadData(f"{piece.url}: missing arrays {missing} (data.features and data.label name its arrays)")
        labels = arrays[label]
        columns = {}
        for f in data_spec.numeric_features:
            values = arrays[f.name]
            if len(values) != len(labels) or values[0:1].size not in (0, f.size):
                raise BadData(
                    f"{piece.url}: array '{f.name}' has shape {values.shape}, expected "
                    f"({len(labels)}, {', '.join(map(str, f.shape))}) (data.features[].shape)"
                )
            columns[f.name] = values.reshape(len(labels), -1)
    for first in range(0, len(labels), CHUNK_ROWS):
        rows = slice(first, first + CHUNK_ROWS)
        chunk_columns = {n: v[rows] for n, v in columns.items()} | {label: pa.array(labels[rows])}
        yield _chunk(data_spec, chunk_columns, _records(piece.url, first))


def _parquet(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """A column per scalar feature and for the label; a numeric vector is one list column named as the feature or
    a column per element (``<name>_0`` ..); a categorical_list a list column. Read by row batches."""
    import pyarrow.parquet as pq

    label = data_spec.label.name
    with fsspec.open(piece.url, "rb") as f:
        file = pq.ParquetFile(f)
        present = set(file.schema_arrow.names)
        sources = {
            feat.name: [feat.name] if feat.name in present else feature_columns(feat) for feat in data_spec.features
        }
        wanted = [label, *(c for cols in sources.values() for c in cols)]
        if missing := [c for c in wanted if c not in present]:
            raise BadData(
                f"{piece.url}: missing columns {missing[:5]}{'…' if len(missing) > 5 else ''} "
                f"(data.features and data.label name its columns)"
            )
        first = 0
        for batch in file.iter_batches(batch_size=CHUNK_ROWS, columns=sorted(set(wanted))):
            columns: dict[str, Any] = {label: batch.column(label)}
            for feat in data_spec.features:
                if isinstance(feat, NumericFeature):
                    columns[feat.name] = [(c, batch.column(c)) for c in sources[feat.name]]
                else:
                    columns[feat.name] = batch.column(feat.name)
            yield _chunk(data_spec, columns, _records(piece.url, first))
            first += batch.num_rows


# TFRecord files of tf.train.Example ---------------------------------------------------------------------


def _tfrecord(piece: Piece, data_spec: DataSpec) -> Iterator[Chunk]:
    """tf.train.Example records: a float_list per numeric feature (absent: missing), a bytes_list or int64_list per
    categorical one, the label's of the kind its values take (int64_list, float_list or bytes_list, as the first
    record that has it says); each record's length and data checked against their CRC-32C as TensorFlow writes
    them, parsed a chunk at a time by TensorFlow (already imported by the writer process)."""
    import tensorflow as tf

    label = data_spec.label.name
    with fsspec.open(piece.url, "rb") as f:
        first = 0
        while records := _framed_records(f, piece.url, first):
            schema = _tfrecord_schema(tf, data_spec, records)
            try:
                parsed = tf.io.parse_example(records, schema)
            except tf.errors.InvalidArgumentError:
                _find_bad_record(tf, records, schema, piece.url, first)
                raise
            where = _records(piece.url, first)
            columns: dict[str, Any] = {label: pa.array(parsed[label].numpy())}
            for feat in data_spec.features:
                if isinstance(feat, NumericFeature):
                    columns[feat.name] = parsed[feat.name].numpy()
                else:
                    columns[feat.name] = _tfrecord_values(feat, parsed[feat.name], len(records), where)
            yield _chunk(data_spec, columns, where)
            first += len(records)


def _tfrecord_schema(tf, data_spec: DataSpec, records: list[bytes]) -> dict[str, Any]:
    kinds = {"bytes_list": tf.string, "int64_list": tf.int64, "float_list": tf.float32}
    found: dict[str, Any] = {}
    wanted = [data_spec.label.name, *(f.name for f in data_spec.categorical_features)]
    for record in records:
        features = tf.train.Example.FromString(record).features.feature
        found |= {n: kinds[features[n].WhichOneof("kind")] for n in wanted if n not in found and n in features}
        if len(found) == len(wanted):
            break
    schema = {
        f.name: tf.io.FixedLenFeature([f.size], tf.float32, default_value=[math.nan] * f.size)
        for f in data_spec.numeric_features
    }
    schema |= {f.name: tf.io.VarLenFeature(found.get(f.name, tf.string)) for f in data_spec.categorical_features}
    schema[data_spec.label.name] = tf.io.FixedLenFeature([], found.get(data_spec.label.name, tf.int64))
    return schema


def _find_bad_record(tf, records: list[bytes], schema: dict, url: str, first: int) -> None:
    for i, record in enumerate(records):
        try:
            tf.io.parse_example([record], schema)
        except tf.errors.InvalidArgumentError as exc:
            why = re.sub(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$", "", exc.message)
            why = why.removeprefix("Name: <unknown>, ")
            found = re.search(r"(?:Key|Feature): (\w+)", why)
            where = f", field '{found[1]}'" if found else ""
            raise BadData(f"{url}, record {first + i + 1}{where}: {why}") from None


def _tfrecord_values(feature: Categorical, sparse, rows: int, where: Rows) -> pa.Array:
    """A categorical feature's values from its parsed (sparse) lists: a list array, or for kind categorical one value
    per row (null: none)."""
    values = pa.array(sparse.values.numpy())
    counts = np.bincount(sparse.indices.numpy()[:, 0], minlength=rows)
    if feature.kind == "categorical_list":
        return pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32()), values)
    if len(counts) and counts.max() > 1:
        i = int(np.argmax(counts > 1))
        raise BadData(
            f"{where(i)}, field '{feature.name}': {counts[i]} values; a categorical feature takes one value per row "
            "(kind: categorical_list takes a list)"
        )
    scalar = np.full(rows, None, dtype=object)
    scalar[counts == 1] = values.to_numpy(zero_copy_only=False)
    return pa.array(scalar, values.type)


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
