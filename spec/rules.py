"""A rule between the fields of a section, declared once: the check the model runs, and what JSON Schema says of
it where it can (``schema.py`` adds the fragments, so the model and the schema cannot disagree)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

JsonSchema = dict[str, Any]
Checked = TypeVar("Checked")


@dataclass(frozen=True)
class Rule(Generic[Checked]):
    """One rule of a section (``Section.rules``)."""

    check: Callable[[Checked], str | None]
    """The problem with the section, a message naming its field (e.g. 'training.num_ps: ...'), or None."""
    schema: tuple[JsonSchema, ...] = ()
    """The fragments of the section's JSON Schema (each one of its ``allOf``) that say it; none: the model alone
    checks it (it compares two values of the spec, or needs code)."""
    field: str | None = None
    """The field the fragments constrain, instead of the whole section; the field is then required (its default
    breaks the rule)."""


def equals(field: str, value: Any) -> JsonSchema:
    """An object whose ``field`` is given as ``value``."""
    return {"properties": {field: {"const": value}}, "required": [field]}


def given(field: str, json_type: str) -> JsonSchema:
    """An object whose ``field`` is given and not null."""
    return {"properties": {field: {"type": json_type}}, "required": [field]}
