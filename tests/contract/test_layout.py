"""Where a run's artifacts live (tfdist.contract.layout): run keys, pipeline ids, the run's file layout and the
run's record."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.contract.test_train_records import RUN
from tfdist.contract.layout import (
    RUN_KEY_READABLE,
    RunLayout,
    RunMismatch,
    UnsafePipelineId,
    printable,
    record_run,
    run_key,
    run_path,
    runs_root,
)
from tfdist.contract.records import read_record
from tfdist.contract.train_records import RunRecord


def test_the_run_record_is_written_once_and_another_spec_is_refused(tmp_path):
    layout = RunLayout(str(tmp_path))
    record_run(layout, {"model": 1}, RUN)
    record_run(layout, {"model": 1}, RUN.model_copy(update={"run_id": "other"}))  # a second process: no rewrite
    assert read_record(layout.run_file, RunRecord) == RUN
    with pytest.raises(RunMismatch):
        record_run(layout, {"model": 2}, RUN)


def test_a_refused_run_directory_is_named_with_what_to_do_and_its_spec_stays(tmp_path):
    layout = RunLayout(str(tmp_path / "run"))
    record_run(layout, {"model": 1}, RUN)
    with pytest.raises(RunMismatch) as err:
        record_run(layout, {"model": 2}, RUN)
    assert str(err.value) == (
        f"{layout.run_dir} was produced from a different spec (see {layout.spec_file}); "
        "use a new run, or move that directory away to redo this run"
    )
    with open(layout.spec_file) as f:
        assert json.load(f) == {"model": 1}


def test_a_run_key_is_the_readable_run_id_and_a_hash_of_all_of_it():
    assert (
        run_key("manual__2026-11-22") == "manual__2026-11-22-" + hashlib.sha256(b"manual__2026-11-22").hexdigest()[:16]
    )
    assert run_key("a/b c").startswith("a_b_c-") and run_key("..").startswith("_-")
    assert run_key("").startswith("run-") and len(run_key("")) == len("run-") + 16
    long = "x" * 300
    assert run_key(long) == "x" * RUN_KEY_READABLE + "-" + run_key(long).rsplit("-", 1)[1]
    assert run_key(long) != run_key(long + "y") and run_key("a/b") != run_key("a:b")


def test_runs_live_below_the_pipelines_directory_and_an_id_leading_elsewhere_is_refused():
    assert runs_root("/art", "etl.train") == "/art/etl.train/runs"
    assert run_path("/art", "digits", "r1") == f"/art/digits/runs/{run_key('r1')}"
    for bad in ("..", ".", "a/b", "", "x\n", "../up"):
        with pytest.raises(UnsafePipelineId, match=r"^pipeline_id: .* is no pipeline id: give the DAG's id"):
            runs_root("/art", bad)


def test_control_characters_are_shown_as_escapes():
    assert printable("ok \x1b[31mred\n\x00é") == "ok \\x1b[31mred\\n\\x00é"
    assert printable("plain text") == "plain text"


def test_the_layout_names_each_artifact_below_the_run_directory():
    layout = RunLayout("/r")
    assert (layout.spec_file, layout.run_file, layout.manifest_file) == (
        "/r/spec.json",
        "/r/run.json",
        "/r/data/manifest.json",
    )
    assert (layout.blessing_file, layout.approval_file, layout.progress_file) == (
        "/r/eval/blessing.json",
        "/r/approval.json",
        "/r/train/progress.json",
    )
    assert layout.tensorboard("eval") == "/r/tensorboard/eval"
    assert layout.result("train") == os.path.join("/r", "train", "result.json")
