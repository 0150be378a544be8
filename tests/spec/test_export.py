"""The export section (tfdist.spec.export): the name and root versions are published under, and the human
approval before publishing; each refusal names its field."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import ExportSpec


def test_the_root_is_a_location_and_approval_true_is_the_defaults():
    export = ExportSpec.model_validate({"model_name": "m", "root": "s3://models/team/", "approval": True})
    assert export.root == "s3://models/team"
    assert export.approval is not None and (export.approval.four_eyes, export.approval.on_timeout) == (True, "reject")
    assert export.approval.approvers is None and export.approval.timeout_minutes is None
    assert ExportSpec.model_validate({"model_name": "m", "approval": False}).approval is None


@pytest.mark.parametrize(
    "export, problem",
    [
        (
            {"model_name": "m", "approval": {"approvers": {}}},
            "export.approval.approvers: name at least one user or role, or leave 'approvers' out",
        ),
        (
            {"model_name": "m", "approval": {"on_timeout": "approve"}},
            "export.approval: on_timeout: 'approve' needs timeout_minutes (after how long no answer approves)",
        ),
        ({"model_name": "m", "approval": {"approvers": {"roles": ["viewer"]}}}, "export.approval.approvers.roles[0]"),
        (
            {"model_name": "m", "approval": {"approvers": {"users": ["ann smith"]}}},
            "export.approval.approvers.users[0]",
        ),
        (
            {"model_name": "m", "root": "models"},
            "export.root: must be an absolute path (after expanding ~ and $VARS), got 'models'",
        ),
    ],
)
def test_a_bad_export_section_is_refused_naming_the_field(tmp_path, export, problem):
    found = problems(make_spec(str(tmp_path), export=export))
    assert any(p.startswith(problem) for p in found), found


def test_an_approval_by_named_users_and_roles_with_a_timeout_is_read(tmp_path):
    from tfdist.spec import load_spec

    approval = {"approvers": {"users": ["ann"], "roles": ["op"]}, "timeout_minutes": 60, "on_timeout": "approve"}
    spec = load_spec(make_spec(str(tmp_path), export={"model_name": "m", "approval": approval}))
    assert spec.export.approval.model_dump() == {**approval, "four_eyes": True}
