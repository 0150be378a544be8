"""The schedule: a cron, or the upstream Airflow Assets a run waits for, and the partitions their events carry."""

from __future__ import annotations

import functools
import string
import urllib.parse
from typing import Annotated, Literal, get_args

from pydantic import Discriminator, Field, Tag, field_validator

from tfdist.spec.rules import Rule, given
from tfdist.spec.section import Section


@functools.cache
def _cron_is_valid(value: str) -> bool:
    """Whether croniter reads ``value``: asked once per expression (a folder of specs shares a few)."""
    from croniter import croniter  # Airflow's own dependency; cheap

    return bool(croniter.is_valid(value))


def valid_cron(value: str | None) -> str | None:
    if value is not None and not _cron_is_valid(value):
        raise ValueError(f"not a valid cron expression or preset (e.g. '0 2 * * *', '@daily'), got {value!r}")
    return value


def _asset_uri(uri: str) -> str:
    """An Airflow Asset URI as Airflow accepts it: a scheme, ASCII, no password, not the reserved 'airflow'."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.scheme or not (parts.netloc or parts.path.strip("/")):
        raise ValueError(
            f"{uri!r} is not an asset URI: give a scheme and a location, e.g. 's3://bucket/raw/digits' "
            "or 'file:///data/raw/digits'"
        )
    if not uri.isascii() or len(uri) > 1500 or any(c.isspace() for c in uri):
        raise ValueError(f"{uri!r}: an asset URI is ASCII, without spaces, at most 1500 characters")
    if parts.scheme.lower() == "airflow" or parts.password or parts.fragment:
        raise ValueError(
            f"{uri!r}: the scheme 'airflow' is Airflow's own, and an asset URI carries no password and no '#fragment'"
        )
    return uri


PartitionPeriod = Literal["hour", "day", "week", "month", "year"]
PARTITION_PERIODS: tuple[PartitionPeriod, ...] = get_args(PartitionPeriod)
PARTITION_KEY_FORMATS = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "week": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}
"""A partitioned pipeline's own partition keys (its runs' ``partition_key``), by period: a week's is its Monday."""
SOURCE_PERIODS = (("hour", {"hour"}), ("day", {"date", "day"}), ("month", {"month"}), ("year", {"year"}))
"""The periods a source's time placeholders name, finest first (none names a week)."""


def partition_unit(source: str) -> str | None:
    """The finest time placeholder of a source: its partitions are hours, days, months or years (None: the
    source names no time)."""
    fields = {field for _, field, _, _ in string.Formatter().parse(source) if field}
    return next((unit for unit, names in SOURCE_PERIODS if fields & names), None)


def _partitions_or_time(schedule: AssetSchedule) -> str | None:
    if schedule.partitions and schedule.cron:
        return (
            "schedule.cron: a partitioned schedule runs for its partitions' events only; drop "
            "cron, or drop partitions to run on the assets or the time"
        )
    return None


class AssetSchedule(Section):
    """Run when upstream data lands: Airflow Assets the upstream DAGs update (their URIs)."""

    assets: Annotated[list[str], Field(min_length=1)]
    """URIs of the Airflow Assets the upstream DAGs update, e.g. 's3://lake/raw/digits'."""
    when: Literal["all", "any"] = "all"
    """'all': a run once every asset has a new event; 'any': on each event of any of them."""
    cron: str | None = None
    """Also run on this cron whatever the assets do (Airflow's AssetOrTimeSchedule): 'asset or time'."""
    partitions: PartitionPeriod | None = None
    """The upstream's events carry partition keys (Airflow partitions): each run trains on exactly the
    partition of this period that its events name (a day's key, or several of them rolled into a week...)."""
    partition_key_format: str = "%Y-%m-%dT%H:%M:%S"
    """How the upstream writes its partition keys (strftime), e.g. '%Y-%m-%d' for '2026-11-20'."""

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return valid_cron(value)

    @field_validator("assets")
    @classmethod
    def _uris(cls, value: list[str]) -> list[str]:
        for i, uri in enumerate(value):
            try:
                _asset_uri(uri)
            except ValueError as exc:
                raise ValueError(f"schedule.assets[{i}]: {exc}") from None
        if len(set(value)) < len(value):
            raise ValueError(f"schedule.assets: each asset once, got {value}")
        return value

    @field_validator("partition_key_format")
    @classmethod
    def _key_format(cls, value: str) -> str:
        if "%" not in value:
            raise ValueError(f"a strftime format of the upstream's keys (e.g. '%Y-%m-%d'), got {value!r}")
        return value

    rules = (
        Rule(
            _partitions_or_time,
            schema=({"if": given("partitions", "string"), "then": {"properties": {"cron": {"type": "null"}}}},),
        ),
    )


Schedule = Annotated[
    Annotated[str, Tag("a cron")] | Annotated[AssetSchedule, Tag("upstream assets")],
    Discriminator(lambda value: "a cron" if isinstance(value, str) else "upstream assets"),
]
"""A cron expression, or upstream assets (the tags are no keys of the input: errors name the fields below)."""
