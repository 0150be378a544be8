"""Each rule between fields (``tfdist.spec.rules.Rule``) is declared once, with what JSON Schema can say of it: for
every rule the schema says, the specs that break it are refused by the model, by the committed schema, and by the
rule's own fragments alone, which take the base spec."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.spec.test_schema import BASE, ON_HOROVOD, PARTITIONED, as_json, changed, model_rejects, schema_errors
from tfdist.spec.rules import Rule
from tfdist.spec.section import section_models

BREAKS: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "Spec._gated": (
        "",
        {
            "no threshold given": {"validation": {"thresholds": {}}},
            "no validation section content": {"validation": {}},
        },
    ),
    "Threshold._a_bound": (
        "validation.thresholds.accuracy",
        {
            "a threshold without bounds": {"validation.thresholds.accuracy": {}},
            "a threshold of nulls": {"validation.thresholds.accuracy": {"lower": None, "upper": None}},
        },
    ),
    "ValidationSpec._one_way": ("validation", {"unvalidated with thresholds": {"validation.allow_unvalidated": True}}),
    "TrainingSpec._horovod_or_parameter_servers": (
        "training",
        {
            "horovod with parameter servers": {**ON_HOROVOD, "training.strategy": "parameter_server"},
            "horovod with num_ps": {**ON_HOROVOD, "training.num_ps": 1},
            "mpi settings without horovod": {"training.mpi": {"slots_per_worker": 1}},
            "parameter_server without ps": {"training.strategy": "parameter_server"},
            "ps without parameter_server": {"training.num_ps": 1},
        },
    ),
    "Spec._kubernetes_section": ("", {"kubernetes without its section": {"training.launcher": "kubernetes"}}),
    "Approval._timeout_given": (
        "export.approval",
        {"approve on timeout without a timeout": {"export.approval": {"on_timeout": "approve"}}},
    ),
    "Approvers._someone": (
        "export.approval.approvers",
        {"approvers naming nobody": {"export.approval": {"approvers": {"users": [], "roles": []}}}},
    ),
    "AssetSchedule._partitions_or_time": (
        "schedule",
        {"partitioned with a cron": {"schedule": {**PARTITIONED["schedule"], "cron": "0 3 * * *"}}},
    ),
    "Spec._one_window": (
        "",
        {
            "partitioned with a window": {**PARTITIONED, "data.window": 2},
            "partitioned by day, source by month": {**PARTITIONED, "data.source": "/data/{year}/{month}/*.csv"},
            "partitioned by hour, source by day": {
                "schedule": {"assets": ["s3://lake/raw"], "partitions": "hour"},
                "data.source": "/data/{date}/*.csv",
            },
            "partitioned, source names no time": {**PARTITIONED, "data.source": "/data/digits/*.csv"},
        },
    ),
}
"""For each rule the schema says ('<section>.<check>'): where its section is in a spec, and the specs breaking it
(BASE with the fields given set)."""


def said_by_the_schema() -> dict[str, Rule[Any]]:
    """Every rule with JSON Schema fragments, by '<section>.<check>'."""
    return {
        f"{section.__name__}.{rule.check.__name__}": rule
        for section in section_models()
        for rule in section.rules
        if rule.schema
    }


def test_every_rule_the_schema_says_is_broken_below():
    assert set(said_by_the_schema()) == set(BREAKS)


def at(spec: dict[str, Any], place: str) -> Any:
    """The part of a spec (as JSON) at a dotted ``place`` ('' the whole spec), None when it is not there."""
    node: Any = as_json(spec)
    for part in place.split(".") if place else ():
        node = node.get(part) if isinstance(node, dict) else None
    return node


@pytest.mark.parametrize(
    "rule, place, change",
    [
        pytest.param(rule, place, change, id=f"{rule}: {name}")
        for rule, (place, breaks) in BREAKS.items()
        for name, change in breaks.items()
    ],
)
def test_a_rule_broken_is_refused_by_the_model_the_schema_and_its_own_fragments(rule, place, change):
    spec = changed(BASE, change)
    assert model_rejects(spec)
    assert schema_errors(spec)
    declared = said_by_the_schema()[rule]
    fragments = jsonschema.Draft202012Validator({"allOf": list(declared.schema)})
    section, base = at(spec, place), at(BASE, place)
    if declared.field is not None:
        section, base = section and section.get(declared.field), base and base.get(declared.field)
    assert not fragments.is_valid(section)
    if base is not None:
        assert fragments.is_valid(base)
