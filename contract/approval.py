"""The human approval before publishing (``export.approval``): the form's body, built from the gate's blessing
record; the decision's record (``approval.json`` in the run directory), which the Airflow side writes and the
export stage requires; and the decision in words, for the training-runs page."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tfdist.contract.records import read_json_if_exists, write_json_atomic

AWAITING, APPROVED, REJECTED = "awaiting", "approved", "rejected"


def approval_body(blessing: dict[str, Any]) -> str:
    """The approval form's body (markdown): the gate's decision, each check with its value, rule and margin, and
    the metrics' changes against the baseline."""
    lines = [
        f"**Gate: {'blessed' if blessing['blessed'] else 'NOT blessed'}** ({blessing['gate']}), checkpoint "
        f"step {blessing['step']} on {blessing['eval_examples']} eval examples.",
        "",
    ]
    if blessing["checks"]:
        lines += ["| check | metric | value | rule | margin | passed |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {c['kind']} | {c['metric']} | {c['value']:.4f} | {c['rule']} | {c['margin']:+.4f} | "
            f"{'yes' if c['passed'] else 'NO'} |"
            for c in blessing["checks"]
        ]
    else:
        lines.append("No threshold applies.")
    baseline = blessing.get("baseline") or {}
    if "metrics" in baseline:
        lines += [
            "",
            f"Against the baseline, version {baseline['version']}:",
            "",
            "| metric | baseline | this run | change |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {m} | {baseline['metrics'][m]:.4f} | {blessing['metrics'][m]:.4f} | {d['absolute']:+.4f} |"
            for m, d in blessing["deltas"].items()
        ]
    else:
        lines += [
            "",
            "No baseline compared: "
            + ("it cannot score this run's eval data." if baseline else "nothing published as of this data interval."),
        ]
    return "\n".join(lines)


def record_approval(
    path: str,
    run_id: str,
    decision: str,
    by: str | None = None,
    at: dt.datetime | None = None,
    comment: str | None = None,
    timed_out: bool = False,
) -> dict[str, Any]:
    """Write the run's approval record: ``decision`` (awaiting, approved or rejected), who decided (None: the
    timeout), when, their comment, and whether no answer came in time."""
    record = {
        "run_id": run_id,
        "decision": decision,
        "by": by,
        "comment": comment or None,
        "timed_out": timed_out,
        "at": (at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
    }
    write_json_atomic(path, record)
    return record


def approval_refusal(path: str, run_id: str) -> str | None:
    """Why the run may not be published for want of an approval (None: it is approved)."""
    record = read_json_if_exists(path)
    if record is None or record["run_id"] != run_id:
        return f"export.approval is configured and {path} holds no approval of this run"
    if record["decision"] != APPROVED:
        return f"export.approval: the run is {approval_summary(record)}"
    return None


def approval_summary(record: dict[str, Any] | None) -> str | None:
    """The decision in words: 'awaiting approval', 'approved by X', 'rejected by X (comment)', or the timeout's."""
    if record is None:
        return None
    if record["decision"] == AWAITING:
        return "awaiting approval"
    by = "the timeout (no answer in time)" if record["timed_out"] else record["by"]
    return f"{record['decision']} by {by}" + (f" ({record['comment']})" if record["comment"] else "")
