"""The human approval before publishing (``export.approval``) without a running Airflow: the spec section, the
form's body, the DAG's approve task and the decisions it records, the export stage's refusal, the runs page's
words. Answered through Airflow's REST API on a live Airflow: tests/live/test_live_airflow.py."""

from __future__ import annotations

import datetime as dt
import logging
import re
import types

import pytest
from airflow.sdk.api.datamodels._generated import DagRunType
from airflow.sdk.exceptions import AirflowFailException

from tests.operators.test_report import rules_of
from tests.spec.test_errors import problems
from tests.support.plans import plan_for, run
from tests.support.specs import START, make_spec
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.publish_records import Approval, Blessing
from tfdist.contract.records import read_record, write_record
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.dag import build_dag
from tfdist.operators.launchers import StageFailed
from tfdist.operators.report import run_summary
from tfdist.publishing import approval, gate
from tfdist.spec import SpecError, load_spec

CHANGE = {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}}


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


def blessing(baseline: dict | None, accuracy: float = 0.93) -> Blessing:
    metrics = {"accuracy": accuracy, "loss": 0.2}
    compared = (baseline or {}).get("metrics")
    rows = gate.checks(metrics, *rules_of({"accuracy": {"lower": 0.9, "upper": None}}, CHANGE), compared)
    changes = {m: {"absolute": metrics[m] - compared[m], "relative": None} for m in metrics} if compared else {}
    record = {
        "blessed": not gate.failures(rows),
        "run_id": "manual__1",
        "checkpoint": "/ckpt-120",
        "gate": "value thresholds and change thresholds",
        "step": 120,
        "eval_examples": 360,
        "metrics": metrics,
        "checks": [row.model_dump(mode="json") for row in rows],
        "baseline": baseline and {"path": "/models/digits/7", **baseline},
        "deltas": changes,
        "failures": gate.failures(rows),
        "report": [],
    }
    return Blessing.parse(record, "a blessing")


def test_the_form_shows_the_gates_decision_each_check_with_its_margin_and_the_baseline_deltas():
    body = approval.approval_body(
        blessing({"version": 7, "run_id": "earlier", "metrics": {"accuracy": 0.95, "loss": 0.15}})
    )
    assert body.startswith(
        "**Gate: NOT blessed** (value thresholds and change thresholds), checkpoint step 120 on 360 eval examples."
    ), body
    assert "| value | accuracy | 0.9300 | ≥ 0.9 | +0.0300 | yes |" in body
    assert "| change | accuracy | 0.9300 | ≥ baseline − 0.01 | -0.0100 | NO |" in body
    assert "Against the baseline, version 7:" in body
    assert "| accuracy | 0.9500 | 0.9300 | -0.0200 |" in body and "| loss | 0.1500 | 0.2000 | +0.0500 |" in body
    alone = approval.approval_body(blessing(None))
    assert alone.startswith("**Gate: blessed**") and "nothing published as of this data interval" in alone
    assert "cannot score" in approval.approval_body(blessing({"version": 7, "error": "shape"}))


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


def approve_task(root: str, rule, monkeypatch, triggered_by: str | None = "tom", run_type: str = "manual"):
    """The approve task of a pipeline, its run's directory made by the stages before it, a run ``triggered_by``
    that user; what it skips and logs (warnings) is kept."""
    task = build_dag(with_approval(root, rule)).get_task("approve")
    warned = []
    monkeypatch.setattr(
        type(task),
        "log",
        types.SimpleNamespace(
            info=lambda *a: None,
            getEffectiveLevel=lambda: logging.INFO,
            warning=lambda message, *args: warned.append(message % args),
        ),
    )
    ti = types.SimpleNamespace(id="ti", map_index=-1, xcom_push=lambda key, value: None)
    context = {
        "run_id": "manual__1",
        "data_interval_start": START,
        "data_interval_end": START + dt.timedelta(days=1),
        "params": {},
        "dag_run": types.SimpleNamespace(conf={}, triggering_user_name=triggered_by, run_type=DagRunType(run_type)),
        "ti": ti,
        "task_instance": ti,
        "task": task,
    }
    layout = task.plan(context).layout
    write_record(layout.blessing_file, blessing(None))
    return task, context, layout, warned


def rejected(task, context, event: dict) -> None:
    """The approve task given a rejection: it skips export (Airflow's SkipMixin raises to say so)."""
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    with pytest.raises(DownstreamTasksSkipped) as skipped:
        task.execute_complete(context, event)
    assert skipped.value.tasks == ["export"]


def answer(option: str, user: str | None, comment: str | None = None, timedout: bool = False) -> dict:
    return {
        "chosen_options": [option],
        "params_input": {"comment": comment} if comment else {},
        "responded_at": dt.datetime(2026, 11, 21, 9, 30, tzinfo=dt.UTC),
        "timedout": timedout,
        "responded_by_user": user and {"id": user, "name": user},
    }


def timeouts(warned: list[str]) -> list[str]:
    return [w for w in warned if w.startswith("no answer within")]


def test_the_approve_task_records_awaiting_then_who_decided_and_a_timeout_never_silently(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import TaskAwaitingInput

    task, context, layout, warned = approve_task(str(tmp_path), {"timeout_minutes": 5}, monkeypatch)
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: None)
    with pytest.raises(TaskAwaitingInput):
        task.execute(context)
    assert task.body.startswith("**Gate: blessed**")
    assert approval.approval_summary(read_record(layout.approval_file, Approval)) == "awaiting approval"

    rejected(task, context, answer("Reject", "ana", "class 3 got worse"))
    record = read_json(layout.approval_file)
    assert record == {
        "run_id": "manual__1",
        "decision": "rejected",
        "by": "ana",
        "comment": "class 3 got worse",
        "timed_out": False,
        "at": "2026-11-21T09:30:00+00:00",
        "asked": None,
        "excluded": "tom",
        "refused": None,
        "schema_version": 1,
    }

    assert not timeouts(warned)
    rejected(task, context, answer("Reject", None, timedout=True))  # on_timeout: reject
    assert approval.approval_summary(read_record(layout.approval_file, Approval)) == (
        "rejected by the timeout (no answer in time)"
    )
    assert timeouts(warned) == [
        "no answer within export.approval.timeout_minutes (5): rejected by the timeout (no "
        "answer in time) (export.approval.on_timeout)"
    ]

    task, context, layout, warned = approve_task(
        str(tmp_path), {"timeout_minutes": 5, "on_timeout": "approve"}, monkeypatch, None, "scheduled"
    )
    assert task.execute_complete(context, answer("Approve", None, timedout=True))["chosen_options"] == ["Approve"]
    assert read_json(layout.approval_file)["decision"] == "approved"
    assert "approved by the timeout (no answer in time)" in timeouts(warned)[0]
    assert approval.approval_refusal(layout.approval_file, "manual__1") is None


def asked_for(task, context, monkeypatch) -> list:
    """Ask for the approval; the assigned users Airflow was given."""
    from airflow.sdk.exceptions import TaskAwaitingInput

    sent: list = []
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: sent.append(kw))
    with pytest.raises(TaskAwaitingInput):
        task.execute(context)
    return sent[0]["assigned_users"]


def test_four_eyes_refuses_the_triggering_users_answer_and_the_record_says_why(tmp_path, monkeypatch):
    task, context, layout, warned = approve_task(str(tmp_path), {"timeout_minutes": 5}, monkeypatch)
    assert asked_for(task, context, monkeypatch) is None  # no approvers: anyone who may act on the DAG
    assert read_json(layout.approval_file)["excluded"] == "tom"
    rejected(task, context, answer("Approve", "tom", "looks fine"))
    record = read_json(layout.approval_file)
    assert (record["decision"], record["by"], record["comment"]) == ("rejected", "tom", None), record
    assert approval.approval_summary(Approval.parse(record, "approval.json")) == (
        "rejected: tom triggered the run and may not answer it (export.approval.four_eyes)"
    )
    assert f"the answer does not count: {approval.approval_summary(Approval.parse(record, 'approval.json'))}" in warned
    rejected(task, context, answer("Approve", None))  # no user named, not the timeout: who it was is unknown
    assert read_json(layout.approval_file)["refused"].startswith("the answer names no user")
    assert task.execute_complete(context, answer("Approve", "ana"))["chosen_options"] == ["Approve"]
    assert approval.approval_summary(read_record(layout.approval_file, Approval)) == "approved by ana"

    rule = {"timeout_minutes": 5, "on_timeout": "approve"}
    task, context, layout, warned = approve_task(str(tmp_path), rule, monkeypatch)
    rejected(task, context, answer("Approve", None, timedout=True))  # tom could just wait: no
    assert approval.approval_summary(read_record(layout.approval_file, Approval)) == (
        "rejected: no answer in time, and on_timeout: approve does not publish a run tom triggered "
        "(export.approval.four_eyes)"
    )
    task, context, layout, warned = approve_task(str(tmp_path), {**rule, "four_eyes": False}, monkeypatch)
    assert task.execute_complete(context, answer("Approve", "tom"))["chosen_options"] == ["Approve"]


def test_only_the_approvers_and_their_roles_users_are_asked_and_other_answers_do_not_count(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "tom:op,olga:OP,ursula:user,vera:viewer")
    rule = {"approvers": {"users": ["ana", "tom"], "roles": ["op"]}}
    task, context, layout, _ = approve_task(str(tmp_path), rule, monkeypatch)
    assert asked_for(task, context, monkeypatch) == [{"id": "ana", "name": "ana"}, {"id": "olga", "name": "olga"}]
    assert read_json(layout.approval_file)["asked"] == ["ana", "olga"]
    rejected(task, context, answer("Approve", "ursula"))  # Airflow refuses her (403) unless all are admins
    assert read_json(layout.approval_file)["refused"] == "ursula is not one of export.approval.approvers (ana, olga)"
    assert task.execute_complete(context, answer("Approve", "olga"))["chosen_options"] == ["Approve"]

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "airflow.providers.fab.auth_manager.fab_auth_manager.Fab")
    with pytest.raises(AirflowFailException, match=r"export\.approval\.approvers\.roles: only the simple auth"):
        task.execute(context)
    assert read_json(layout.approval_file)["decision"] == "rejected"


@pytest.mark.parametrize(
    "rule, triggered_by, refusal",
    [
        ({}, None, "export.approval.four_eyes: this manual run names no triggering user, so who may not approve"),
        (
            {"approvers": {"users": ["tom"]}},
            "tom",
            "export.approval.approvers: nobody is left to answer: the approvers are ['tom'], and tom triggered",
        ),
    ],
)
def test_an_approval_four_eyes_cannot_check_or_nobody_may_answer_is_refused_before_asking(
    tmp_path, monkeypatch, rule, triggered_by, refusal
):
    task, context, layout, _ = approve_task(str(tmp_path), rule, monkeypatch, triggered_by)
    with pytest.raises(AirflowFailException, match=re.escape(refusal)):
        task.execute(context)
    record = read_json(layout.approval_file)
    assert record["decision"] == "rejected" and record["refused"].startswith(refusal), record
    scheduled = approve_task(str(tmp_path), rule, monkeypatch, None, "scheduled")
    assert asked_for(*scheduled[:2], monkeypatch) in (None, [{"id": "tom", "name": "tom"}])


@pytest.mark.parametrize(
    "comment, refusal",
    [
        ("x" * approval.MAX_COMMENT, None),
        ("x" * (approval.MAX_COMMENT + 1), "the comment has 501 characters, more than the 500 allowed; shorten it"),
        ("ok\x1b[2Jfine", "the comment has a control character (U+001B); write it on one line of plain text"),
        ("two\nlines", "the comment has a control character (U+000A)"),
        (["a"], "the comment must be text, got list"),
    ],
)
def test_a_comment_over_the_limit_or_with_a_control_character_does_not_count(tmp_path, monkeypatch, comment, refusal):
    task, context, layout, _ = approve_task(str(tmp_path), True, monkeypatch)
    event = {**answer("Approve", "ana"), "params_input": {"comment": comment}}
    if refusal is None:
        assert task.execute_complete(context, event)["chosen_options"] == ["Approve"]
        return
    rejected(task, context, event)
    record = read_json(layout.approval_file)
    assert record["refused"].startswith(refusal) and record["comment"] is None, record
    assert task.params.get_param("comment").schema["maxLength"] == approval.MAX_COMMENT  # the form's bound


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
