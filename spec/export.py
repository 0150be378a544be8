"""The export section: the name and root the blessed model is published under, the versions kept, and the human
approval before publishing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tfdist.spec.locations import artifact_location
from tfdist.spec.rules import Rule, equals, given
from tfdist.spec.section import NAME_PATTERN, Section


def _someone(approvers: Approvers) -> str | None:
    if not (approvers.users or approvers.roles):
        return "name at least one user or role, or leave 'approvers' out (then anyone who may act on the DAG answers)"
    return None


class Approvers(Section):
    """Who may answer the approval: Airflow's Human-in-the-loop assigned users."""

    users: list[Annotated[str, Field(pattern=r"^[^\s\x00-\x1f\x7f]+$", max_length=256)]] = Field(default_factory=list)
    """User ids as the auth manager knows them (the simple auth manager's: user names)."""
    roles: list[Literal["user", "op", "admin"]] = Field(default_factory=list)
    """Simple auth manager roles (a viewer may not act on a DAG): each stands for every user configured with
    exactly that role ('[core] simple_auth_manager_users') when the approval is asked. Another auth manager
    lists no role's users to a task: the approve task refuses; name users."""

    rules = (
        Rule(
            _someone,
            schema=({"anyOf": [{"properties": {f: {"minItems": 1}}, "required": [f]} for f in ("users", "roles")]},),
        ),
    )


def _timeout_given(approval: Approval) -> str | None:
    if approval.on_timeout == "approve" and approval.timeout_minutes is None:
        return "on_timeout: 'approve' needs timeout_minutes (after how long no answer approves)"
    return None


_TIMEOUT_GIVEN = {"if": equals("on_timeout", "approve"), "then": given("timeout_minutes", "integer")}


class Approval(Section):
    """A human approval between evaluate and export (Airflow's Human-in-the-loop ``ApprovalOperator``): asked
    only when the gate blesses; export publishes nothing without it."""

    approvers: Approvers | None = None
    """Who may answer: {users: [...], roles: [...]}; default: anyone who may act on the DAG (Airflow's rule)."""
    four_eyes: bool = True
    """The user who triggered the run (and so set its overrides) may not answer it; a run with no such user
    (scheduled, asset-triggered) may be answered by any approver."""
    timeout_minutes: Annotated[int, Field(ge=1)] | None = None
    """How long the approval is waited for; default: as long as it takes."""
    on_timeout: Literal["reject", "approve"] = "reject"
    """What no answer within 'timeout_minutes' means: 'reject' (nothing is published) or 'approve' (published,
    recorded and logged as approved by the timeout; with 'four_eyes', only a run no user triggered)."""

    rules = (Rule(_timeout_given, schema=(_TIMEOUT_GIVEN,)),)


class ExportSpec(Section):
    model_name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """Versions are published under '<export root>/<model_name>/'."""
    root: str | None = None
    """Where the published versions live, a local path or a bucket's URL; default: '<artifact_root>/models'."""
    keep_versions: Annotated[int, Field(ge=1)] | None = None
    """Keep the newest N versions (and always the baseline); default: keep all."""
    approval: Approval | None = None
    """A human approval before publishing: 'true', or {approvers, four_eyes, timeout_minutes, on_timeout};
    default: none, a blessed model is published at once."""

    @field_validator("approval", mode="before")
    @classmethod
    def _approval_word(cls, value: Any) -> Any:
        return {} if value is True else None if value is False else value

    @field_validator("root")
    @classmethod
    def _root(cls, value: str | None) -> str | None:
        return None if value is None else artifact_location(value)
