"""What every spec section is: a frozen model refusing unknown keys (naming the closest allowed one) and checking its
``rules`` after its fields; the name patterns and markers the sections share."""

from __future__ import annotations

import difflib
import functools
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, model_validator

from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.rules import Rule

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
PARSED = AuthorOnly("the DAG takes it when its file is parsed; a run cannot change it")
"""Fields the DAG and its tasks are built from at parse time."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: ClassVar[tuple[Rule[Any], ...]] = ()
    """The rules between the section's fields, checked in order once each field is valid."""

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = _keys(cls)
            for key in data:
                if key not in allowed:
                    close = difflib.get_close_matches(str(key), allowed, n=1)
                    hint = f" (did you mean '{close[0]}'?)" if close else ""
                    raise ValueError(f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}")
        return data

    @model_validator(mode="after")
    def _follows_its_rules(self) -> Self:
        """The section's rules, in order: the first broken one is the error."""
        for rule in self.rules:
            if problem := rule.check(self):
                raise ValueError(problem)
        return self


@functools.cache
def _keys(section: type[BaseModel]) -> tuple[str, ...]:
    """The keys a section takes (a field's alias where it has one), in declaration order."""
    return tuple(info.alias or name for name, info in section.model_fields.items())


def section_models() -> list[type[Section]]:
    """Every spec section model."""
    found: list[type[Section]] = []
    stack: list[type[Section]] = [Section]
    while stack:
        subclasses = stack.pop().__subclasses__()
        found += subclasses
        stack += subclasses
    return found
