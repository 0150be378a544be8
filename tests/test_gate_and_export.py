"""Checkpoint validation and publishing: integrity checks by name, the baseline gate (as of each run's
data interval), versions that are atomic, idempotent and pruned, and an export killed midway."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading

import pytest

from operators.launchers import StageFailed
from operators.launchers.local import LocalLauncher
from tests.conftest import DAY, collecting_logger, plan_for, run, wait_for
from trainer import registry
from trainer.artifacts import read_json, write_json_atomic

GATE = {
    "thresholds": {"accuracy": {"lower": 0.3}},
    "change_thresholds": {"accuracy": {"direction": "higher_is_better", "absolute": 0.01}},
}
GOOD = {"epochs": 6}
POOR = {"epochs": 1}  # passes the value threshold, far below a trained baseline


def train_and_evaluate(root: str, run_id: str, day: dt.date, training: dict, **sections):
    plan = plan_for(root, run_id, day, training=training, validation=GATE, **sections)
    for task_id in ("prepare_data", "train", "evaluate"):
        run(plan, task_id)
    return plan, read_json(os.path.join(plan.layout.eval_dir, "blessing.json"))


def test_baseline_gate_blocks_a_regression_and_publishes_an_improvement(digits_root):
    root = digits_root
    first, blessing = train_and_evaluate(root, "gate_first", DAY - dt.timedelta(days=2), GOOD)
    assert blessing["blessed"] and blessing["baseline"] is None
    run(first, "export")
    model_dir = first.model_dir
    (v1,) = [m["version"] for m in registry.versions(model_dir)]
    assert v1 == 20261119000000

    worse, blessing = train_and_evaluate(root, "gate_worse", DAY - dt.timedelta(days=1), POOR)
    assert not blessing["blessed"] and blessing["baseline"]["version"] == v1
    assert blessing["metrics"]["accuracy"] >= 0.3  # passes the absolute threshold...
    (failure,) = blessing["failures"]  # ...but not the change threshold
    assert failure.startswith("accuracy = ") and f"worse than the baseline (version {v1}: " in failure
    assert blessing["deltas"]["accuracy"]["absolute"] < -0.01
    with pytest.raises(StageFailed, match="refusing to export: this run's checkpoint was not blessed"):
        run(worse, "export")
    assert [m["version"] for m in registry.versions(model_dir)] == [v1]

    better, blessing = train_and_evaluate(root, "gate_better", DAY, {"epochs": 10})
    assert blessing["blessed"] and blessing["baseline"]["version"] == v1, blessing["report"]
    run(better, "export")
    v3 = registry.versions(model_dir)[-1]
    assert v3["version"] == 20261121000000 and v3["blessing"]["baseline"]["version"] == v1
    assert registry.baseline_for(model_dir, "2026-11-22T00:00:00+00:00", "next run")["version"] == v3["version"]

    # a backfill of the first day, run now, compares with what was live then (v1), not with v3
    backfill = plan_for(root, "gate_backfill", DAY - dt.timedelta(days=2), training=GOOD, validation=GATE)
    for task_id in ("prepare_data", "train", "evaluate"):
        run(backfill, task_id)
    blessing = read_json(os.path.join(backfill.layout.eval_dir, "blessing.json"))
    assert blessing["baseline"]["version"] == v1

    # the same run exported again: same version, nothing duplicated
    run(better, "export")
    assert [m["version"] for m in registry.versions(model_dir)] == [v1, v3["version"]]


def test_best_retained_checkpoint_is_chosen_and_integrity_failures_are_named(digits_root):
    plan = plan_for(digits_root, "integrity", validation={"checkpoint": {"mode": "best", "metric": "loss",
                                                                          "direction": "lower_is_better"}})
    for task_id in ("prepare_data", "train", "evaluate"):
        run(plan, task_id)
    result = read_json(plan.layout.train_result)
    blessing = read_json(os.path.join(plan.layout.eval_dir, "blessing.json"))
    assert [c["step"] for c in blessing["candidates"]] == [40, 60, 76]  # keep_checkpoints = 3, every 20 steps
    assert blessing["metrics"]["loss"] == min(c["metrics"]["loss"] for c in blessing["candidates"])
    assert blessing["checkpoint"] in [c["checkpoint"] for c in blessing["candidates"]]

    def evaluate_fails_with(check: str) -> None:
        with pytest.raises(StageFailed, match=f"integrity check '{check}' failed"):
            run(plan, "evaluate")
        assert read_json(os.path.join(plan.layout.eval_dir, "blessing.json"))["integrity"]["failed"] == check

    write_json_atomic(plan.layout.train_result, {**result, "final_step": result["final_step"] + 1})
    evaluate_fails_with("step")
    write_json_atomic(plan.layout.train_result, {**result, "data_manifest_sha256": "0" * 64})
    evaluate_fails_with("data_manifest")
    write_json_atomic(plan.layout.train_result, result)

    import numpy as np
    import tensorflow as tf

    from trainer.models import restore_model

    spec = read_json(plan.layout.spec_file)
    manifest = read_json(os.path.join(plan.layout.data_dir, "manifest.json"))
    model, step = restore_model(tf, spec, manifest, result["checkpoint"])
    kernel = model.trainable_weights[0]
    kernel.assign(np.where(np.arange(kernel.shape[-1]) == 0, np.nan, kernel.numpy()))
    tf.train.Checkpoint(model=model, step=tf.Variable(step, dtype=tf.int64)).write(result["checkpoint"])
    evaluate_fails_with("finite_weights")

    (data_file,) = [f for f in os.listdir(plan.layout.checkpoint_dir)
                    if f.startswith(os.path.basename(result["checkpoint"]) + ".data")]
    path = os.path.join(plan.layout.checkpoint_dir, data_file)
    os.truncate(path, os.path.getsize(path) // 2)
    evaluate_fails_with("restores")


def test_export_killed_midway_leaves_no_version_and_a_rerun_publishes(digits_root):
    plan = plan_for(digits_root, "export_killed", export={"model_name": "digits_killed"})
    for task_id in ("prepare_data", "train", "evaluate"):
        run(plan, task_id)
    launcher = LocalLauncher()
    logger, _ = collecting_logger("export_killed")
    failure = []
    thread = threading.Thread(target=lambda: failure.append(pytest.raises(StageFailed, launcher.run,
                                                                          plan.stage("export"), logger)))
    thread.start()
    temp_dirs = lambda: [d for d in os.listdir(plan.model_dir) if d.startswith(".tmp-")]  # noqa: E731
    wait_for(lambda: os.path.isdir(plan.model_dir) and temp_dirs(), 60, "the export's temp directory")
    os.kill(launcher.processes["export-0"].pid, signal.SIGKILL)
    thread.join(30)
    assert failure and failure[0].value.returncode == -signal.SIGKILL
    assert registry.versions(plan.model_dir) == [] and not any(d.isdigit() for d in os.listdir(plan.model_dir))

    run(plan, "export")
    (published,) = registry.versions(plan.model_dir)
    assert published["run_id"] == "export_killed" and temp_dirs() == []


def write_version(model_dir: str, version: int, run_id: str, interval_end: str) -> None:
    write_json_atomic(os.path.join(model_dir, str(version), "metadata.json"),
                      {"version": version, "run_id": run_id, "data_interval_end": interval_end})


def test_baseline_lookup_honours_the_data_interval(tmp_path):
    model_dir = str(tmp_path / "m")
    for day in (10, 15, 20):
        write_version(model_dir, 20261100000000 + day * 10000, f"run-{day}", f"2026-11-{day}T00:00:00+00:00")
    os.makedirs(os.path.join(model_dir, ".tmp-20261125000000-x"))  # an export in progress is not a version
    assert registry.baseline_for(model_dir, "2026-11-16T00:00:00+00:00", "backfill")["run_id"] == "run-15"
    assert registry.baseline_for(model_dir, "2026-11-15T00:00:00+00:00", "backfill")["run_id"] == "run-15"
    assert registry.baseline_for(model_dir, "2026-11-15T00:00:00+00:00", "run-15")["run_id"] == "run-10"
    assert registry.baseline_for(model_dir, "2026-11-09T00:00:00+00:00", "backfill") is None
    assert registry.baseline_for(model_dir, "2026-12-01T00:00:00+00:00", "nightly")["run_id"] == "run-20"


def test_pruning_keeps_the_newest_and_the_baseline(tmp_path):
    model_dir = str(tmp_path / "m")
    for n in range(1, 6):
        write_version(model_dir, n, f"run-{n}", f"2026-11-0{n}T00:00:00+00:00")
    assert registry.prune(model_dir, keep=2, protect={1}) == [2, 3]
    assert [m["version"] for m in registry.versions(model_dir)] == [1, 4, 5]
    assert sorted(os.listdir(model_dir)) == ["1", "4", "5"]
