"""publishing/approval.py: who may answer (approvers, four-eyes), why an answer or its comment does not count, the
form's body from the gate's blessing record, the decision's record (approval.json), the export stage's refusal
and the decision in words. The approve task that uses them: tests/operators/test_approval.py."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.operators.test_report import rules_of
from tfdist.contract.publish_records import Approval, Blessing
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.publishing import approval, gate

CHANGE = {"accuracy": {"direction": "higher_is_better", "absolute": 0.01, "relative": None}}
AT = dt.datetime(2026, 11, 21, 9, 30, tzinfo=dt.UTC)


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


def test_respondents_are_the_approvers_but_the_triggering_user_or_anyone_without_approvers():
    assert approval.respondents(None, "tom", "manual", True) == (None, "tom")
    assert approval.respondents(["tom", "ana", "ana"], "tom", "manual", True) == (["ana"], "tom")
    assert approval.respondents(["tom", "ana"], "tom", "manual", False) == (["ana", "tom"], None)
    assert approval.respondents(["tom"], None, "scheduled", True) == (["tom"], None)  # nobody triggered it
    assert approval.respondents(None, None, "asset_triggered", True) == (None, None)
    assert approval.respondents(None, None, "manual", False) == (None, None)


@pytest.mark.parametrize(
    "approvers, triggered_by, four_eyes, refusal",
    [
        (None, None, True, "export.approval.four_eyes: this manual run names no triggering user, so who may not"),
        (["tom"], "tom", True, "export.approval.approvers: nobody is left to answer: the approvers are ['tom'], and"),
        ([], "tom", False, "export.approval.approvers: nobody is left to answer: the approvers are []; name another"),
    ],
)
def test_respondents_are_refused_when_four_eyes_cannot_check_or_nobody_is_left(
    approvers, triggered_by, four_eyes, refusal
):
    with pytest.raises(approval.Refused) as refused:
        approval.respondents(approvers, triggered_by, "manual", four_eyes)
    assert str(refused.value).startswith(refusal), refused.value


def refusal(by: str | None, approve: bool = True, timed_out: bool = False, asked=None, excluded=None, comment=None):
    user = by and {"id": by, "name": by}
    return approval.answer_refusal(
        user, approve=approve, timed_out=timed_out, asked=asked, excluded=excluded, comment=comment
    )


def test_an_answer_counts_unless_from_the_triggering_user_or_no_approver_or_with_a_bad_comment():
    assert refusal("ana") is None and refusal("ana", asked=["ana"], excluded="tom", comment="fine") is None
    assert refusal("tom", excluded="tom") == "tom triggered the run and may not answer it (export.approval.four_eyes)"
    assert refusal("ursula", asked=["ana", "olga"]) == "ursula is not one of export.approval.approvers (ana, olga)"
    assert refusal("ana", comment="two\nlines").startswith("the comment has a control character (U+000A)")
    assert refusal(None) is None  # nothing to check: anyone may answer
    assert refusal(None, asked=["ana"]).startswith("the answer names no user, so export.approval's approvers")
    assert refusal(None, excluded="tom").startswith("the answer names no user")


def test_the_timeout_counts_unless_it_would_approve_a_run_the_excluded_user_triggered():
    assert refusal(None, approve=False, timed_out=True, excluded="tom") is None  # on_timeout: reject
    assert refusal(None, approve=True, timed_out=True) is None
    assert refusal(None, approve=True, timed_out=True, excluded="tom") == (
        "no answer in time, and on_timeout: approve does not publish a run tom triggered (export.approval.four_eyes)"
    )


@pytest.mark.parametrize(
    "comment, refused",
    [
        (None, None),
        ("", None),
        ("x" * approval.MAX_COMMENT, None),
        ("x" * (approval.MAX_COMMENT + 1), "the comment has 501 characters, more than the 500 allowed; shorten it"),
        ("ok\x1b[2Jfine", "the comment has a control character (U+001B); write it on one line of plain text"),
        ("a\x85b", "the comment has a control character (U+0085); write it on one line of plain text"),
        ("ünïcode — fine", None),
        (["a"], "the comment must be text, got list"),
        (3, "the comment must be text, got int"),
    ],
)
def test_a_comment_is_text_of_at_most_max_comment_characters_without_control_characters(comment, refused):
    assert approval.comment_refusal(comment) == refused


def test_the_record_says_the_decision_who_when_and_why_and_reads_back(tmp_path):
    path = str(tmp_path / "approval.json")
    written = approval.record_approval(
        path, "manual__1", approval.REJECTED, "ana", AT, "drift", asked=["ana"], excluded="tom", refused=None
    )
    assert read_json(path) == {
        "run_id": "manual__1",
        "decision": "rejected",
        "by": "ana",
        "comment": "drift",
        "timed_out": False,
        "at": "2026-11-21T09:30:00+00:00",
        "asked": ["ana"],
        "excluded": "tom",
        "refused": None,
        "schema_version": 1,
    }
    assert read_record(path, Approval) == written
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    now = approval.record_approval(path, "manual__2", approval.AWAITING, comment="")  # overwrites
    assert (now.run_id, now.by, now.comment, now.asked) == ("manual__2", None, None, None)
    assert before <= dt.datetime.fromisoformat(now.at) <= dt.datetime.now(dt.UTC)


def test_export_is_refused_unless_the_record_approves_this_run(tmp_path):
    path = str(tmp_path / "approval.json")
    assert approval.approval_refusal(path, "manual__1") == (
        f"export.approval is configured and {path} holds no approval of this run"
    )
    approval.record_approval(path, "manual__1", approval.AWAITING)
    assert approval.approval_refusal(path, "manual__1") == "export.approval: the run is awaiting approval"
    assert approval.approval_refusal(path, "manual__2").endswith("holds no approval of this run")
    approval.record_approval(path, "manual__1", approval.REJECTED, "ana", comment="no")
    assert approval.approval_refusal(path, "manual__1") == "export.approval: the run is rejected by ana (no)"
    approval.record_approval(path, "manual__1", approval.APPROVED, "ana")
    assert approval.approval_refusal(path, "manual__1") is None
    assert approval.approval_refusal(path, "another run") is not None


def test_the_decision_in_words(tmp_path):
    def summary(decision, by=None, **fields) -> str | None:
        return approval.approval_summary(
            approval.record_approval(str(tmp_path / "a.json"), "r", decision, by, AT, **fields)
        )

    assert approval.approval_summary(None) is None
    assert summary(approval.AWAITING, asked=["ana"]) == "awaiting approval"
    assert summary(approval.APPROVED, "bo") == "approved by bo"
    assert summary(approval.REJECTED, "ana", comment="drift") == "rejected by ana (drift)"
    assert summary(approval.REJECTED, timed_out=True) == "rejected by the timeout (no answer in time)"
    assert summary(approval.APPROVED, timed_out=True) == "approved by the timeout (no answer in time)"
    assert summary(approval.REJECTED, "tom", refused="tom may not") == "rejected: tom may not"
