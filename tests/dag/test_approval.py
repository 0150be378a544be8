"""The human approval before publishing (``export.approval``) without a running Airflow: the spec section, the
form's body, the DAG's approve task and the decisions it records, the export stage's refusal, the runs page's
words. Answered through Airflow's REST API on a live Airflow: tests/live/test_live_airflow.py."""

from __future__ import annotations

import datetime as dt
import logging
import types

import pytest

from tests.conftest import START, make_spec, plan_for, run
from tests.spec.test_spec import problems
from tfdist.contract import EXIT_REFUSED, approval, gate, read_json, write_json_atomic
from tfdist.operators.dag import build_dag
from tfdist.operators.launchers import StageFailed
from tfdist.operators.report import run_summary
from tfdist.spec import SpecError, load_spec

CHANGE = {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}}


def with_approval(root: str, value, **sections) -> dict:
    return make_spec(root, export={"model_name": "digits_small", "approval": value}, **sections)


def test_approval_is_true_or_a_section_with_a_timeout_that_refuses_by_default(tmp_path):
    root = str(tmp_path)
    assert load_spec(with_approval(root, True)).export.approval.model_dump() == {
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


def test_approval_is_the_authors_and_no_run_can_change_it(tmp_path):
    (problem,) = problems(make_spec(str(tmp_path), overridable=["export.approval.on_timeout"]))
    assert problem.startswith("overridable: 'export.approval.on_timeout' cannot be overridden by whoever triggers")
    spec = load_spec(with_approval(str(tmp_path), True, overridable=["training.epochs"]))
    with pytest.raises(SpecError, match=r"export\.approval: not overridable in this pipeline"):
        spec.with_overrides({"export.approval": None})


def blessing(baseline: dict | None, accuracy: float = 0.93) -> dict:
    metrics = {"accuracy": accuracy, "loss": 0.2}
    compared = (baseline or {}).get("metrics")
    rows = gate.checks(metrics, {"accuracy": {"lower": 0.9, "upper": None}}, CHANGE, compared)
    changes = {m: {"absolute": metrics[m] - compared[m]} for m in metrics} if compared else {}
    return {
        "blessed": not gate.failures(rows),
        "gate": "value thresholds and change thresholds",
        "step": 120,
        "eval_examples": 360,
        "metrics": metrics,
        "checks": rows,
        "baseline": baseline,
        "deltas": changes,
    }


def test_the_form_shows_the_gates_decision_each_check_with_its_margin_and_the_baseline_deltas():
    body = approval.approval_body(blessing({"version": 7, "metrics": {"accuracy": 0.95, "loss": 0.15}}))
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


def approve_task(root: str, rule, monkeypatch):
    """The approve task of a pipeline, its run's directory made by the stages before it; what it skips and logs
    (warnings) is kept."""
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
        "dag_run": types.SimpleNamespace(conf={}),
        "ti": ti,
        "task_instance": ti,
        "task": task,
    }
    layout = task.plan(context).layout
    write_json_atomic(layout.blessing_file, blessing(None))
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
    assert approval.approval_summary(read_json(layout.approval_file)) == "awaiting approval"

    rejected(task, context, answer("Reject", "ana", "class 3 got worse"))
    record = read_json(layout.approval_file)
    assert {k: record[k] for k in ("run_id", "decision", "by", "comment", "timed_out", "at")} == {
        "run_id": "manual__1",
        "decision": "rejected",
        "by": "ana",
        "comment": "class 3 got worse",
        "timed_out": False,
        "at": "2026-11-21T09:30:00+00:00",
    }

    assert not timeouts(warned)
    rejected(task, context, answer("Reject", None, timedout=True))  # on_timeout: reject
    assert approval.approval_summary(read_json(layout.approval_file)) == ("rejected by the timeout (no answer in time)")
    assert timeouts(warned) == [
        "no answer within export.approval.timeout_minutes (5): rejected by the timeout (no "
        "answer in time) (export.approval.on_timeout)"
    ]

    task, context, layout, warned = approve_task(
        str(tmp_path), {"timeout_minutes": 5, "on_timeout": "approve"}, monkeypatch
    )
    assert task.execute_complete(context, answer("Approve", None, timedout=True))["chosen_options"] == ["Approve"]
    assert read_json(layout.approval_file)["decision"] == "approved"
    assert "approved by the timeout (no answer in time)" in timeouts(warned)[0]
    assert approval.approval_refusal(layout.approval_file, "manual__1") is None


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
    write_json_atomic(plan.layout.blessing_file, {"blessed": True, "run_id": "approval_export", "failures": []})
    if record:
        approval.record_approval(plan.layout.approval_file, **{"run_id": "approval_export", **record})
    with pytest.raises(StageFailed) as failed:
        run(plan, "export")
    assert failed.value.returncode == EXIT_REFUSED and "refusing to export: export.approval" in str(failed.value)
    assert refusal in str(failed.value)


def test_the_runs_page_says_who_approved_or_rejected(tmp_path):
    plan = plan_for(str(tmp_path), "approval_page", export={"model_name": "digits_small", "approval": True})
    assert run_summary(plan.layout.run_dir)["approval_summary"] is None
    approval.record_approval(plan.layout.approval_file, "approval_page", approval.REJECTED, "ana", comment="drift")
    row = run_summary(plan.layout.run_dir)
    assert row["approval_summary"] == "rejected by ana (drift)" and row["approval"]["by"] == "ana"
    approval.record_approval(plan.layout.approval_file, "approval_page", approval.APPROVED, "bo")
    assert run_summary(plan.layout.run_dir)["approval_summary"] == "approved by bo"
