"""How versions are numbered and which one is live: from the data interval's end, so a backfill of an earlier
interval publishes below the live version and never becomes it; a number from the future is refused by the export
(a plan may be built elsewhere than by the first task, which refuses such a window:
tests/operators/plan/test_windows.py)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.publishing.test_withdraw import publish, tf_serving_latest
from tests.support.plans import plan_for, prepared_plan, run
from tests.support.specs import DAY
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.operators.plan import version_base
from tfdist.publishing import registry
from tfdist.trainer.export import version_refusal

TRAINING = {"epochs": 2, "num_workers": 1}
GATE = {"thresholds": {"accuracy": {"lower": 0.3}}}
MODEL = {"model_name": "versions"}  # not the other tests' model on the shared digits root


def refused_export(plan) -> str:
    """The export's refusal; nothing may be published, claimed or left half-written."""
    with pytest.raises(StageFailed) as failure:
        run(plan, "export")
    assert failure.value.returncode == EXIT_REFUSED
    found = os.listdir(plan.model_dir) if os.path.isdir(plan.model_dir) else []
    assert [name for name in found if name.startswith((".claim", ".tmp"))] == []
    return str(failure.value)


@pytest.mark.e2e
def test_a_version_numbered_from_the_future_is_refused_before_anything_is_published(tmp_path):
    future = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=30)
    plan = plan_for(str(tmp_path), "from_the_future", future)  # as a plan built elsewhere could be
    refusal = refused_export(plan)
    assert f"--version-base {registry.version_number(plan.context.interval_end)} is numbered from a data " in refusal
    assert not os.path.exists(plan.model_dir)


@pytest.mark.e2e
def test_no_version_is_published_under_a_live_one_numbered_from_the_future_until_it_is_withdrawn(tmp_path):
    plan = plan_for(str(tmp_path), "nightly")
    pinned = registry.version_number(dt.datetime.now(dt.UTC) + dt.timedelta(days=365))
    publish(plan.model_dir, pinned)  # published before exports refused such numbers
    refusal = refused_export(plan)
    assert f"the live version {pinned} of {plan.model_dir} is numbered from a data interval ending in the " in refusal
    assert f"Withdraw it (tfdist models withdraw {plan.model_dir} {pinned} --reason ...)" in refusal
    assert [m.version for m in registry.versions(plan.model_dir)] == [pinned]
    registry.withdraw(plan.model_dir, pinned, "numbered from the future", "ops")
    assert version_refusal(plan.model_dir, version_base(plan.context), dt.datetime.now(dt.UTC)) is None


@pytest.mark.e2e
def test_a_backfill_publishes_below_the_live_version_which_stays_the_newest_intervals(digits_root):
    published = {}
    for run_id, day in (("newest", DAY), ("backfill", DAY - dt.timedelta(days=1))):
        plan = prepared_plan(digits_root, f"versions_{run_id}", day, training=TRAINING, validation=GATE, export=MODEL)
        for task_id in ("train", "evaluate", "export"):
            run(plan, task_id)
        published[run_id] = read_json(plan.layout.result("export"))["version"]
        assert published[run_id] == version_base(plan.context)
    assert published["backfill"] < published["newest"]
    assert registry.live(plan.model_dir) == tf_serving_latest(plan.model_dir) == published["newest"]
