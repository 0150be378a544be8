"""Which spec fields whoever triggers a run may override, read from each field's type and ``AuthorOnly``
marker; the value at a dotted path; and the field docs the trigger form shows."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


@dataclass(frozen=True)
class AuthorOnly:
    """Marks a spec field (or a whole section) that only the DAG's author sets: whoever triggers a run
    may not override it, whatever its type. ``reason`` says why."""

    reason: str


FREE_FORM = (
    "it is not a number, a yes/no value or a fixed choice, so it could name code, a path, a command-line "
    "argument, an image, a connection or a secret"
)


def _plain(annotation: Any) -> bool:
    """A number, a yes/no value or a fixed choice (or an optional value or a list of them)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin is Annotated:
        return _plain(get_args(annotation)[0])
    if origin in (Union, types.UnionType, list):
        return all(_plain(arg) for arg in get_args(annotation))
    return annotation in (int, float, bool, type(None))


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The spec section models a field holds (several for a discriminated union)."""
    args = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def _policies(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, type[BaseModel], str | None]]:
    """(dotted path, declaring section, why a run may not override it or None) for every field below
    ``model``; a section marked author-only is one entry, its fields are not listed."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        marked = next((m.reason for m in info.metadata if isinstance(m, AuthorOnly)), None)
        sections = _sections(info.annotation)
        if sections and not marked:
            for section in sections:
                yield from _policies(section, f"{path}.")
        else:
            yield path, model, marked or (None if _plain(info.annotation) else FREE_FORM)


@functools.cache
def override_policy(spec: type[BaseModel]) -> dict[str, str | None]:
    """Every field path of the ``spec`` model (and every author-only section) → why a run may not override
    it, or None where it may. A property of each field: its type (only numbers, yes/no and fixed choices)
    and its AuthorOnly marker."""
    policy: dict[str, str | None] = {}
    for path, _, reason in _policies(spec):
        policy[path] = policy.get(path) or reason  # in a union of sections a refusal wins
    return policy


def override_refusal(spec: type[BaseModel], path: str) -> str | None:
    """Why whoever triggers a run may not override the field at ``path`` of the ``spec`` model, or None
    (also for a path that is not a field: that is checked against the spec itself)."""
    policy, parts = override_policy(spec), path.split(".")
    return next((policy[p] for p in (".".join(parts[:n]) for n in range(1, len(parts) + 1)) if policy.get(p)), None)


def field_value(spec: BaseModel, path: str) -> Any:
    """The value at a dotted path of the spec ('training.epochs')."""
    node: Any = spec
    for part in path.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def with_values(data: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a spec as a dict, changed in place) with '{dotted path: value}' set, missing sections added."""
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node[part] if node.get(part) is not None else node.setdefault(part, {})
        node[leaf] = value
    return data


def _field_docs(body: list[ast.stmt]) -> Iterator[tuple[str, str]]:
    """(field, the docstring below it) for a class body's annotated fields."""
    for field, doc in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            yield field.target.id, inspect.cleandoc(doc.value.value)


@functools.cache
def _module_lines(module: str) -> list[str]:
    return inspect.getsource(sys.modules[module]).splitlines(keepends=True)


@functools.cache
def _attribute_docs(module: str) -> dict[tuple[str, str], str]:
    """(class, field) → the docstring below the field, for every class of ``module``, from one parse of its
    source (pydantic's use_attribute_docstrings parses it again for each class: 45 ms per DAG parse)."""
    return {
        (cls.name, field): doc
        for cls in ast.parse("".join(_module_lines(module))).body
        if isinstance(cls, ast.ClassDef)
        for field, doc in _field_docs(cls.body)
    }


@functools.cache
def _class_docs(cls: type) -> dict[str, str]:
    """field → the docstring below it, for the fields ``cls`` declares: a parse of the class's own lines only (a
    trigger form needs a few sections' docs; parsing the whole model's module took ~9 ms of each DAG parse).
    Falls back to the module's one parse where the class's lines cannot be told apart."""
    lines, header = _module_lines(cls.__module__), re.compile(rf"class {re.escape(cls.__name__)}\b")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is not None:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()), len(lines)
        )
        try:
            (node,) = ast.parse("".join(lines[start:end])).body
        except (SyntaxError, ValueError):
            node = None
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return dict(_field_docs(node.body))
    return {field: doc for (name, field), doc in _attribute_docs(cls.__module__).items() if name == cls.__name__}


def field_doc(model: type[BaseModel], name: str) -> str | None:
    """The docstring of field ``name`` of spec section ``model`` (or of the base class declaring it)."""
    declaring = (c for c in model.__mro__ if name in vars(c).get("__annotations__", {}))
    return next((doc for c in declaring if (doc := _class_docs(c).get(name))), None)
