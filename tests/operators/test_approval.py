"""operators/approval.py: the approve task (PublishApprovalOperator) without a running Airflow: it asks the
approvers (their roles' users: role_members), records awaiting then who decided, refuses an answer that does not
count (four-eyes, not an approver, a bad comment) and skips export on a rejection. Where it sits in the DAG and
the export stage's refusal: tests/dag/test_approval.py."""

from __future__ import annotations

import datetime as dt
import logging
import re
import types

import pytest
from airflow.sdk.api.datamodels._generated import DagRunType
from airflow.sdk.exceptions import AirflowFailException

from tests.dag.test_approval import with_approval
from tests.publishing.test_approval import blessing
from tests.support.specs import START, make_spec
from tfdist.contract.publish_records import Approval
from tfdist.contract.records import read_record, write_record
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.approval import role_members
from tfdist.operators.dag import build_dag
from tfdist.publishing import approval


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


def test_a_roles_members_are_the_simple_auth_managers_users_with_it_whatever_its_case(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "tom:op,olga:OP,ursula:user,vera:viewer,al:admin")
    assert role_members([]) == []
    assert role_members(["op"]) == ["tom", "olga"]
    assert role_members(["user", "admin"]) == ["ursula", "al"]
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "airflow.providers.fab.auth_manager.fab_auth_manager.Fab")
    assert role_members([]) == []  # no role named: no auth manager asked
    with pytest.raises(approval.Refused, match=r"only the simple auth manager lists a role's users to a task"):
        role_members(["op"])


def test_the_approve_task_needs_export_approval_and_asks_about_the_models_name(tmp_path):
    from tfdist.operators.approval import PublishApprovalOperator

    task = build_dag(with_approval(str(tmp_path), True)).get_task("approve")
    assert task.subject == "Publish a new version of digits_small?" and task.approval_rule.four_eyes
    with pytest.raises(ValueError, match=r"spec 'digits_test': export.approval is not set, so nothing asks"):
        PublishApprovalOperator(task_id="approve", spec=make_spec(str(tmp_path)))
