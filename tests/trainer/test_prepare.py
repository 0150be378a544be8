"""trainer/prepare.py's pieces, in this process: the input cut into writers' shares, the shards joined from their
parts, and the sizes a categorical feature's counts are kept at (the stage run as the launcher runs it:
test_prepare_at_scale.py, test_prepare_categorical.py, test_prepare_and_models.py)."""

from __future__ import annotations

import hashlib

from tfdist.spec.data import CategoricalFeature
from tfdist.trainer import prepare, statistics
from tfdist.trainer.readers import Piece


def test_each_process_gets_a_contiguous_run_of_pieces_of_about_equal_bytes():
    pieces = [Piece("a", 0, 100), Piece("a", 100, 200), Piece("b", 0, 50), Piece("c", 0, 250), Piece("d", 0, 10)]
    assert prepare.shares(pieces, 2) == [pieces[:3], pieces[3:]]  # 250 bytes, then 260
    assert prepare.shares(pieces, 1) == [pieces]
    assert prepare.shares(pieces[:1], 3) == [[], [pieces[0]], []]  # fewer pieces than processes: some get none
    assert prepare.shares(pieces, 3) == [pieces[:2], pieces[2:3], pieces[3:]]  # by where each piece's middle falls
    assert [p for run in prepare.shares(pieces, 7) for p in run] == pieces  # in input order, each once


def test_a_shard_is_its_writers_parts_in_writer_order_with_its_size_and_digest(tmp_path):
    parts, out = tmp_path / "parts", tmp_path / "out"
    parts.mkdir()
    out.mkdir()
    for writer, content in ((2, b"third"), (0, b"first"), (1, b"second")):
        (tmp_path / prepare.part_path(str(parts), "train", 3, writer)).write_bytes(content)
    (tmp_path / prepare.part_path(str(parts), "eval", 3, 0)).write_bytes(b"not train")
    joined = prepare.join_parts(str(parts), str(out), "train", 3, "train-00003-of-00004.tfrecord")
    content = b"firstsecondthird"
    assert joined == {
        "file": "train-00003-of-00004.tfrecord",
        "bytes": 16,
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert (out / "train-00003-of-00004.tfrecord").read_bytes() == content
    one = prepare.join_parts(str(parts), str(out), "eval", 3, "eval.tfrecord")  # one part: moved
    assert one["bytes"] == 9 and (out / "eval.tfrecord").read_bytes() == b"not train"
    assert sorted(p.name for p in parts.iterdir()) == ["train-00003.00000", "train-00003.00001", "train-00003.00002"]


def test_a_features_value_counts_are_kept_by_its_vocabularys_size():
    vocabulary = CategoricalFeature(name="city", kind="categorical", vocabulary={"max_tokens": 100_000})
    hashed = CategoricalFeature(name="user", kind="categorical", hash_buckets=1000)
    assert prepare.value_capacity(vocabulary) == statistics.capacity(100_000) == 200_000  # twice its tokens
    assert prepare.value_capacity(hashed) == statistics.capacity(0) == statistics.MIN_CAPACITY  # no vocabulary
