"""trainer/export.py: a blessed checkpoint published as a version, idempotently; an unblessed one refused (an export
killed midway: test_faults_export.py; version numbers: test_versions.py)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.publishing.versions import published_metadata
from tests.support.plans import prepared_plan, run
from tests.support.specs import DAY
from tests.trainer.labels import label_entry
from tfdist.contract.publish_records import ServingOutput
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.launchers import StageFailed
from tfdist.publishing import registry
from tfdist.trainer.export import keep_checkpoint, serving_outputs, version_refusal

GATE = {
    "thresholds": {"accuracy": {"lower": 0.3}},
    "change_thresholds": {"accuracy": {"direction": "higher_is_better", "absolute": 0.01}},
}
ONE_WORKER = {"num_workers": 1}  # these tests are about the gate and publishing: one training process is enough
GOOD = {"epochs": 6, **ONE_WORKER}
POOR = {"epochs": 1, **ONE_WORKER}  # passes the value threshold, far below a trained baseline


def train_and_evaluate(root: str, run_id: str, day: dt.date, training: dict, **sections):
    plan = prepared_plan(root, run_id, day, training=training, validation=GATE, **sections)
    for task_id in ("train", "evaluate"):
        run(plan, task_id)
    return plan, read_json(plan.layout.blessing_file)


@pytest.mark.e2e
def test_baseline_gate_blocks_a_regression_and_publishes_an_improvement(digits_root):
    root = digits_root
    first, blessing = train_and_evaluate(root, "gate_first", DAY - dt.timedelta(days=2), GOOD)
    assert blessing["blessed"] and blessing["baseline"] is None
    run(first, "export")
    model_dir = first.model_dir
    (v1,) = [m.version for m in registry.versions(model_dir)]
    assert v1 == 20261119000000

    worse, blessing = train_and_evaluate(root, "gate_worse", DAY - dt.timedelta(days=1), POOR)
    assert not blessing["blessed"] and blessing["baseline"]["version"] == v1
    assert blessing["metrics"]["accuracy"] >= 0.3  # passes the absolute threshold...
    (failure,) = blessing["failures"]  # ...but not the change threshold
    assert failure.startswith("accuracy = ") and f"worse than the baseline (version {v1}: " in failure
    assert blessing["deltas"]["accuracy"]["absolute"] < -0.01
    with pytest.raises(StageFailed, match="refusing to export: this run's checkpoint was not blessed"):
        run(worse, "export")
    assert [m.version for m in registry.versions(model_dir)] == [v1]

    better, blessing = train_and_evaluate(root, "gate_better", DAY, {"epochs": 10, **ONE_WORKER})
    assert blessing["blessed"] and blessing["baseline"]["version"] == v1, blessing["report"]
    run(better, "export")
    v3 = published_metadata(model_dir)[-1]
    assert v3["version"] == 20261121000000 and v3["blessing"]["baseline"]["version"] == v1
    assert registry.baseline_for(model_dir, "2026-11-22T00:00:00+00:00", "next run").version == v3["version"]

    # a backfill of a past day compares with what was live then, not with v3: see the baseline lookup test
    # below and the live backfill experiment (tests/live/test_live_airflow.py)

    # the same run exported again: same version, nothing duplicated
    run(better, "export")
    assert [m.version for m in registry.versions(model_dir)] == [v1, v3["version"]]


NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def test_a_version_numbered_past_now_and_the_clock_skew_is_refused_and_so_is_publishing_under_one(tmp_path):
    model_dir = str(tmp_path / "m")
    skewed = registry.version_number(NOW + registry.CLOCK_SKEW)
    assert version_refusal(model_dir, skewed, NOW) is None  # within the clocks' allowed disagreement
    refusal = version_refusal(model_dir, skewed + registry.MAX_VERSIONS_PER_INTERVAL, NOW)
    assert refusal.startswith(f"--version-base {skewed + 100} is numbered from a data interval ending in the future")
    assert "(now 2026-11-21 12:00 UTC)" in refusal
    live = skewed + registry.MAX_VERSIONS_PER_INTERVAL
    write_json_atomic(
        os.path.join(model_dir, str(live), "metadata.json"),
        {"version": live, "run_id": "ahead", "data_interval_end": "2026-11-21T12:06:00+00:00", "metrics": {}},
    )
    refusal = version_refusal(model_dir, registry.version_number(NOW), NOW)
    assert refusal.startswith(f"the live version {live} of {model_dir} is numbered from a data interval ending")
    assert f"tfdist models withdraw {model_dir} {live}" in refusal


def test_a_kept_checkpoint_has_every_file_of_its_checkpoint_under_the_new_prefix(tmp_path):
    for name, content in {"ckpt-4.index": b"i", "ckpt-4.data-00000-of-00001": b"d", "ckpt-40.index": b"x"}.items():
        (tmp_path / name).write_bytes(content)
    keep_checkpoint(str(tmp_path / "ckpt-4"), str(tmp_path / "kept" / "best"))
    assert {p.name: p.read_bytes() for p in (tmp_path / "kept").iterdir()} == {
        "best.index": b"i",
        "best.data-00000-of-00001": b"d",
    }


def test_the_serving_outputs_are_the_tasks():
    assert serving_outputs(label_entry("binary", ["no", "yes"])) == {
        "probability": ServingOutput(dtype="float32", shape=[None])
    }
    assert serving_outputs(label_entry("multiclass", ["a", "b", "c"])) == {
        "probabilities": ServingOutput(dtype="float32", shape=[None, 3]),
        "classes": ServingOutput(dtype="string", shape=[None]),
    }


def test_the_serving_signature_hands_the_model_int64_ids_as_the_strings_the_shards_hold(tf):
    """The signature takes int64 ids (MISSING_INT64: missing); the model gets their decimal strings ("")."""
    from tests.trainer.test_data import RELEASED_MANIFEST
    from tfdist.contract.data_records import Manifest
    from tfdist.contract.records import read_record
    from tfdist.trainer.data import MISSING_INT64
    from tfdist.trainer.export import serving_inputs, serving_module

    manifest = read_record(RELEASED_MANIFEST, Manifest)
    expected = tf.constant(["42", "-7", ""])

    def model(features, training):  # 1.0 where the model got the string expected
        return tf.cast(features["store"] == expected, tf.float32)[:, None]

    rows = {"age": [1.0] * 3, "scores": [[0.0, 1.0]] * 3, "store": [42, -7, MISSING_INT64], "recent": [["a"]] * 3}
    given = [tf.constant(rows.get(i.name, ["x"] * 3), i.dtype) for i in serving_inputs(manifest)]
    assert serving_module(tf, model, manifest).serve(*given)["probability"].numpy().tolist() == [1.0, 1.0, 1.0]
