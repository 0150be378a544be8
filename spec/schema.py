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
- the rules between fields that compare a value with a fixed one (``if``/``then``), each read from the rule that
  the model checks (``Section.rules``: ``rules.Rule`` carries the check and its fragments): the gate is required,
  Horovod settings need backend 'mpi', a parameter-server strategy needs parameter servers, 'kubernetes'
  needs its section, a partitioned schedule takes no cron and no ``data.window`` and a source naming its
  period, a timeout that approves needs its timeout, approvers name a user or a role, a threshold needs a bound.

What it cannot say (rules comparing two values of the spec, or needing code: a cron's validity, the batch split
across replicas, the shards per reader, distinct feature names, the metrics this model reports, the pods'
paths below the artifact root, ...) only the model checks: ``tests/spec/test_schema.py`` lists them. The model
also reads a few looser forms the schema does not describe (a number or a yes/no as a string, a Unix time as
``start_date``)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from pydantic import BaseModel

from tfdist.spec.data import SOURCE_PLACEHOLDERS
from tfdist.spec.locations import BUCKET, OBJECT_STORES
from tfdist.spec.model import Spec
from tfdist.spec.overrides import field_doc, override_policy
from tfdist.spec.rules import JsonSchema, given
from tfdist.spec.section import section_models
from tfdist.spec.tasks import ALL_METRICS
from tfdist.spec.training import RESERVED_MPI_ARGS

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
    pods["allOf"] = [{"$ref": pods.pop("$ref")}, given("image", "string")]


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
    """What each section's rules (``Section.rules``) say in JSON Schema, added where they apply: to the section, or
    to the one field a rule constrains (then required)."""
    for model in section_models():
        target = schema if model is Spec else schema["$defs"].get(model.__name__)
        if target is None:  # an abstract base of sections: its rules are its subclasses'
            continue
        for rule in (rule for rule in model.rules if rule.schema):
            fragments = copy.deepcopy(list(rule.schema))
            if rule.field is None:
                target.setdefault("allOf", []).extend(fragments)
            else:
                field = target["properties"][rule.field]
                field["allOf"] = [{"$ref": field.pop("$ref")}, *fragments]
                target["required"].append(rule.field)


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
