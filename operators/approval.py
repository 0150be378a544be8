"""PublishApprovalOperator: a human approves or rejects publishing a blessed model (``export.approval``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param, conf
from airflow.sdk.exceptions import AirflowFailException

from tfdist.contract.publish_records import Blessing
from tfdist.contract.records import read_record
from tfdist.operators.base import RunPlanned
from tfdist.operators.plan import as_datetime
from tfdist.publishing import approval
from tfdist.spec import Spec, load_spec
from tfdist.spec.export import Approval


class PublishApprovalOperator(RunPlanned, ApprovalOperator):
    """Between evaluate and export: Airflow's Human-in-the-loop approval, its body the gate's decision, each
    check with its margin and the changes against the baseline (from ``eval/blessing.json``). The run's
    ``approval.json`` says awaiting, then who approved or rejected, when and why; export publishes only an
    approved run. Rejected (or no answer within ``timeout_minutes`` and ``on_timeout: reject``), export is
    skipped; ``on_timeout: approve`` publishes, recorded and logged as approved by the timeout.

    Only ``approvers`` (Airflow's assigned users) may answer, and with ``four_eyes`` not the user who triggered
    the run; an answer that does not count (also a comment over ``approval.MAX_COMMENT`` characters or with a
    control character) is recorded as refused and rejects."""

    template_fields = (*ApprovalOperator.template_fields, "run_dir", "data_interval_start", "data_interval_end")
    ui_color = "#fff59d"

    def __init__(
        self,
        *,
        spec: Spec | dict | str,
        pipeline_group: str | None = None,
        run_dir: str | None = None,
        data_interval_start: str | None = None,
        data_interval_end: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.spec = load_spec(spec)
        self.pipeline_group = pipeline_group
        kwargs.pop("params", None)  # the DAG's, which Airflow passes: the task's context has them without it
        rule = self.approval_rule
        timed = rule.timeout_minutes is not None
        super().__init__(
            subject=f"Publish a new version of {self.spec.export.model_name}?",
            defaults=(self.APPROVE if rule.on_timeout == "approve" else self.REJECT) if timed else None,
            response_timeout=None if rule.timeout_minutes is None else dt.timedelta(minutes=rule.timeout_minutes),
            params={
                "comment": Param(
                    "",
                    type=["string", "null"],
                    maxLength=approval.MAX_COMMENT,
                    pattern=r"^[^\x00-\x1f\x7f-\x9f]*$",
                    title="Comment",  # the form's one field
                    description="Why (recorded with the decision and shown on the runs page)",
                )
            },
            retries=0,
            **kwargs,
        )
        self.run_dir = run_dir
        self.data_interval_start = data_interval_start
        self.data_interval_end = data_interval_end

    @property
    def approval_rule(self) -> Approval:
        """The spec's ``export.approval``: a pipeline has this task only when it is set."""
        if self.spec.export.approval is None:
            raise ValueError(f"spec {self.spec.name!r}: export.approval is not set, so nothing asks for an approval")
        return self.spec.export.approval

    def execute(self, context: Any) -> None:
        layout = self.plan(context).layout
        self.body = approval.approval_body(read_record(layout.blessing_file, Blessing))
        try:
            asked, excluded = self.respondents(context)
        except approval.Refused as refused:
            approval.record_approval(layout.approval_file, context["run_id"], approval.REJECTED, refused=str(refused))
            raise AirflowFailException(str(refused)) from None
        self.assigned_users = [{"id": user, "name": user} for user in asked] if asked else None
        approval.record_approval(
            layout.approval_file, context["run_id"], approval.AWAITING, asked=asked, excluded=excluded
        )
        super().execute(context)

    def respondents(self, context: Any) -> tuple[list[str] | None, str | None]:
        """(who may answer, None: anyone who may act on the DAG; whom four-eyes leaves out): approval.respondents."""
        run = context["dag_run"]
        return approval.respondents(
            self.approvers(),
            run.triggering_user_name,
            str(getattr(run.run_type, "value", run.run_type)),
            self.approval_rule.four_eyes,
        )

    def approvers(self) -> list[str] | None:
        """The users ``approvers`` names, with its roles' users (None: no ``approvers``)."""
        named = self.approval_rule.approvers
        return None if named is None else [*named.users, *role_members(named.roles)]

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Record the decision, then act on it: a refused answer rejects; a rejection skips export by raising, so
        it is recorded first."""
        if "error" not in event:
            self.validate_chosen_options(event["chosen_options"])
            event = self.record_decision(context, event)
        return super().execute_complete(context, event)

    def record_decision(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Record the answer in approval.json; the event to act on (a refused answer's: a rejection)."""
        asked, excluded = self.respondents(context)
        approve, by = event["chosen_options"] == [self.APPROVE], event["responded_by_user"]
        comment = (event["params_input"] or {}).get("comment")
        timed_out = bool(event.get("timedout"))
        refused = approval.answer_refusal(
            by, approve=approve, timed_out=timed_out, asked=asked, excluded=excluded, comment=comment
        )
        record = approval.record_approval(
            self.plan(context).layout.approval_file,
            context["run_id"],
            approval.APPROVED if approve and not refused else approval.REJECTED,
            by=(by or {}).get("name"),
            at=as_datetime(event["responded_at"]),
            comment=None if refused else comment,
            timed_out=timed_out,
            asked=asked,
            excluded=excluded,
            refused=refused,
        )
        if refused:
            self.log.warning("the answer does not count: %s", approval.approval_summary(record))
            return {**event, "chosen_options": [self.REJECT], "params_input": {}}
        if record.timed_out:
            self.log.warning(
                "no answer within export.approval.timeout_minutes (%s): %s (export.approval.on_timeout)",
                self.approval_rule.timeout_minutes,
                approval.approval_summary(record),
            )
        else:
            self.log.info("%s", approval.approval_summary(record))
        return event


SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def role_members(roles: Collection[str]) -> list[str]:
    """The simple auth manager's users configured with one of ``roles``; refused with another auth manager, which
    lists no role's users to a task."""
    if not roles:
        return []
    manager = conf.get("core", "auth_manager", fallback=SIMPLE_AUTH_MANAGER)
    if manager != SIMPLE_AUTH_MANAGER:
        raise approval.Refused(
            f"export.approval.approvers.roles: only the simple auth manager lists a role's users to a task, and this "
            f"Airflow uses {manager}; name the approvers under approvers.users"
        )
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    return [user.username for user in SimpleAuthManager.get_users() if (user.role or "").lower() in roles]
