"""The spec's JSON Schema (Draft 2020-12): ``Spec.model_json_schema()``, refined so that it says what the model's
validators say wherever JSON Schema can, for an editor to complete and check a YAML spec with.

The committed copy, ``tfdist-spec.schema.json`` beside this module (shipped in the wheel), is what a spec names
on its first line, ``# yaml-language-server: $schema=<path or URL of the file>``; ``tfdist schema`` prints the
schema generated from the model, and a test keeps the two equal.

Beyond pydantic's schema (types, bounds, enums, patterns, required fields, unknown keys, the model families as a
discriminated union), the refinements say:

- each field's docstring, as its ``description``;
- ``start_date``: an ISO date or date and time; ``data.source``: only the known ``{placeholders}``;
  ``artifact_root`` and ``export.root``: local absolute paths (``~`` and ``$VARS`` allowed) or a bucket's URL;
  ``training.mpi.extra_args``: none the launcher sets; ``schedule.assets``: URIs with a scheme, once each;
- the short forms the model reads: ``warm_start: baseline``, ``approval: true``;
- ``overridable``: the fields a run may override; ``validation``'s metric names: those a model can report;
- the rules between fields that compare a value with a fixed one (``if``/``then``): the gate is required,
  Horovod settings need backend 'mpi', a parameter-server strategy needs parameter servers, 'kubernetes'
  needs its section, a partitioned schedule takes no cron and no ``data.window`` and a source naming its
  period, a timeout that approves needs its timeout, approvers name a user or a role, a threshold needs a bound.

What it cannot say (rules comparing two values of the spec, or needing code: a cron's validity, the batch split
across replicas, the shards per reader, distinct feature names, the metrics this model reports, the pods'
paths below the artifact root, ...) only the model checks: ``tests/spec/test_schema.py`` lists them. The model
also reads a few looser forms the schema does not describe (a number or a yes/no as a string, a Unix time as
``start_date``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tfdist.spec.model import (
    BUCKET,
    OBJECT_STORES,
    PARTITION_PERIODS,
    RESERVED_MPI_ARGS,
    SOURCE_PERIODS,
    SOURCE_PLACEHOLDERS,
    Spec,
    section_models,
)
from tfdist.spec.overrides import field_doc, override_policy
from tfdist.spec.tasks import ALL_METRICS

JsonSchema = dict[str, Any]

SCHEMA_FILE = Path(__file__).with_name("tfdist-spec.schema.json")
"""The committed schema, package data of ``tfdist.spec``."""
DIALECT = "https://json-schema.org/draft/2020-12/schema"

ISO_DATETIME = (
    r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    r"([Tt ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d([.,]\d+)?)?([Zz]|[+-]([01]\d|2[0-3]):?[0-5]\d)?)?$"
)
"""A date, or a date and time (UTC unless it gives an offset), as the model reads them from a string."""
ARTIFACT_LOCATION = (
    rf"^(?:[~$/](?!.*://)|(?:{'|'.join(OBJECT_STORES)})://{BUCKET.pattern}(?:/(?!\.\.?(?:/|$))[^/]+)*/?$)"
)
"""Absolute once '~' and '$VARS' are expanded, and no URL (the model expands them to check)."""
ASSET_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*:/*[^/]"
"""A scheme and a location."""
PRINTABLE_ASCII = r"^[!-~]+$"
"""ASCII without spaces."""


def _placeholder_pattern() -> str:
    """A source whose '{placeholders}' are the known ones ('{{' and '}}' are literal braces)."""
    names = "|".join(SOURCE_PLACEHOLDERS)
    return rf"^([^{{}}]|\{{\{{|\}}\}}|\{{({names})([!:][^{{}}]*)?\}})*$"


def _reserved_mpi_args() -> str:
    """An argument the launcher sets, alone or as '<argument>=<value>'."""
    if not all(re.fullmatch(r"[-A-Za-z0-9]+", arg) for arg in RESERVED_MPI_ARGS):
        raise ValueError("an MPI argument with a regex metacharacter: escape it for ECMA-262 and Python alike")
    return rf"^({'|'.join(RESERVED_MPI_ARGS)})(=|$)"


def _is(field: str, value: Any) -> JsonSchema:
    """An object whose ``field`` is given as ``value``."""
    return {"properties": {field: {"const": value}}, "required": [field]}


def _given(field: str, json_type: str) -> JsonSchema:
    """An object whose ``field`` is given and not null."""
    return {"properties": {field: {"type": json_type}}, "required": [field]}


def _add(schema: JsonSchema, *rules: JsonSchema) -> None:
    schema.setdefault("allOf", []).extend(rules)


def _describe(schema: JsonSchema) -> None:
    """Each field's docstring as its description, in place of pydantic's title made of its name."""
    defs = schema["$defs"]
    models: list[type[BaseModel]] = [Spec, *section_models()]
    for model in models:
        target = schema if model is Spec else defs.get(model.__name__)
        if target is None:  # an abstract base of sections
            continue
        for name, info in model.model_fields.items():
            prop = target["properties"][info.alias or name]
            prop.pop("title", None)
            if doc := field_doc(model, name):
                prop["description"] = doc


def _refine_values(schema: JsonSchema) -> None:
    """Patterns and short forms of single fields."""
    defs, props = schema["$defs"], schema["properties"]
    props["start_date"] = {**{k: v for k, v in props["start_date"].items() if k != "format"}, "pattern": ISO_DATETIME}
    for owner, field in ((props, "artifact_root"), (defs["ExportSpec"]["properties"], "root")):
        target = owner[field]["anyOf"][0] if "anyOf" in owner[field] else owner[field]
        target["pattern"] = ARTIFACT_LOCATION
    defs["DataSpec"]["properties"]["source"]["pattern"] = _placeholder_pattern()
    args = defs["MPISpec"]["properties"]["extra_args"]["items"]
    args["not"] = {"pattern": _reserved_mpi_args()}
    asset = defs["AssetSchedule"]["properties"]
    asset["assets"]["uniqueItems"] = True
    asset["assets"]["items"].update(
        maxLength=1500,
        allOf=[{"pattern": ASSET_SCHEME}, {"pattern": PRINTABLE_ASCII}],
        **{"not": {"pattern": "^[Aa][Ii][Rr][Ff][Ll][Oo][Ww]:"}},
    )
    asset["partition_key_format"]["pattern"] = "%"
    training, export = defs["TrainingSpec"]["properties"], defs["ExportSpec"]["properties"]
    words = defs["WarmStartSpec"]["properties"]["from"]["enum"]
    warm_start = training["warm_start"]
    warm_start["anyOf"] = [{"type": "string", "enum": words}, {"$ref": warm_start.pop("$ref")}]
    export["approval"]["anyOf"].insert(0, {"type": "boolean"})
    pods = defs["KubernetesSpec"]["properties"]["pods"]
    pods["allOf"] = [{"$ref": pods.pop("$ref")}, _given("image", "string")]


def _refine_names(schema: JsonSchema) -> None:
    """The names a field may take from elsewhere in the model: metrics, overridable fields, model families."""
    defs, props = schema["$defs"], schema["properties"]
    metrics = ["loss", *ALL_METRICS]
    validation = defs["ValidationSpec"]["properties"]
    for field in ("thresholds", "change_thresholds"):
        validation[field]["propertyNames"] = {"enum": metrics}
    checkpoint = validation["checkpoint"]
    checkpoint["allOf"] = [{"$ref": checkpoint.pop("$ref")}, {"properties": {"metric": {"enum": metrics}}}]
    overridable = sorted(path for path, refusal in override_policy(Spec).items() if refusal is None)
    props["overridable"]["items"]["enum"] = overridable
    families = sorted(props["model"]["discriminator"]["mapping"])
    props["model"].update(type="object", required=["family"], properties={"family": {"enum": families}})


def _refine_rules(schema: JsonSchema) -> None:
    """The rules between fields that compare a field with a fixed value."""
    defs, props = schema["$defs"], schema["properties"]
    no_ps = {"properties": {"num_ps": {"maximum": 0}}}
    _add(
        defs["TrainingSpec"],
        {
            "if": _is("backend", "mpi"),
            "then": {"properties": {"strategy": {"const": "multi_worker_mirrored"}, **no_ps["properties"]}},
            "else": {
                "properties": {"mpi": {"type": "null"}},
                "if": _is("strategy", "parameter_server"),
                "then": {"required": ["num_ps"], "properties": {"num_ps": {"minimum": 1}}},
                "else": no_ps,
            },
        },
    )
    empty = {"type": "object", "maxProperties": 0}
    _add(
        defs["ValidationSpec"],
        {
            "if": _is("allow_unvalidated", True),
            "then": {"properties": {"thresholds": empty, "change_thresholds": empty}},
        },
    )
    _add(defs["Approval"], {"if": _is("on_timeout", "approve"), "then": _given("timeout_minutes", "integer")})
    named = [{"properties": {field: {"minItems": 1}}, "required": [field]} for field in ("users", "roles")]
    _add(defs["Approvers"], {"anyOf": named})
    _add(defs["Threshold"], {"anyOf": [_given("lower", "number"), _given("upper", "number")]})
    _add(
        defs["AssetSchedule"],
        {"if": _given("partitions", "string"), "then": {"properties": {"cron": {"type": "null"}}}},
    )
    gate = [
        {"properties": {"thresholds": {"minProperties": 1}}, "required": ["thresholds"]},
        {"properties": {"change_thresholds": {"minProperties": 1}}, "required": ["change_thresholds"]},
        _is("allow_unvalidated", True),
    ]
    props["validation"]["allOf"] = [{"$ref": props["validation"].pop("$ref")}, {"anyOf": gate}]
    schema["required"].append("validation")
    kubernetes = {"properties": {"training": _is("launcher", "kubernetes")}, "required": ["training"]}
    _add(schema, {"if": kubernetes, "then": _given("kubernetes", "object")})
    for period in PARTITION_PERIODS:
        finer = [name for unit, names in SOURCE_PERIODS for name in sorted(names) if _finer(unit, period)]
        partitioned = {
            "properties": {"schedule": {"type": "object", **_is("partitions", period)}},
            "required": ["schedule"],
        }
        one_window = {
            "properties": {
                "window": {"type": "null"},
                "source": {"pattern": rf"\{{({'|'.join(finer)})[!:}}]"},
            }
        }
        _add(schema, {"if": partitioned, "then": {"properties": {"data": one_window}}})


def _finer(unit: str, period: str) -> bool:
    """Partitions of ``unit`` make up a ``period``."""
    return PARTITION_PERIODS.index(unit) <= PARTITION_PERIODS.index(period)


def spec_schema() -> JsonSchema:
    """The spec's JSON Schema, generated from the model."""
    generated = Spec.model_json_schema()
    for refine in (_describe, _refine_values, _refine_names, _refine_rules):
        refine(generated)
    return {
        "$schema": DIALECT,
        "title": "tfdist pipeline spec",
        "description": (
            "A pipeline spec of tfdist (tfdist.spec.Spec), given to build_dag or as a YAML file: "
            "generated from the model by 'tfdist schema'."
        ),
        **{k: v for k, v in generated.items() if k != "title"},
    }


def schema_text() -> str:
    """The schema as the committed file holds it."""
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"
