"""The spec's overridable fields as typed Airflow Params: the trigger form's fields, with the spec model's
types, bounds, choices and descriptions."""

from __future__ import annotations

import functools
from typing import Any

from airflow.sdk import Param
from pydantic import BaseModel

from tfdist.spec import Spec, field_doc, field_value, section_models

_KEPT = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "description",
)


def param_schema(prop: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """A pydantic property schema → Param's JSON schema (an optional field allows null)."""
    branches = prop.get("anyOf", [prop])
    schema = {k: v for b in branches for k, v in b.items() if k in _KEPT and k != "type"}
    types = [b["type"] for b in branches if "type" in b]
    if types:
        schema["type"] = types[0] if len(types) == 1 else types
    if description:
        schema["description"] = description
    return schema


@functools.cache
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()["properties"]


def warm_up() -> None:
    """Build every spec section's JSON schema and read the field docs now. In a process that forks one
    process per parse (the dag-processor, through the plugin), no parse then pays for them."""
    for section in section_models():
        _properties(section)
    models: list[type[BaseModel]] = [Spec, *section_models()]
    for model in models:
        for name in model.model_fields:
            field_doc(model, name)


def dag_params(spec: Spec) -> dict[str, Param]:
    params = {}
    for path in spec.overridable:
        parent, _, leaf = path.rpartition(".")
        section = field_value(spec, parent) if parent else spec
        model: type[BaseModel] = type(section)
        params[path] = Param(
            field_value(spec, path), title=path, **param_schema(_properties(model)[leaf], field_doc(model, leaf))
        )
    return params
