"""trainer/evaluate.py: the best retained checkpoint chosen, each integrity check failing by name, and a baseline
scored by class name."""

from __future__ import annotations

import os

import pytest

from tests.support.plans import prepared_plan, run
from tests.trainer.labels import label_entry
from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import read_record, write_record
from tfdist.contract.train_records import TrainResult
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed

ONE_WORKER = {"num_workers": 1}  # one training process is enough to check the candidates


@pytest.mark.e2e
def test_best_retained_checkpoint_is_chosen_and_integrity_failures_are_named(digits_root):
    plan = prepared_plan(
        digits_root,
        "integrity",
        training=ONE_WORKER,
        validation={"checkpoint": {"mode": "best", "metric": "loss", "direction": "lower_is_better"}},
    )
    for task_id in ("train", "evaluate"):
        run(plan, task_id)
    result = read_record(plan.layout.result("train"), TrainResult)
    blessing = read_json(plan.layout.blessing_file)
    assert [c["step"] for c in blessing["candidates"]] == [40, 60, 76]  # keep_checkpoints = 3, every 20 steps
    assert blessing["metrics"]["loss"] == min(c["metrics"]["loss"] for c in blessing["candidates"])
    assert blessing["checkpoint"] in [c["checkpoint"] for c in blessing["candidates"]]

    # through the stage: the failed check is named in blessing.json, and the exit code refuses (no retry)
    write_record(plan.layout.result("train"), result.model_copy(update={"final_step": result.final_step + 1}))
    with pytest.raises(StageFailed, match="integrity check 'step' failed") as failure:
        run(plan, "evaluate")
    assert failure.value.returncode == EXIT_REFUSED
    assert read_json(plan.layout.blessing_file)["integrity"]["failed"] == "step"
    write_record(plan.layout.result("train"), result)

    # the other checks, called as the stage calls them
    import numpy as np
    import tensorflow as tf

    from tfdist.infra.jsonfiles import sha256_file
    from tfdist.trainer.evaluate import IntegrityError, check_candidate
    from tfdist.trainer.models import restore_model
    from tfdist.trainer.runtime import load_spec

    spec = load_spec(plan.layout.spec_file)
    manifest_path = plan.layout.manifest_file
    manifest, manifest_sha = read_record(manifest_path, Manifest), sha256_file(manifest_path)

    def check_fails_with(check: str, train_result: TrainResult = result) -> None:
        with pytest.raises(IntegrityError, match=f"integrity check '{check}' failed") as failure:
            check_candidate(tf, spec, manifest, plan.layout.data_dir, manifest_sha, result.checkpoint, train_result)
        assert failure.value.check == check

    check_candidate(tf, spec, manifest, plan.layout.data_dir, manifest_sha, result.checkpoint, result)  # intact: passes
    check_fails_with("data_manifest", result.model_copy(update={"data_manifest_sha256": "0" * 64}))
    model, step = restore_model(tf, spec, manifest, plan.layout.data_dir, result.checkpoint)
    kernel = model.trainable_weights[0]
    kernel.assign(np.where(np.arange(kernel.shape[-1]) == 0, np.nan, kernel.numpy()))
    tf.train.Checkpoint(model=model, step=tf.Variable(step, dtype=tf.int64)).write(result.checkpoint)
    check_fails_with("finite_weights")
    (data_file,) = [
        f for f in os.listdir(plan.layout.checkpoint_dir) if f.startswith(os.path.basename(result.checkpoint) + ".data")
    ]
    path = os.path.join(plan.layout.checkpoint_dir, data_file)
    os.truncate(path, os.path.getsize(path) // 2)
    check_fails_with("restores")


def test_the_baseline_is_scored_by_class_name_and_refused_for_another_task_or_other_classes():
    from tfdist.trainer.evaluate import class_columns

    published = label_entry("multiclass", ["Adelie", "Chinstrap", "Gentoo"])  # a version's metadata's label
    ours = label_entry("multiclass", published.class_names)  # this run's manifest's
    assert class_columns(None, ours) is None  # published before labels had tasks: integer classes, same order
    assert class_columns(published, ours) is None
    assert class_columns(published.model_copy(update={"classes": ["Gentoo", "Adelie", "Chinstrap"]}), ours) == [1, 2, 0]
    with pytest.raises(ValueError, match=r"its classes \['Adelie', 'Gentoo'\] are not this run's"):
        class_columns(published.model_copy(update={"classes": ["Adelie", "Gentoo"]}), ours)
    with pytest.raises(ValueError, match="it predicts task 'binary', this run's is 'multiclass'"):
        class_columns(label_entry("binary", ["no", "yes"]), ours)
    with pytest.raises(ValueError, match=r"its classes \['yes', 'no'\]"):
        class_columns(label_entry("binary", ["yes", "no"]), label_entry("binary", ["no", "yes"]))
    target = label_entry("regression", None, std=2.0)
    assert class_columns(target, target) is None  # a regression target has no classes to match


def test_the_change_from_the_baseline_is_absolute_and_relative_where_both_are_defined():
    from tfdist.trainer.evaluate import deltas, shown

    found = deltas({"accuracy": 0.9, "loss": 0.3, "auc": None, "new": 1.0}, {"accuracy": 0.8, "loss": 0.0, "auc": 0.7})
    assert set(found) == {"accuracy", "loss"}  # undefined on either side, or not in the baseline: no change
    assert found["accuracy"].absolute == pytest.approx(0.1) and found["accuracy"].relative == pytest.approx(0.125)
    assert found["loss"].absolute == pytest.approx(0.3) and found["loss"].relative is None  # of a zero baseline
    assert (shown(0.123456), shown(None)) == ("0.1235", "undefined")


def test_the_candidate_chosen_is_the_best_by_the_specs_selection_the_first_of_equals(tmp_path):
    from tests.support.specs import make_spec
    from tfdist.spec import load_spec
    from tfdist.trainer.evaluate import Scored, chosen_candidate

    def chosen(checkpoint: dict, losses: list[float | None]) -> int:
        spec = load_spec(make_spec(str(tmp_path), validation={"checkpoint": checkpoint}))
        scored = [
            Scored(f"ckpt-{step}", step, 10, {"loss": loss}, None)
            for step, loss in zip((20, 40, 60), losses, strict=True)
        ]
        return chosen_candidate(spec, scored).step

    best = {"mode": "best", "metric": "loss", "direction": "lower_is_better"}
    assert chosen(best, [0.5, 0.2, 0.2]) == 40
    assert chosen(best, [None, 0.9, 0.3]) == 60  # an undefined value is worst
    assert chosen({**best, "direction": "higher_is_better"}, [0.5, None, 0.2]) == 20
