"""Which data a run reads: its window, as pure functions of the spec and what Airflow tells of the run. No
Airflow, no I/O: the operator gathers the facts (``RunFacts``), ``resolve_window`` decides."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from tfdist.contract.train_records import RunRecord
from tfdist.publishing.registry import CLOCK_SKEW
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

    def window_start(self, schedule: str | None, window: int | None, zone: dt.tzinfo) -> dt.datetime:
        """Where the run's window starts: the data interval's start, or ``window`` periods of the schedule
        (days without one) in ``zone`` before its end."""
        if not window:
            return self.interval_start
        if schedule is None:
            return days_before(self.interval_end, window, zone)
        start = self.interval_end
        for _ in range(window):
            start = cron_tick(schedule, start, zone, forward=False)
        return start


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
    recorded: RunRecord | None = None
    """The run's run.json, written by its first stage."""
    earlier_windows: tuple[tuple[str, dt.datetime], ...] | None = ()
    """(run id, window end) of the pipeline's other recorded runs; None: the artifact root is not visible here."""


def pipeline_id(dag_id: str, group_id: str | None) -> str:
    """A pipeline's id: its DAG's id, or '<dag id>.<task group id>' for one embedded in a DAG's task group."""
    return f"{dag_id}.{group_id}" if group_id else dag_id


def as_datetime(value: Any) -> dt.datetime:
    """A plain datetime of the instant given, or of its ISO text (Airflow's pendulum ones drop their zone in
    arithmetic)."""
    return dt.datetime.fromisoformat(value.isoformat() if isinstance(value, dt.datetime) else str(value))


def local_time(naive: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """The instant (UTC) of the wall-clock time ``naive`` in ``zone``, as Airflow reads it: a time the clock
    shows twice is the later one, a time it skips is moved forward."""
    return max(naive.replace(tzinfo=zone, fold=fold).astimezone(dt.UTC) for fold in (0, 1))


def days_before(t: dt.datetime, days: int, zone: dt.tzinfo) -> dt.datetime:
    """The same wall-clock time in ``zone`` as ``t``, ``days`` days earlier."""
    return local_time(t.astimezone(zone).replace(tzinfo=None) - dt.timedelta(days=days), zone)


def cron_tick(schedule: str, t: dt.datetime, zone: dt.tzinfo, forward: bool = True) -> dt.datetime:
    """The schedule's next (or previous) time after (before) ``t``, its cron read in ``zone`` as Airflow's cron
    timetables read it: a schedule running every hour steps in elapsed time across a change of the clock."""
    naive = t.astimezone(zone).replace(tzinfo=None)
    ticks = croniter(schedule, naive)
    tick = ticks.get_next(dt.datetime) if forward else ticks.get_prev(dt.datetime)
    return t.astimezone(dt.UTC) + (tick - naive) if ticks.expanded[1] == ["*"] else local_time(tick, zone)


def scheduled_interval(
    schedule: str | None, logical_date: dt.datetime, zone: dt.tzinfo
) -> tuple[dt.datetime, dt.datetime]:
    """The data interval of a scheduled run whose logical date (the interval's start) is ``logical_date``."""
    if schedule is None:
        return logical_date, period_end(logical_date, "day", zone)
    return logical_date, cron_tick(schedule, logical_date, zone)


def manual_interval(schedule: str | None, run_after: dt.datetime, zone: dt.tzinfo) -> tuple[dt.datetime, dt.datetime]:
    """The window of a run triggered without a logical date: the last complete interval before
    ``run_after``, as Airflow's data-interval timetables infer it (the day before in ``zone`` without a
    schedule)."""
    if schedule is None:
        day = dt.datetime.combine(run_after.astimezone(zone).date(), dt.time())
        return local_time(day - dt.timedelta(days=1), zone), local_time(day, zone)
    end = cron_tick(schedule, run_after, zone, forward=False)
    end = run_after if cron_tick(schedule, end, zone) == run_after else end
    return cron_tick(schedule, end, zone, forward=False), end


def period_end(start: dt.datetime, period: str, zone: dt.tzinfo) -> dt.datetime:
    """The end of the ``period`` (hour, day, week, month, year) in ``zone`` that starts at ``start``: an hour
    later, else the same wall-clock time a day, week, month or year later (23 or 25 hours for a day a clock
    changes in)."""
    if period == "hour":
        return start.astimezone(dt.UTC) + dt.timedelta(hours=1)
    t = start.astimezone(zone).replace(tzinfo=None)
    if period in ("day", "week"):
        return local_time(t + dt.timedelta(**{f"{period}s": 1}), zone)
    months = t.month + (1 if period == "month" else 12)
    return local_time(t.replace(year=t.year + (months - 1) // 12, month=(months - 1) % 12 + 1), zone)


def partition_start(key: str, period: str, zone: dt.tzinfo) -> dt.datetime:
    """Where the partition ``key`` of a ``period`` in ``zone`` starts; ValueError for a key of another form."""
    return local_time(dt.datetime.strptime(key, PARTITION_KEY_FORMATS[period]), zone)


def partitions(start: dt.datetime, end: dt.datetime, unit: str | None, zone: dt.tzinfo) -> list[dt.datetime]:
    """The starts (in ``zone``) of the ``unit`` partitions of ``zone``'s clock overlapping [start, end) (just
    ``start`` without a unit)."""
    if unit is None:
        return [start]
    local = start.astimezone(zone)
    if unit == "hour":
        t = local.replace(minute=0, second=0, microsecond=0).astimezone(dt.UTC)
    else:
        day = local.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
        t = local_time(
            day.replace(day=1 if unit in ("month", "year") else day.day, month=1 if unit == "year" else day.month), zone
        )
    found = []
    while t < end:
        found.append(t.astimezone(zone))
        t = period_end(t, unit, zone)
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
        start, end = manual_interval(spec.cron, end, spec.zone)  # an embedding DAG's cron trigger: start = end
        return RunContext(
            pipeline, facts.run_id, start, end, "the schedule's period before its DAG run's (empty) data interval"
        )
    recorded = facts.recorded
    if recorded and recorded.window is not None:
        start, end = as_datetime(recorded.data_interval_start), as_datetime(recorded.data_interval_end)
        return RunContext(pipeline, facts.run_id, start, end, recorded.window, recorded.partition_key)
    return inferred_window(spec, pipeline, facts)


def inferred_window(spec: Spec, pipeline: str, facts: RunFacts) -> RunContext:
    """A partitioned schedule's run: the partition its asset events (or its trigger) name. Other asset
    schedules' runs: since the end of the previous run's window (a day when there is none). A run triggered
    by hand: the last complete interval before it, as Airflow's timetables infer it."""
    run_id, end = facts.run_id, facts.run_after
    if spec.partitioned:
        start = _partition_start(spec.partitioned, facts, spec.zone)
        why = f"the {spec.partitioned} partition {facts.partition_key!r} its trigger names"
        end = period_end(start, spec.partitioned, spec.zone)
        return RunContext(pipeline, run_id, start, end, why, facts.partition_key)
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
        return RunContext(pipeline, run_id, days_before(end, 1, spec.zone), end, why)
    start, end = manual_interval(spec.cron, end, spec.zone)
    return RunContext(pipeline, run_id, start, end, "the last complete interval before it was triggered")


def _partition_start(period: str, facts: RunFacts, zone: dt.tzinfo) -> dt.datetime:
    """Where the run's partition starts: Airflow's partition date, else its key read as this pipeline writes it
    (in ``zone``)."""
    if facts.partition_date:
        return facts.partition_date.astimezone(dt.UTC)
    try:
        return partition_start(facts.partition_key or "", period, zone)
    except ValueError:
        example = dt.datetime(2026, 11, 20).strftime(PARTITION_KEY_FORMATS[period])
        raise WindowRefused(
            f"this pipeline trains on one {period} partition per run, but the run names {facts.partition_key!r}: "
            f"trigger it through its upstream assets, or with a partition key such as {example!r}"
        ) from None
