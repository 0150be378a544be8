"""The spec's overridable fields as typed Airflow Params: the trigger form's fields, with the spec model's
types, bounds, choices and descriptions."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from operators.spec import Spec, field_value

_KEPT = ("type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
         "pattern", "description")


def param_schema(prop: dict[str, Any]) -> dict[str, Any]:
    """A pydantic property schema → Param's JSON schema (an optional field allows null)."""
    branches = prop.get("anyOf", [prop])
    schema = {k: v for b in branches for k, v in b.items() if k in _KEPT and k != "type"}
    types = [b["type"] for b in branches if "type" in b]
    if types:
        schema["type"] = types[0] if len(types) == 1 else types
    if "description" in prop:
        schema["description"] = prop["description"]
    return schema


def dag_params(spec: Spec) -> dict[str, Param]:
    params = {}
    for path in spec.overridable:
        parent, _, leaf = path.rpartition(".")
        section = field_value(spec, parent) if parent else spec
        prop = type(section).model_json_schema()["properties"][leaf]
        params[path] = Param(field_value(spec, path), title=path, **param_schema(prop))
    return params
