"""The typed records' base (contract/records.py): a record reads back as written, one without a version reads as
version 1, and a malformed or newer one raises an error naming the file and the field."""

from __future__ import annotations

import json

import pytest

from tfdist.contract.records import (
    MalformedRecord,
    NewerRecord,
    Record,
    read_record,
    read_record_if_exists,
    write_record,
)


class Point(Record):
    step: int
    loss: float | None = None


def test_a_record_reads_back_as_written_with_its_schema_version(tmp_path):
    path = str(tmp_path / "point.json")
    write_record(path, Point(step=3, loss=0.5))
    assert json.loads(open(path).read()) == {"step": 3, "loss": 0.5, "schema_version": 1}
    assert read_record(path, Point) == Point(step=3, loss=0.5)
    assert read_record_if_exists(str(tmp_path / "none.json"), Point) is None


def test_a_record_written_before_versions_reads_as_version_1(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"step": 7}))
    assert read_record(str(tmp_path / "old.json"), Point).schema_version == 1


@pytest.mark.parametrize(
    "content, field, words",
    [
        ({"step": "seven"}, "step", "valid integer"),
        ({"stepp": 7}, "step", "Field required"),
        ({"step": 7, "renamed": 1}, "renamed", "Extra inputs"),
        ([7], "", "JSON object"),
    ],
)
def test_a_malformed_record_names_its_file_and_field(tmp_path, content, field, words):
    path = str(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text(json.dumps(content))
    with pytest.raises(MalformedRecord) as raised:
        read_record(path, Point)
    assert (raised.value.source, raised.value.field) == (path, field)
    assert path in str(raised.value) and words in str(raised.value)


def test_a_cut_record_is_malformed_not_a_json_traceback(tmp_path):
    (tmp_path / "cut.json").write_text('{"step": 3')
    with pytest.raises(MalformedRecord, match=r"cut\.json: not JSON"):
        read_record(str(tmp_path / "cut.json"), Point)


def test_a_newer_record_asks_for_an_upgrade(tmp_path):
    path = str(tmp_path / "new.json")
    (tmp_path / "new.json").write_text(json.dumps({"step": 7, "schema_version": 2, "new_field": 1}))
    with pytest.raises(NewerRecord, match=r"new.json: schema_version: Point version 2 .* upgrade tfdist") as raised:
        read_record(path, Point)
    assert raised.value.field == "schema_version"
