"""The human approval before publishing (``export.approval``): who may answer (approvers, four-eyes) and why an
answer does not count; the form's body, built from the gate's blessing record; the decision's record
(``approval.json`` in the run directory), which the Airflow side writes and the export stage requires; and the
decision in words, for the training-runs page."""

from __future__ import annotations

import datetime as dt
import unicodedata
from typing import Any

from tfdist.contract.publish_records import Approval, Blessing, Decision
from tfdist.contract.records import read_record_if_exists, write_record

AWAITING: Decision = "awaiting"
APPROVED: Decision = "approved"
REJECTED: Decision = "rejected"
MAX_COMMENT = 500
"""The most characters an answer's comment may have."""
UNATTENDED_RUNS = ("scheduled", "asset_triggered")
"""Run types no user triggers: four-eyes has nobody to leave out."""


class Refused(Exception):
    """The approval cannot be asked, or an answer does not count: why, naming the field and the fix."""


def respondents(
    approvers: list[str] | None, triggered_by: str | None, run_type: str, four_eyes: bool
) -> tuple[list[str] | None, str | None]:
    """(who may answer: the approvers without the user four-eyes leaves out, or None for anyone who may act on the
    DAG; that user). Refused when four-eyes cannot be checked or leaves no approver."""
    excluded = triggered_by if four_eyes else None
    if four_eyes and not triggered_by and run_type not in UNATTENDED_RUNS:
        raise Refused(
            f"export.approval.four_eyes: this {run_type} run names no triggering user, so who may not approve it "
            "is unknown; trigger it as a signed-in user, or set four_eyes: false"
        )
    if approvers is None:
        return None, excluded
    asked = sorted(set(approvers) - {excluded})
    if not asked:
        left_out = f", and {excluded} triggered the run (four_eyes)" if excluded else ""
        raise Refused(
            f"export.approval.approvers: nobody is left to answer: the approvers are {sorted(set(approvers))}"
            f"{left_out}; name another approver"
        )
    return asked, excluded


def answer_refusal(
    by: dict[str, str] | None,
    *,
    approve: bool,
    timed_out: bool,
    asked: list[str] | None,
    excluded: str | None,
    comment: Any,
) -> str | None:
    """Why an answer from ``by`` (Airflow's user: id and name), or the timeout's, does not count, or None."""
    if timed_out:
        return (
            f"no answer in time, and on_timeout: approve does not publish a run {excluded} triggered "
            "(export.approval.four_eyes)"
            if approve and excluded
            else None
        )
    if by is None:
        checked = asked is not None or excluded is not None
        return (
            "the answer names no user, so export.approval's approvers and four_eyes cannot be checked"
            if checked
            else None
        )
    if excluded in (by["id"], by["name"]):
        return f"{by['name']} triggered the run and may not answer it (export.approval.four_eyes)"
    if asked is not None and by["id"] not in asked:
        return f"{by['name']} is not one of export.approval.approvers ({', '.join(asked)})"
    return comment_refusal(comment)


def comment_refusal(comment: Any) -> str | None:
    """Why an answer's comment is refused: not text, over MAX_COMMENT characters, or with a control character."""
    if comment is None:
        return None
    if not isinstance(comment, str):
        return f"the comment must be text, got {type(comment).__name__}"
    if len(comment) > MAX_COMMENT:
        return f"the comment has {len(comment)} characters, more than the {MAX_COMMENT} allowed; shorten it"
    control = next((c for c in comment if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        return f"the comment has a control character (U+{ord(control):04X}); write it on one line of plain text"
    return None


def approval_body(blessing: Blessing) -> str:
    """The approval form's body (markdown): the gate's decision, each check with its value, rule and margin, and
    the metrics' changes against the baseline."""
    lines = [
        f"**Gate: {'blessed' if blessing.blessed else 'NOT blessed'}** ({blessing.gate}), checkpoint "
        f"step {blessing.step} on {blessing.eval_examples} eval examples.",
        "",
    ]
    if blessing.checks:
        lines += ["| check | metric | value | rule | margin | passed |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {c.kind} | {c.metric} | {c.value:.4f} | {c.rule} | {c.margin:+.4f} | {'yes' if c.passed else 'NO'} |"
            for c in blessing.checks
        ]
    else:
        lines.append("No threshold applies.")
    return "\n".join(lines + _baseline_lines(blessing))


def _baseline_lines(blessing: Blessing) -> list[str]:
    """The approval body's lines on the baseline: the metrics' changes against it, or why there are none."""
    scored, metrics = blessing.scored_baseline, blessing.metrics or {}
    if scored is None:
        return [
            "",
            "No baseline compared: "
            + (
                "it cannot score this run's eval data."
                if blessing.baseline
                else "nothing published as of this data interval."
            ),
        ]
    return [
        "",
        f"Against the baseline, version {scored.version}:",
        "",
        "| metric | baseline | this run | change |",
        "|---|---|---|---|",
        *(
            f"| {m} | {scored.metrics[m]:.4f} | {metrics[m]:.4f} | {d.absolute:+.4f} |"
            for m, d in blessing.deltas.items()
        ),
    ]


def record_approval(
    path: str,
    run_id: str,
    decision: Decision,
    by: str | None = None,
    at: dt.datetime | None = None,
    comment: str | None = None,
    timed_out: bool = False,
    asked: list[str] | None = None,
    excluded: str | None = None,
    refused: str | None = None,
) -> Approval:
    """Write the run's approval record: ``decision`` (awaiting, approved or rejected), who decided (None: the
    timeout), when, their comment, whether no answer came in time, who was asked (None: anyone who may act on
    the DAG), whom four-eyes left out, and why the answer or the request was refused (then rejected)."""
    record = Approval(
        run_id=run_id,
        decision=decision,
        by=by,
        comment=comment or None,
        timed_out=timed_out,
        at=(at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
        asked=asked,
        excluded=excluded,
        refused=refused,
    )
    write_record(path, record)
    return record


def approval_refusal(path: str, run_id: str) -> str | None:
    """Why the run may not be published for want of an approval (None: it is approved)."""
    record = read_record_if_exists(path, Approval)
    if record is None or record.run_id != run_id:
        return f"export.approval is configured and {path} holds no approval of this run"
    if record.decision != APPROVED:
        return f"export.approval: the run is {approval_summary(record)}"
    return None


def approval_summary(record: Approval | None) -> str | None:
    """The decision in words: 'awaiting approval', 'approved by X', 'rejected by X (comment)', or the timeout's."""
    if record is None:
        return None
    if record.decision == AWAITING:
        return "awaiting approval"
    if record.refused:
        return f"rejected: {record.refused}"
    by = "the timeout (no answer in time)" if record.timed_out else record.by
    return f"{record.decision} by {by}" + (f" ({record.comment})" if record.comment else "")
