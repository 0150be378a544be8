"""Typed records: every JSON record one stage (or the Airflow side) writes and another reads has one model here or in
its own contract module, a subclass of ``Record``, and is written and read only through it (``write_record``,
``read_record``). Each carries its schema version: a record without one is version 1, the shape the releases before
versioning wrote. Reading a malformed record, or one of a newer version than this release knows, raises a
``RecordError`` that names the file and the field, so a renamed key fails where it is read, by name."""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from tfdist.infra.jsonfiles import create_json, read_json, write_json_atomic

R = TypeVar("R", bound="Record")

Metrics = dict[str, float | None]
"""Metric values by name (the task's metrics and the loss); None where there is no value (an AUC without both
classes)."""


class RecordError(ValueError):
    """A record that this release cannot read: ``source`` (its file, or what handed it over) and ``field`` (a dotted
    path into it, '' for the whole record) name where."""

    def __init__(self, source: str, field: str, message: str) -> None:
        super().__init__(f"{source}: {field + ': ' if field else ''}{message}")
        self.source, self.field = source, field


class MalformedRecord(RecordError):
    """A record whose content is not its model's: a key missing, renamed or of another type."""


class NewerRecord(RecordError):
    """A record written by a newer release (a higher schema version than this one reads): upgrade tfdist where it is
    read."""


class Part(BaseModel):
    """A record nested in another (it has no schema version of its own: its record's is it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Record(BaseModel):
    """A record both sides agree on. ``SCHEMA_VERSION`` is the version this release writes and the newest it reads;
    a change to a record's shape raises it (and reads the older shape too)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    SCHEMA_VERSION: ClassVar[int] = 1
    schema_version: int = 1

    @classmethod
    def parse(cls: type[R], payload: Any, source: str) -> R:
        """The record ``payload`` (decoded JSON) holds; ``source`` names it in a RecordError."""
        if not isinstance(payload, dict):
            raise MalformedRecord(source, "", f"a {cls.__name__} is a JSON object, not {type(payload).__name__}")
        version = payload.get("schema_version", 1)
        if isinstance(version, int) and version > cls.SCHEMA_VERSION:
            raise NewerRecord(
                source,
                "schema_version",
                f"{cls.__name__} version {version} was written by a newer tfdist (this one reads up to version "
                f"{cls.SCHEMA_VERSION}): upgrade tfdist here",
            )
        try:
            return cls.model_validate(payload)
        except ValidationError as invalid:
            first = invalid.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise MalformedRecord(source, field, f"{first['msg']} (a {cls.__name__}, version {version})") from None

    def payload(self) -> dict[str, Any]:
        """The record as JSON values, with the schema version this release writes."""
        return {**self.model_dump(mode="json"), "schema_version": self.SCHEMA_VERSION}


def read_record(path: str, model: type[R]) -> R:
    """The record at ``path``; FileNotFoundError where there is none, RecordError where it is not a ``model``."""
    try:
        payload = read_json(path)
    except UnicodeDecodeError as undecodable:
        raise MalformedRecord(path, "", f"not UTF-8 text: {undecodable.reason}") from None
    except json.JSONDecodeError as undecodable:
        raise MalformedRecord(path, "", f"not JSON: {undecodable.msg} at line {undecodable.lineno}") from None
    return model.parse(payload, path)


def read_record_if_exists(path: str, model: type[R]) -> R | None:
    """The record at ``path``, None where there is no file."""
    try:
        return read_record(path, model)
    except FileNotFoundError:
        return None


def write_record(path: str, record: Record) -> None:
    """Write ``record`` whole at ``path``."""
    write_json_atomic(path, record.payload())


def create_record(path: str, record: Record) -> bool:
    """Write ``record`` at ``path`` only if there is none yet, in one step no other writer interleaves with; whether
    this call made it."""
    return create_json(path, record.payload())
