"""The human approval before publishing (``export.approval``) without a running Airflow: the spec section, where
the DAG's approve task sits, the export stage's refusal, the runs page's words. The approval's functions:
tests/publishing/test_approval.py; the approve task's own behaviour: tests/operators/test_approval.py. Answered
through Airflow's REST API on a live Airflow: tests/live/test_live_airflow.py."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.spec.test_errors import problems
from tests.support.plans import plan_for, run
from tests.support.specs import make_spec
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.operators.dag import build_dag
from tfdist.operators.launchers import StageFailed
from tfdist.operators.report import run_summary
from tfdist.publishing import approval
from tfdist.spec import SpecError, load_spec


def with_approval(root: str, value, **sections) -> dict:
    return make_spec(root, export={"model_name": "digits_small", "approval": value}, **sections)


def test_approval_is_true_or_a_section_with_a_timeout_that_refuses_by_default(tmp_path):
    root = str(tmp_path)
    assert load_spec(with_approval(root, True)).export.approval.model_dump() == {
        "approvers": None,
        "four_eyes": True,
        "timeout_minutes": None,
        "on_timeout": "reject",
    }
    assert load_spec(with_approval(root, False)).export.approval is None
    assert load_spec(make_spec(root)).export.approval is None
    timed = load_spec(with_approval(root, {"timeout_minutes": 30, "on_timeout": "approve"}))
    assert load_spec(timed.to_json_dict()) == timed  # spec.json reads back
    assert problems(with_approval(root, {"timeout_minutes": 0}))[0].startswith(
        "export.approval.timeout_minutes: Input should be greater than or equal to 1"
    )
    assert problems(with_approval(root, {"on_timeout": "publish"}))[0].startswith(
        "export.approval.on_timeout: Input should be 'reject' or 'approve'"
    )
    assert problems(with_approval(root, {"on_timeout": "approve"}))[0].startswith(
        "export.approval: on_timeout: 'approve' needs timeout_minutes"
    )
    assert problems(with_approval(root, {"timeout_minute": 5}))[0].startswith(
        "export.approval: unknown key 'timeout_minute' (did you mean 'timeout_minutes'?)"
    )


def test_approvers_are_users_or_simple_auth_manager_roles_and_four_eyes_is_on_by_default(tmp_path):
    root = str(tmp_path)
    named = load_spec(with_approval(root, {"approvers": {"users": ["ana", "bo@example.com"], "roles": ["op"]}}))
    assert named.export.approval.approvers.model_dump() == {"users": ["ana", "bo@example.com"], "roles": ["op"]}
    assert named.export.approval.four_eyes and load_spec(named.to_json_dict()) == named
    assert not load_spec(with_approval(root, {"four_eyes": False})).export.approval.four_eyes
    assert problems(with_approval(root, {"approvers": {}}))[0] == (
        "export.approval.approvers: name at least one user or role, or leave 'approvers' out (then anyone who may "
        "act on the DAG answers)"
    )
    assert problems(with_approval(root, {"approvers": {"roles": ["viewer"]}}))[0].startswith(
        "export.approval.approvers.roles[0]: Input should be 'user', 'op' or 'admin' (got 'viewer')"
    )
    assert problems(with_approval(root, {"approvers": {"users": ["ana bo"]}}))[0].startswith(
        "export.approval.approvers.users[0]: String should match pattern"
    )
    assert problems(with_approval(root, {"approvers": {"users": ["a" * 257]}}))[0].startswith(
        "export.approval.approvers.users[0]: String should have at most 256 characters"
    )
    assert problems(with_approval(root, {"approvers": {"user": ["ana"]}}))[0].startswith(
        "export.approval.approvers: unknown key 'user' (did you mean 'users'?)"
    )


@pytest.mark.parametrize("field", ["on_timeout", "four_eyes", "approvers"])
def test_approval_is_the_authors_and_no_run_can_change_it(tmp_path, field):
    (problem,) = problems(make_spec(str(tmp_path), overridable=[f"export.approval.{field}"]))
    assert problem.startswith(f"overridable: 'export.approval.{field}' cannot be overridden by whoever triggers")
    spec = load_spec(with_approval(str(tmp_path), True, overridable=["training.epochs"]))
    with pytest.raises(SpecError, match=r"export\.approval: not overridable in this pipeline"):
        spec.with_overrides({"export.approval": None})


def test_the_approve_task_sits_between_evaluate_and_export_only_when_configured(tmp_path):
    dag = build_dag(with_approval(str(tmp_path), {"timeout_minutes": 90}))
    assert dag.get_task("evaluate").downstream_task_ids == {"approve"}
    ask = dag.get_task("approve")
    assert ask.downstream_task_ids == {"export"} and ask.retries == 0
    assert (ask.defaults, ask.response_timeout) == (["Reject"], dt.timedelta(minutes=90))  # the timeout refuses
    assert build_dag(with_approval(str(tmp_path), {"timeout_minutes": 5, "on_timeout": "approve"})).get_task(
        "approve"
    ).defaults == ["Approve"]
    waits = build_dag(with_approval(str(tmp_path), True, overridable=["training.epochs"])).get_task("approve")
    assert waits.response_timeout is None
    assert list(waits.serialized_params) == ["comment"]  # the form's one field, whatever the DAG's Params
    assert build_dag(make_spec(str(tmp_path))).get_task("evaluate").downstream_task_ids == {"export"}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "record, refusal",
    [
        (None, "holds no approval of this run"),
        ({"decision": "awaiting"}, "the run is awaiting approval"),
        ({"decision": "rejected", "by": "ana", "comment": "no"}, "the run is rejected by ana (no)"),
        ({"decision": "approved", "by": "ana", "run_id": "another run"}, "holds no approval of this run"),
    ],
)
def test_export_refuses_to_publish_without_this_runs_approval(tmp_path, record, refusal):
    plan = plan_for(str(tmp_path), "approval_export", export={"model_name": "digits_small", "approval": True})
    blessed = {"blessed": True, "run_id": "approval_export", "checkpoint": "/ckpt-1", "failures": [], "report": []}
    write_json_atomic(plan.layout.blessing_file, blessed)
    if record:
        approval.record_approval(plan.layout.approval_file, **{"run_id": "approval_export", **record})
    with pytest.raises(StageFailed) as failed:
        run(plan, "export")
    assert failed.value.returncode == EXIT_REFUSED and "refusing to export: export.approval" in str(failed.value)
    assert refusal in str(failed.value)


def test_the_runs_page_says_who_approved_or_rejected(tmp_path):
    plan = plan_for(str(tmp_path), "approval_page", export={"model_name": "digits_small", "approval": True})
    assert run_summary(plan.layout.run_dir).approval_summary is None
    approval.record_approval(plan.layout.approval_file, "approval_page", approval.REJECTED, "ana", comment="drift")
    row = run_summary(plan.layout.run_dir)
    assert row.approval_summary == "rejected by ana (drift)" and row.approval and row.approval["by"] == "ana"
    approval.record_approval(plan.layout.approval_file, "approval_page", approval.APPROVED, "bo")
    assert run_summary(plan.layout.run_dir).approval_summary == "approved by bo"
