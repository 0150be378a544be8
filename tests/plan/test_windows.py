"""Which data a run reads, as pure functions of the spec and the facts of the run (``resolve_window``): no
Airflow, no artifact root. The operator gathering those facts from a live run is tested in
tests/dag/test_asset_schedule.py, its refusal on real Airflow in tests/dag/test_future_interval.py."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.conftest import make_spec
from tfdist.contract.registry import CLOCK_SKEW
from tfdist.operators.plan import RunFacts, WindowRefused, resolve_window
from tfdist.spec import load_spec

UTC = dt.UTC
AFTER = dt.datetime(2026, 11, 24, 9, tzinfo=UTC)


def at(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2026, 11, day, hour, tzinfo=UTC)


def spec(schedule):
    """A spec of ``schedule`` reading a daily partitioned source."""
    return load_spec(make_spec("/tmp/tfdist-windows", schedule=schedule, data={"source": "/data/{date}/*.csv"}))


ASSETS = {"assets": ["s3://lake/raw/digits"]}
CASES = [
    # (why, schedule, facts, expected start, expected end, expected reason)
    (
        "a scheduled run reads its data interval",
        "@daily",
        RunFacts("r", AFTER, (at(20), at(21))),
        at(20),
        at(21),
        "its data interval",
    ),
    (
        "an embedded pipeline's empty interval: the period before it",
        "@daily",
        RunFacts("r", AFTER, (at(21), at(21)), embedded=True),
        at(20),
        at(21),
        "the schedule's period before its DAG run's (empty) data interval",
    ),
    (
        "an interval ending within the clock skew after the run's creation",
        "@daily",
        RunFacts("r", AFTER, (at(23, 9), AFTER + CLOCK_SKEW)),
        at(23, 9),
        AFTER + CLOCK_SKEW,
        "its data interval",
    ),
    (
        "a manual run: the last complete interval",
        "@daily",
        RunFacts("r", run_after=AFTER),
        at(23),
        at(24),
        "the last complete interval before it was triggered",
    ),
    (
        "a recorded window wins over everything but an interval",
        "@daily",
        RunFacts(
            "r",
            run_after=AFTER,
            recorded={
                "data_interval_start": "2026-11-01T00:00:00+00:00",
                "data_interval_end": "2026-11-02T00:00:00+00:00",
                "window": "kept",
            },
        ),
        at(1),
        at(2),
        "kept",
    ),
    (
        "assets: since the previous run's window",
        ASSETS,
        RunFacts("r2", run_after=AFTER, earlier_windows=(("r1", at(23, 9)), ("r0", at(22)), ("later", at(25)))),
        at(23, 9),
        AFTER,
        "since the end of the previous run's window (run 'r1')",
    ),
    (
        "assets, no earlier run: the day before",
        ASSETS,
        RunFacts("r", run_after=AFTER),
        at(23, 9),
        AFTER,
        "the day before it ran: no earlier run of this pipeline has a window",
    ),
    (
        "assets, its own record is not an earlier run",
        ASSETS,
        RunFacts("r", run_after=AFTER, earlier_windows=(("r", at(24)),)),
        at(23, 9),
        AFTER,
        "the day before it ran: no earlier run of this pipeline has a window",
    ),
    (
        "partitions: the partition Airflow dates",
        {**ASSETS, "partitions": "day"},
        RunFacts("r", run_after=AFTER, partition_key="2026-11-20", partition_date=at(20)),
        at(20),
        at(21),
        "the day partition '2026-11-20' its trigger names",
    ),
    (
        "partitions: a key read as the pipeline writes it",
        {**ASSETS, "partitions": "day"},
        RunFacts("r", run_after=AFTER, partition_key="2026-11-19"),
        at(19),
        at(20),
        "the day partition '2026-11-19' its trigger names",
    ),
]


@pytest.mark.parametrize("why, schedule, facts, start, end, reason", CASES, ids=[c[0] for c in CASES])
def test_the_window_of_each_kind_of_run(why, schedule, facts, start, end, reason):
    ctx = resolve_window(spec(schedule), "pipe", facts)
    assert (ctx.pipeline_id, ctx.run_id) == ("pipe", facts.run_id)
    assert (ctx.interval_start, ctx.interval_end, ctx.window) == (start, end, reason)


def test_an_asset_run_says_when_it_cannot_see_earlier_runs():
    ctx = resolve_window(spec(ASSETS), "pipe", RunFacts("r", run_after=AFTER, earlier_windows=None))
    assert ctx.window.endswith(
        "(this task does not see the artifact root /tmp/tfdist-windows, where they are recorded)"
    )


@pytest.mark.parametrize("key", [None, "20 November", "2026-11"])
def test_a_partitioned_run_that_names_no_partition_is_refused_with_an_example(key):
    with pytest.raises(WindowRefused, match=r"one day partition per run, but the run names .*'2026-11-20'"):
        resolve_window(spec({**ASSETS, "partitions": "day"}), "pipe", RunFacts("r", run_after=AFTER, partition_key=key))


LATER = r"is later than the run's creation \(run_after 2026-11-24T09:00:00\+00:00\) by more than 0:05:00"
EMPTY = r"is not after data_interval_start .*: the run's window holds no data. Trigger it with a data interval"
REFUSED = [
    # (why, schedule, facts, the refusal)
    (
        "an interval ending in the future",
        "@daily",
        RunFacts("r", AFTER, (AFTER, at(25, 9))),
        rf"^data_interval_end 2026-11-25T09:00:00\+00:00 \(its data interval\) {LATER}: .* Trigger it for an interval",
    ),
    (
        "an interval ending just beyond the clock skew",
        "@daily",
        RunFacts("r", AFTER, (at(23), AFTER + CLOCK_SKEW + dt.timedelta(seconds=1))),
        LATER,
    ),
    ("an empty interval", "@daily", RunFacts("r", AFTER, (at(21), at(21))), rf"^data_interval_end .*{EMPTY}"),
    ("an inverted interval", "@daily", RunFacts("r", AFTER, (at(21), at(20))), EMPTY),
    (
        "an embedded pipeline's inverted interval",
        "@daily",
        RunFacts("r", AFTER, (at(21), at(20)), embedded=True),
        EMPTY,
    ),
    (
        "a partition that ends in the future",
        {**ASSETS, "partitions": "day"},
        RunFacts("r", AFTER, partition_key="2026-11-24"),
        r"\(the day partition '2026-11-24' its trigger names\) is later than the run's creation .* Name a "
        r"partition once its period is over \(an upstream on a CronPartitionTimetable: run_offset=-1\)",
    ),
]


@pytest.mark.parametrize("why, schedule, facts, refusal", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_window_that_holds_no_time_or_ends_after_the_run_was_created_is_refused(why, schedule, facts, refusal):
    with pytest.raises(WindowRefused, match=refusal):
        resolve_window(spec(schedule), "pipe", facts)
