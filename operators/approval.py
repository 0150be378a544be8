"""PublishApprovalOperator: a human approves or rejects publishing a blessed model (``export.approval``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param

from tfdist.contract import approval, read_json
from tfdist.operators.base import RunPlanned
from tfdist.operators.plan import as_datetime
from tfdist.spec import Spec, load_spec
from tfdist.spec.model import Approval


class PublishApprovalOperator(RunPlanned, ApprovalOperator):
    """Between evaluate and export: Airflow's Human-in-the-loop approval, its body the gate's decision, each
    check with its margin and the changes against the baseline (from ``eval/blessing.json``). The run's
    ``approval.json`` says awaiting, then who approved or rejected, when and why; export publishes only an
    approved run. Rejected (or no answer within ``timeout_minutes`` and ``on_timeout: reject``), export is
    skipped; ``on_timeout: approve`` publishes, recorded and logged as approved by the timeout."""

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
        self.body = approval.approval_body(read_json(layout.blessing_file))
        approval.record_approval(layout.approval_file, context["run_id"], approval.AWAITING)
        super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Record the decision, then act on it: a rejection skips export by raising, so it is recorded first."""
        if "error" not in event:
            self.validate_chosen_options(event["chosen_options"])
            self.record_decision(context, event)
        return super().execute_complete(context, event)

    def record_decision(self, context: Any, event: dict[str, Any]) -> None:
        decision = approval.APPROVED if event["chosen_options"] == [self.APPROVE] else approval.REJECTED
        record = approval.record_approval(
            self.plan(context).layout.approval_file,
            context["run_id"],
            decision,
            by=(event["responded_by_user"] or {}).get("name"),
            at=as_datetime(event["responded_at"]),
            comment=(event["params_input"] or {}).get("comment"),
            timed_out=bool(event.get("timedout")),
        )
        if record["timed_out"]:
            self.log.warning(
                "no answer within export.approval.timeout_minutes (%s): %s (export.approval.on_timeout)",
                self.approval_rule.timeout_minutes,
                approval.approval_summary(record),
            )
        else:
            self.log.info("%s", approval.approval_summary(record))
