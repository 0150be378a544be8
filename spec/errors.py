"""An invalid spec as one line per problem, each naming its field path and what is allowed, e.g.
'training.num_workers: Input should be greater than or equal to 1 (got 0)'."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class SpecError(ValueError):
    """An invalid spec; 'problems' holds one 'field.path: message' line per problem."""

    def __init__(self, problems: list[str], origin: str = "spec"):
        self.problems = problems
        super().__init__(f"Invalid pipeline {origin}:\n" + "\n".join(f"  {p}" for p in problems))


def _field_path(loc: tuple[int | str, ...], data: Any, missing: bool) -> str:
    """Dotted path of an error location, skipping segments that are not keys of the input (union tags);
    a missing field's own name is kept."""
    parts, node = [], data
    for segment in loc[:-1] if missing else loc:
        if isinstance(node, list) and isinstance(segment, int):
            node = node[segment]
            parts.append(f"[{segment}]")
        elif isinstance(node, dict) and segment in node:
            node = node[segment]
            parts.append(f"[{segment}]" if isinstance(segment, int) else str(segment))
    if missing:
        parts.append(str(loc[-1]))
    return ".".join(parts).replace(".[", "[")


def _problems(error: ValidationError, data: Any, fields: list[str]) -> list[str]:
    """One line per error; a cross-field check's message already names its field (one of ``fields``, the
    model's own, or a path below one)."""
    problems = []
    for e in error.errors():
        path = _field_path(e["loc"], data, missing=e["type"] == "missing")
        message = e["msg"].removeprefix("Value error, ")
        if message.startswith(tuple(f"{field}{sep}" for field in fields for sep in ".:")):
            problems.append(message)  # cross-field checks name their own field
            continue
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):  # name the tag field and its choices
            path = f"{path}.{e['ctx']['discriminator'].strip(chr(39)).removesuffix('()')}"  # a callable's: its name
            if e["type"] == "union_tag_invalid":
                choices = " or ".join(e["ctx"]["expected_tags"].rsplit(", ", 1))
                message = f"Input should be {choices} (got {e['ctx']['tag']!r})"
            else:
                message = "required field is missing"
        elif e["type"] == "missing":
            message = "required field is missing"
        elif e["type"] != "value_error":
            message += f" (got {e['input']!r})"
        problems.append(f"{path or '<spec>'}: {message}")
    return problems


def validated(model: type[Model], data: Any, origin: str) -> Model:
    """``data`` validated as ``model``; otherwise SpecError naming ``origin`` and each problem's field."""
    if not isinstance(data, dict):
        raise SpecError([f"<spec>: must be a mapping of fields, got {type(data).__name__}"], origin)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_problems(exc, data, list(model.model_fields)), origin) from None
