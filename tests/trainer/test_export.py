"""trainer/export.py: a blessed checkpoint published as a version, idempotently; an unblessed one refused (an export
killed midway: test_faults_export.py; version numbers: test_versions.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.conftest import DAY, prepared_plan, run
from tests.publishing.versions import published_metadata
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.publishing import registry

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
