"""operators/demo.py's data: the daily digits and table partitions the demo and the tests lay down, and the example
tables. The demo's Airflow run (run_demo, airflow_dags_test) runs in the end-to-end tests."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pandas as pd
import pytest

from tfdist.operators.demo import EXAMPLE_TABLES, example_table, write_digits_partitions, write_table_partitions

END = dt.date(2026, 11, 20)


def test_digits_partitions_are_a_csv_a_day_ending_at_end_each_a_different_85_percent_of_the_digits(tmp_path):
    root = str(tmp_path / "digits")
    written = write_digits_partitions(root, END, 3)
    assert written == [os.path.join(root, day, "digits.csv") for day in ("2026-11-20", "2026-11-19", "2026-11-18")]
    assert sorted(os.listdir(root)) == ["2026-11-18", "2026-11-19", "2026-11-20"]
    assert os.listdir(os.path.join(root, "2026-11-20")) == ["digits.csv"]  # no .tmp left
    tables = [pd.read_csv(path) for path in written]
    for table in tables:
        assert list(table.columns) == [f"pixel_{i}" for i in range(64)] + ["label"]
        assert len(table) == int(0.85 * 1797) and table.dtypes.map(pd.api.types.is_integer_dtype).all()
        assert set(table["label"]) == set(range(10)) and table.iloc[:, :64].to_numpy().max() <= 16
    assert not tables[0].equals(tables[1]) and not tables[1].equals(tables[2])


def test_a_partition_already_there_is_kept_and_only_the_missing_days_are_written(tmp_path):
    root = str(tmp_path)
    (first,) = write_digits_partitions(root, END, 1)
    with open(first) as f:
        kept = f.read()
    assert write_digits_partitions(root, END, 2) == [os.path.join(root, "2026-11-19", "digits.csv")]
    assert write_digits_partitions(root, END, 2) == []
    with open(first) as f:
        assert f.read() == kept


def test_table_partitions_sample_the_rows_by_the_day_in_table_order_with_missing_values_as_empty_cells(tmp_path):
    table = pd.DataFrame(
        {"n": range(20), "colour": ["red", None] * 10, "size": [1.5, np.nan, 3.0, 4.0] * 5}, index=range(100, 120)
    )
    root = str(tmp_path)
    written = write_table_partitions(root, table, END, 2, "t.csv")
    assert written == [os.path.join(root, "2026-11-20", "t.csv"), os.path.join(root, "2026-11-19", "t.csv")]
    with open(written[0]) as f:
        text = f.read()
    assert text.startswith("n,colour,size\n") and "\r" not in text and "rownames" not in text
    rows = [pd.read_csv(path) for path in written]
    for day in rows:
        assert len(day) == 17 and list(day["n"]) == sorted(day["n"])  # int(0.85 × 20), in table order
        expected = table.set_index("n").loc[day["n"]]
        assert list(day["colour"].isna()) == list(expected["colour"].isna())
        assert list(day["size"].fillna(-1)) == list(expected["size"].fillna(-1))
    assert list(rows[0]["n"]) != list(rows[1]["n"])
    again = write_table_partitions(str(tmp_path / "again"), table, END, 1, "t.csv")  # seeded by the day
    assert pd.read_csv(again[0]).equals(rows[0])
    cells = [line.split(",") for line in text.splitlines()[1:]]
    assert "nan" not in text and "None" not in text and all(len(row) == 3 for row in cells)
    assert sum(cell == "" for row in cells for cell in row) == int(rows[0].isna().sum().sum()) > 0  # empty cells


@pytest.mark.parametrize("name", sorted(EXAMPLE_TABLES))
def test_each_example_table_is_a_dataframe_without_r_row_names(name):
    table = example_table(name)
    assert isinstance(table, pd.DataFrame) and len(table) > 300 and "rownames" not in table.columns
    assert any(pd.api.types.is_string_dtype(dtype) for dtype in table.dtypes)  # string columns to encode
    assert table.isna().any().any() == (name != "diamonds")  # and missing values, but in diamonds
