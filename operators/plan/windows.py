"""Which data a run reads: its window, as pure functions of the spec and what Airflow tells of the run. No
Airflow, no I/O: the operator gathers the facts (``RunFacts``), ``resolve_window`` decides."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from tfdist.contract.registry import CLOCK_SKEW
from tfdist.spec import PARTITION_KEY_FORMATS, AssetSchedule, Spec


class WindowRefused(ValueError):
    """The run names no window this pipeline can read (a retry would be refused again)."""


@dataclass(frozen=True)
class RunContext:
    """What identifies one run: artifacts are keyed by it, never by wall-clock time."""

    pipeline_id: str
    """The DAG's id, or '<dag id>.<task group id>' for a pipeline embedded in a DAG (see pipeline_id)."""
    run_id: str
    interval_start: dt.datetime
    interval_end: dt.datetime
    window: str = "its data interval"
    """Why the run reads [interval_start, interval_end) (recorded in run.json, said in the task log)."""
    partition_key: str | None = None
    """The upstream partition the run trains on (a partitioned asset schedule)."""

    def window_start(self, schedule: str | None, window: int | None) -> dt.datetime:
        """Where the run's window starts: the data interval's start, or ``window`` periods of the schedule
        (days without one) before its end."""
        if not window:
            return self.interval_start
        if schedule is None:
            return self.interval_end - dt.timedelta(days=window)
        ticks = croniter(schedule, self.interval_end)
        return [ticks.get_prev(dt.datetime) for _ in range(window)][-1]


@dataclass(frozen=True)
class RunFacts:
    """What Airflow and the artifact root tell of a run, gathered by its task."""

    run_id: str
    run_after: dt.datetime
    """When the run was created to run: Airflow's ``run_after`` (the trigger's time, a scheduled interval's end;
    no task of the run starts before it), never later than now. No window may end after it (see ``CLOCK_SKEW``)."""
    interval: tuple[dt.datetime, dt.datetime] | None = None
    """The run's data interval (None: triggered without a logical date)."""
    embedded: bool = False
    """The pipeline is a task group of a DAG someone wrote (its DAG's schedule drives it)."""
    partition_key: str | None = None
    partition_date: dt.datetime | None = None
    recorded: dict[str, Any] | None = None
    """The run's run.json, written by its first stage."""
    earlier_windows: tuple[tuple[str, dt.datetime], ...] | None = ()
    """(run id, window end) of the pipeline's other recorded runs; None: the artifact root is not visible here."""


def pipeline_id(dag_id: str, group_id: str | None) -> str:
    """A pipeline's id: its DAG's id, or '<dag id>.<task group id>' for one embedded in a DAG's task group."""
    return f"{dag_id}.{group_id}" if group_id else dag_id


def as_datetime(value: Any) -> dt.datetime:
    """A datetime as given, or parsed from its ISO text."""
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def scheduled_interval(schedule: str | None, logical_date: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The data interval of a scheduled run whose logical date (the interval's start) is ``logical_date``."""
    if schedule is None:
        return logical_date, logical_date + dt.timedelta(days=1)
    return logical_date, croniter(schedule, logical_date).get_next(dt.datetime)


def manual_interval(schedule: str | None, run_after: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The window of a run triggered without a logical date: the last complete interval before
    ``run_after``, as Airflow's data-interval timetables infer it (daily without a schedule)."""
    if schedule is None:
        end = dt.datetime.combine(run_after.date(), dt.time(), run_after.tzinfo)
        return end - dt.timedelta(days=1), end
    end = run_after if croniter.match(schedule, run_after) else croniter(schedule, run_after).get_prev(dt.datetime)
    return croniter(schedule, end).get_prev(dt.datetime), end


def period_end(start: dt.datetime, period: str) -> dt.datetime:
    """The end of the ``period`` (hour, day, week, month, year) that starts at ``start``."""
    if period in ("hour", "day", "week"):
        return start + dt.timedelta(**{f"{period}s": 1})
    months = start.month + (1 if period == "month" else 12)
    return start.replace(year=start.year + (months - 1) // 12, month=(months - 1) % 12 + 1)


def partition_start(key: str, period: str) -> dt.datetime:
    """Where the partition ``key`` of a ``period`` starts (UTC); ValueError for a key of another form."""
    return dt.datetime.strptime(key, PARTITION_KEY_FORMATS[period]).replace(tzinfo=dt.UTC)


def partitions(start: dt.datetime, end: dt.datetime, unit: str | None) -> list[dt.datetime]:
    """The starts of the ``unit`` partitions overlapping [start, end) (just ``start`` without a unit)."""
    if unit is None:
        return [start]
    t = start.replace(hour=start.hour if unit == "hour" else 0, minute=0, second=0, microsecond=0)
    t = t.replace(day=1 if unit in ("month", "year") else t.day, month=1 if unit == "year" else t.month)
    found = []
    while t < end:
        found.append(t)
        t = period_end(t, unit)
    return found


def source_for(source: str, partition: dt.datetime, artifact_root: str) -> str:
    """``data.source`` with its placeholders filled for the partition starting at ``partition``."""
    return source.format(
        date=partition.date().isoformat(),
        year=f"{partition:%Y}",
        month=f"{partition:%m}",
        day=f"{partition:%d}",
        hour=f"{partition:%H}",
        artifact_root=artifact_root,
    )


def resolve_window(spec: Spec, pipeline: str, facts: RunFacts) -> RunContext:
    """The run's identity and window (``run_window``), refused when it holds no time or ends in the future."""
    ctx = run_window(spec, pipeline, facts)
    start, end = ctx.interval_start.isoformat(), ctx.interval_end.isoformat()
    if ctx.interval_end <= ctx.interval_start:
        raise WindowRefused(
            f"data_interval_end {end} is not after data_interval_start {start} ({ctx.window}): the run's window "
            "holds no data. Trigger it with a data interval whose end is after its start, or without a logical "
            "date (it then trains on the last complete interval); nothing was written"
        )
    if ctx.interval_end > facts.run_after + CLOCK_SKEW:
        fix = (
            "Name a partition once its period is over (an upstream on a CronPartitionTimetable: run_offset=-1)"
            if ctx.partition_key
            else "Trigger it for an interval that has ended (a past logical date or data interval, or none: the "
            "last complete interval), or let the schedule run it once the interval is over"
        )
        raise WindowRefused(
            f"data_interval_end {end} ({ctx.window}) is later than the run's creation "
            f"(run_after {facts.run_after.isoformat()}) by more than {CLOCK_SKEW}: a model version is numbered "
            f"by its window's end, and one numbered from the future would stay the served version. {fix}; "
            "nothing was written"
        )
    return ctx


def run_window(spec: Spec, pipeline: str, facts: RunFacts) -> RunContext:
    """The run's window: its data interval (an embedding DAG's empty one: the schedule's period before it);
    else (triggered by hand or by assets) the window its first stage recorded, or the one inferred for it
    (``inferred_window``)."""
    if facts.interval is not None:
        start, end = facts.interval
        if not facts.embedded or start != end:
            return RunContext(pipeline, facts.run_id, start, end)
        start, end = manual_interval(spec.cron, end)  # an embedding DAG's cron trigger: start = end
        return RunContext(
            pipeline, facts.run_id, start, end, "the schedule's period before its DAG run's (empty) data interval"
        )
    recorded = facts.recorded
    if recorded and "window" in recorded:
        start, end = as_datetime(recorded["data_interval_start"]), as_datetime(recorded["data_interval_end"])
        return RunContext(pipeline, facts.run_id, start, end, recorded["window"], recorded.get("partition_key"))
    return inferred_window(spec, pipeline, facts)


def inferred_window(spec: Spec, pipeline: str, facts: RunFacts) -> RunContext:
    """A partitioned schedule's run: the partition its asset events (or its trigger) name. Other asset
    schedules' runs: since the end of the previous run's window (a day when there is none). A run triggered
    by hand: the last complete interval before it, as Airflow's timetables infer it."""
    run_id, end = facts.run_id, facts.run_after
    if spec.partitioned:
        start = _partition_start(spec.partitioned, facts)
        why = f"the {spec.partitioned} partition {facts.partition_key!r} its trigger names"
        return RunContext(pipeline, run_id, start, period_end(start, spec.partitioned), why, facts.partition_key)
    if isinstance(spec.schedule, AssetSchedule):
        ends = [e for e in facts.earlier_windows or () if e[0] != run_id and e[1] <= end]
        previous = max(ends, key=lambda e: e[1], default=None)
        if previous:
            why = f"since the end of the previous run's window (run {previous[0]!r})"
            return RunContext(pipeline, run_id, previous[1], end, why)
        unseen = (
            ""
            if facts.earlier_windows is not None
            else (f" (this task does not see the artifact root {spec.artifact_root}, where they are recorded)")
        )
        why = f"the day before it ran: no earlier run of this pipeline has a window{unseen}"
        return RunContext(pipeline, run_id, end - dt.timedelta(days=1), end, why)
    start, end = manual_interval(spec.cron, end)
    return RunContext(pipeline, run_id, start, end, "the last complete interval before it was triggered")


def _partition_start(period: str, facts: RunFacts) -> dt.datetime:
    """Where the run's partition starts: Airflow's partition date, else its key read as this pipeline writes it."""
    if facts.partition_date:
        return facts.partition_date.astimezone(dt.UTC)
    try:
        return partition_start(facts.partition_key or "", period)
    except ValueError:
        example = dt.datetime(2026, 11, 20).strftime(PARTITION_KEY_FORMATS[period])
        raise WindowRefused(
            f"this pipeline trains on one {period} partition per run, but the run names {facts.partition_key!r}: "
            f"trigger it through its upstream assets, or with a partition key such as {example!r}"
        ) from None
