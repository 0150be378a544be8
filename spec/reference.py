"""The spec reference, generated from the model so that it cannot drift: every field by its dotted path, with its
type, allowed values, default, whether whoever triggers a run may override it, and its docstring. The docs site
renders it at build time (``docs/hooks.py``); no Airflow, no TensorFlow.

Paths are what a spec writes: ``training.epochs``; a list item's field ``data.features[].name``; a mapping
value's field ``validation.thresholds.<key>.lower``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import re
import types
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tfdist.spec.model import Spec
from tfdist.spec.overrides import FREE_FORM, AuthorOnly, field_doc, override_policy

OVERRIDABLE = "yes"
"""The override column of a field whoever triggers a run may override (by listing it in ``overridable``)."""
PER_FIELD = "per field below"
"""The override column of a field holding a section whose fields decide for themselves."""


@dataclasses.dataclass(frozen=True)
class Section:
    """A spec section as the reference shows it: the fields of one model at one path."""

    path: str
    """Where it is: '' (the top level), 'training', 'data.features[]', 'model' ..."""
    model: type[BaseModel]
    variant: str
    """Which model of a union this is ('family: mlp'), or ''."""
    doc: str
    """The section's own docstring and that of the field holding it."""
    fields: tuple[Entry, ...]

    @property
    def title(self) -> str:
        return f"{self.path or 'top level'}" + (f" ({self.variant})" if self.variant else "")

    @property
    def anchor(self) -> str:
        return "spec-" + (re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-") or "top")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One field of a section."""

    path: str
    type: str
    allowed: str
    default: str
    override: str
    """OVERRIDABLE, PER_FIELD, or 'no: <why>'."""
    doc: str


def _plain_name(annotation: Any) -> str:
    names = {int: "integer", float: "number", bool: "boolean", str: "string", dt.datetime: "date-time"}
    return names.get(annotation, "null" if annotation is type(None) else "any")


def _constraints(metadata: list[Any], unit: str = "") -> list[str]:
    """Bounds, lengths and patterns, in words; a nested FieldInfo's too."""
    words: list[str] = []
    for item in metadata:
        if isinstance(item, FieldInfo):
            words += _constraints(item.metadata, unit)
        elif isinstance(item, annotated_types.Ge):
            words.append(f"≥ {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            words.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            words.append(f"≤ {item.le}")
        elif isinstance(item, annotated_types.Lt):
            words.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.MinLen):
            words.append("not empty" if item.min_length == 1 else f"at least {item.min_length}{unit}")
        elif isinstance(item, annotated_types.MaxLen):
            words.append(f"at most {item.max_length}{unit}")
        elif getattr(item, "pattern", None):
            words.append(f"matches `{item.pattern}`")
    return words


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a union (the annotation alone otherwise); each keeps its own constraints."""
    if get_origin(annotation) is Annotated:
        base = get_args(annotation)[0]
        return _members(base) if get_origin(base) in (Union, types.UnionType) else [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _bare(annotation: Any) -> tuple[Any, list[Any]]:
    """An annotation without its Annotated wrappers, and their metadata."""
    extra: list[Any] = []
    while get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        extra += more
    return annotation, extra


def _describe(annotation: Any, metadata: list[Any], link: Callable[[type[BaseModel]], str]) -> tuple[str, str]:
    """(type, allowed values) of an annotation, e.g. ('integer or null', '≥ 1')."""
    names: list[str] = []
    allowed: list[str] = []
    for annotated in _members(annotation):
        member, inner = _bare(annotated)
        origin, args = get_origin(member), get_args(member)
        unit = " items" if origin in (list, dict) else " characters" if member is str else ""
        words = _constraints(inner + ([] if member is type(None) else metadata), unit)
        if origin is Literal:
            names.append("choice")
            words.insert(0, ", ".join(f"`{json.dumps(a)}`" for a in args))
        elif origin is list:
            item, item_allowed = _describe(args[0], [], link)
            names.append(f"list of {item}")
            words += [f"each {item_allowed}"] if item_allowed else []
        elif origin is dict:
            key, key_allowed = _describe(args[0], [], link)
            value, value_allowed = _describe(args[1], [], link)
            names.append(f"mapping of {key} to {value}")
            words += [f"keys {key_allowed}"] if key_allowed else []
            words += [f"values {value_allowed}"] if value_allowed else []
        elif isinstance(member, type) and issubclass(member, BaseModel):
            names.append(link(member))
        else:
            names.append(_plain_name(member))
        allowed.append("; ".join(words))
    return " or ".join(dict.fromkeys(names)), "; ".join(dict.fromkeys(a for a in allowed if a))


def _default(info: FieldInfo) -> str:
    """The default as a spec writes it; 'required'; or what a default computed when the spec is read depends on."""
    factory = info.default_factory
    if factory is None:
        return "required" if info.default is PydanticUndefined else f"`{json.dumps(info.default)}`"
    if isinstance(factory, type):
        return "the section's defaults" if issubclass(factory, BaseModel) else f"`{json.dumps(factory())}`"
    code = getattr(factory, "__code__", None)
    if code is not None and factory.__name__ == "<lambda>" and not code.co_names:
        return f"`{json.dumps(factory())}`"  # type: ignore[call-arg]
    return _markdown(factory.__doc__ or "computed when the spec is read: see the description")


def _sections_below(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """(path suffix, model) of each section a field holds: directly (''), as list items ('[]') or as mapping
    values ('.<key>')."""
    found: list[tuple[str, type[BaseModel]]] = []
    for member in (_bare(m)[0] for m in _members(annotation)):
        origin, args = get_origin(member), get_args(member)
        for suffix, inner in (("[]", args[0]),) if origin is list else ((".<key>", args[1]),) if origin is dict else ():
            found += [(suffix + s, m) for s, m in _sections_below(inner)]
        if isinstance(member, type) and issubclass(member, BaseModel):
            found.append(("", member))
    return found


def _markdown(text: str) -> str:
    """A docstring as one line of Markdown for a table cell: ``code`` kept as code, the rest escaped."""
    parts = re.split(r"``(.+?)``", " ".join(text.split()))
    escaped = (
        re.sub(r"([\\`*_\[\]|<>])", r"\\\1", part) if i % 2 == 0 else f"`{part}`" for i, part in enumerate(parts)
    )
    return "".join(escaped).replace("\\<", "&lt;").replace("\\>", "&gt;")


def _variant(model: type[BaseModel], siblings: list[type[BaseModel]]) -> str:
    """How a union's member is chosen ('family: mlp'), or '' when it is the only section of its field."""
    if len(siblings) < 2:
        return ""
    for name, info in model.model_fields.items():
        values = [_single_literal(s.model_fields.get(name)) for s in siblings]
        if None not in values and len(set(values)) == len(values):
            return f"{info.alias or name}: {_single_literal(info)}"
    return model.__name__


def _single_literal(info: FieldInfo | None) -> Any:
    """The value of a field that takes one value only (a union's discriminator), else None."""
    args = get_args(info.annotation) if info and get_origin(info.annotation) is Literal else ()
    return args[0] if len(args) == 1 else None


def sections(spec: type[BaseModel] = Spec) -> list[Section]:
    """Every section of the ``spec`` model, the top level first, each followed by the sections below it."""
    return list(_walk(spec, "", "", None, "", ""))


def _walk(
    model: type[BaseModel], path: str, name_path: str, refused: str | None, variant: str, doc: str
) -> Iterator[Section]:
    policy = override_policy(Spec)
    entries: list[Entry] = []
    below: list[tuple[str, str, type[BaseModel], str | None, str, str]] = []
    for name, info in model.model_fields.items():
        field_path = f"{path}.{info.alias or name}" if path else info.alias or name
        field_name_path = f"{name_path}.{name}" if name_path else name
        marked = next((m.reason for m in info.metadata if isinstance(m, AuthorOnly)), None)
        why = refused or marked or policy.get(field_name_path)
        children = _sections_below(info.annotation)
        models = [m for _, m in children]
        targets = {m: Section(field_path + suffix, m, _variant(m, models), "", ()) for suffix, m in children}
        type_text, allowed = _describe(info.annotation, list(info.metadata), functools.partial(_link, targets))
        own_doc = field_doc(model, name) or ""
        override = f"no: {why}" if why else PER_FIELD if children and field_name_path not in policy else OVERRIDABLE
        entries.append(Entry(field_path, type_text, allowed, _default(info), override, own_doc))
        for target in targets.values():
            section_doc = " ".join(d for d in (target.model.__doc__, own_doc) if d)
            below.append((target.path, field_name_path, target.model, why, target.variant, section_doc))
    yield Section(path, model, variant, doc, tuple(entries))
    for child_path, child_name_path, section, why, child_variant, section_doc in below:
        yield from _walk(section, child_path, child_name_path, why, child_variant, section_doc)


LEGEND = (
    "**At trigger**: *yes*, a run may override the field once the spec lists it in `overridable` (the trigger form, "
    "`--conf`, a backfill's `--dag-run-conf`); *no*, only the DAG file sets it, for the reason given. A *free-form* "
    f"field may not be overridden because {FREE_FORM}."
)


def _link(targets: dict[type[BaseModel], Section], model: type[BaseModel]) -> str:
    """A link to the heading of the section ``model`` holds below a field."""
    return f"section [`{targets[model].title}`](#{targets[model].anchor})"


def render(spec: type[BaseModel] = Spec) -> str:
    """The reference as Markdown: the legend, then a heading and a table per section."""
    lines = [LEGEND, ""]
    for section in sections(spec):
        level = "##" if section.path.count(".") == 0 else "###"
        lines += [f"{level} `{section.title}` {{#{section.anchor}}}", ""]
        lines += [_markdown(section.doc), ""] if section.doc else []
        lines += ["| field | type | allowed | default | at trigger | description |", "|---|---|---|---|---|---|"]
        for e in section.fields:
            override = "no: free-form" if e.override == f"no: {FREE_FORM}" else _markdown(e.override)
            cells = (f"`{e.path}`", e.type, e.allowed, e.default, override, _markdown(e.doc))
            lines.append("| " + " | ".join(c.replace("\n", " ") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)
