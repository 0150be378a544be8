"""Run-scoped JSON records and checksums (tfdist.infra.jsonfiles), on real local files."""

from __future__ import annotations

import hashlib
import os

import pytest

from tfdist.infra.jsonfiles import digest_json, read_json, read_json_if_exists, sha256_file, write_json_atomic


def test_a_record_is_written_whole_indented_with_sorted_keys_and_reads_back(tmp_path):
    path = str(tmp_path / "run" / "train" / "result.json")
    write_json_atomic(path, {"b": [1, 2], "a": None})
    with open(path, encoding="utf-8") as f:
        assert f.read() == '{\n  "a": null,\n  "b": [\n    1,\n    2\n  ]\n}'
    assert read_json(path) == {"a": None, "b": [1, 2]}
    write_json_atomic(path, {"a": 1})
    assert read_json(path) == {"a": 1} and os.listdir(tmp_path / "run" / "train") == ["result.json"]


def test_a_missing_record_is_none_only_where_asked(tmp_path):
    missing = str(tmp_path / "nothing.json")
    assert read_json_if_exists(missing) is None
    with pytest.raises(FileNotFoundError):
        read_json(missing)


def test_the_digest_is_of_the_compact_sorted_json_whatever_the_key_order():
    expected = hashlib.sha256(b'{"a":1,"b":[1,"x"]}').hexdigest()
    assert digest_json({"b": [1, "x"], "a": 1}) == digest_json({"a": 1, "b": [1, "x"]}) == expected
    assert digest_json({"a": 1}) != digest_json({"a": 1.5})


def test_a_files_checksum_covers_every_block(tmp_path):
    data = os.urandom(3 << 20 | 7)  # three 1 MiB blocks and a few bytes
    (path := tmp_path / "shard").write_bytes(data)
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
    (empty := tmp_path / "empty").write_bytes(b"")
    assert sha256_file(str(empty)) == hashlib.sha256(b"").hexdigest()
