"""Which data a run reads, as pure functions of the spec and the facts of the run (``resolve_window``): no
Airflow, no artifact root. The operator gathering those facts from a live run is tested in
tests/dag/test_asset_schedule.py, its refusal on real Airflow in tests/dag/test_future_interval.py."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
import yaml

from tests.support.specs import make_spec
from tfdist.contract.train_records import RunRecord
from tfdist.operators.plan import (
    RunFacts,
    WindowRefused,
    as_datetime,
    build_plan,
    manual_interval,
    resolve_window,
    scheduled_interval,
)
from tfdist.publishing.registry import CLOCK_SKEW
from tfdist.spec import SpecError, load_spec

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
            recorded=RunRecord(
                run_id="r",
                data_interval_start="2026-11-01T00:00:00+00:00",
                data_interval_end="2026-11-02T00:00:00+00:00",
                window="kept",
            ),
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


def t(text: str) -> dt.datetime:
    """An instant, written in the zone's own clock with its offset, e.g. '2026-03-08T00:00-05:00'."""
    return dt.datetime.fromisoformat(text)


def zoned_spec(zone: str, schedule, source: str = "/data/{date}/*.csv", window: int | None = None):
    return load_spec(
        make_spec("/tmp/tfdist-windows", schedule=schedule, timezone=zone, data={"source": source, "window": window})
    )


TOKYO, NEW_YORK = "Asia/Tokyo", "America/New_York"
HOURLY = "/data/{date}/{hour}/*.csv"
ZONED = [
    # (why, zone, schedule, source, data.window, facts, expected start, expected end, hours, partitions read)
    (
        "Tokyo: the run at Tokyo midnight reads the Tokyo day",
        TOKYO,
        "@daily",
        "/data/{date}/*.csv",
        None,
        RunFacts("r", t("2026-11-21T00:00+09:00"), (t("2026-11-20T00:00+09:00"), t("2026-11-21T00:00+09:00"))),
        "2026-11-20T00:00+09:00",
        "2026-11-21T00:00+09:00",
        24,
        ["2026-11-20"],
    ),
    (
        "Tokyo: a manual run reads the last whole Tokyo day",
        TOKYO,
        "@daily",
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=t("2026-11-21T08:00+09:00")),  # still 2026-11-20 in UTC
        "2026-11-20T00:00+09:00",
        "2026-11-21T00:00+09:00",
        24,
        ["2026-11-20"],
    ),
    (
        "Tokyo: data.window counts Tokyo days",
        TOKYO,
        "@daily",
        "/data/{year}/{month}/{day}/*.csv",
        3,
        RunFacts("r", t("2026-11-21T00:00+09:00"), (t("2026-11-20T00:00+09:00"), t("2026-11-21T00:00+09:00"))),
        "2026-11-20T00:00+09:00",
        "2026-11-21T00:00+09:00",
        24,
        ["2026/11/18", "2026/11/19", "2026/11/20"],
    ),
    (
        "New York, clocks forward: the night of 2026-03-08 is a 23-hour day",
        NEW_YORK,
        "@daily",
        "/data/{date}/*.csv",
        None,
        RunFacts("r", t("2026-03-09T00:00-04:00"), (t("2026-03-08T00:00-05:00"), t("2026-03-09T00:00-04:00"))),
        "2026-03-08T00:00-05:00",
        "2026-03-09T00:00-04:00",
        23,
        ["2026-03-08"],
    ),
    (
        "New York, clocks back: the night of 2026-11-01 is a 25-hour day",
        NEW_YORK,
        "@daily",
        "/data/{date}/*.csv",
        None,
        RunFacts("r", t("2026-11-02T00:00-05:00"), (t("2026-11-01T00:00-04:00"), t("2026-11-02T00:00-05:00"))),
        "2026-11-01T00:00-04:00",
        "2026-11-02T00:00-05:00",
        25,
        ["2026-11-01"],
    ),
    (
        "New York: a manual run after the change reads the 23-hour day",
        NEW_YORK,
        "@daily",
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=t("2026-03-09T08:00-04:00")),
        "2026-03-08T00:00-05:00",
        "2026-03-09T00:00-04:00",
        23,
        ["2026-03-08"],
    ),
    (
        "New York, no schedule: a manual run reads the whole local day before it",
        NEW_YORK,
        None,
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=t("2026-11-02T07:00-05:00")),
        "2026-11-01T00:00-04:00",
        "2026-11-02T00:00-05:00",
        25,
        ["2026-11-01"],
    ),
    (
        "New York, hourly: the repeated 01:00 is its own hour, read as the local hour",
        NEW_YORK,
        "@hourly",
        HOURLY,
        None,
        RunFacts("r", t("2026-11-01T02:00-05:00"), (t("2026-11-01T01:00-05:00"), t("2026-11-01T02:00-05:00"))),
        "2026-11-01T01:00-05:00",
        "2026-11-01T02:00-05:00",
        1,
        ["2026-11-01/01"],
    ),
    (
        "New York, hourly: data.window counts elapsed hours across the change",
        NEW_YORK,
        "@hourly",
        HOURLY,
        3,
        RunFacts("r", t("2026-11-01T02:00-05:00"), (t("2026-11-01T01:00-05:00"), t("2026-11-01T02:00-05:00"))),
        "2026-11-01T01:00-05:00",
        "2026-11-01T02:00-05:00",
        1,
        ["2026-11-01/00", "2026-11-01/01"],  # 00:00 EDT, 01:00 EDT, 01:00 EST
    ),
    (
        "New York, partitions: the key names the local day, 23 hours long",
        NEW_YORK,
        {**ASSETS, "partitions": "day"},
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=AFTER, partition_key="2026-03-08"),
        "2026-03-08T00:00-05:00",
        "2026-03-09T00:00-04:00",
        23,
        ["2026-03-08"],
    ),
    (
        "New York, partitions: the partition date Airflow's mapper stamps (local midnight)",
        NEW_YORK,
        {**ASSETS, "partitions": "day"},
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=AFTER, partition_key="2026-11-01", partition_date=t("2026-11-01T04:00+00:00")),
        "2026-11-01T00:00-04:00",
        "2026-11-02T00:00-05:00",
        25,
        ["2026-11-01"],
    ),
    (
        "New York, assets: since the previous window's end, local partitions",
        NEW_YORK,
        ASSETS,
        "/data/{date}/*.csv",
        None,
        RunFacts("r2", run_after=t("2026-11-02T00:00-05:00"), earlier_windows=(("r1", t("2026-11-01T00:00-04:00")),)),
        "2026-11-01T00:00-04:00",
        "2026-11-02T00:00-05:00",
        25,
        ["2026-11-01"],  # in UTC the window would reach into 2026-11-02
    ),
    (
        "New York, assets, no earlier run: the local day before, 23 hours across the change",
        NEW_YORK,
        ASSETS,
        "/data/{date}/*.csv",
        None,
        RunFacts("r", run_after=t("2026-03-09T01:00-04:00")),
        "2026-03-08T01:00-05:00",
        "2026-03-09T01:00-04:00",
        23,
        ["2026-03-08", "2026-03-09"],
    ),
]


@pytest.mark.parametrize(
    "why, zone, schedule, source, window, facts, start, end, hours, read", ZONED, ids=[c[0] for c in ZONED]
)
def test_windows_and_partitions_follow_the_dags_time_zone(
    why, zone, schedule, source, window, facts, start, end, hours, read
):
    spec = zoned_spec(zone, schedule, source, window)
    ctx = resolve_window(spec, "pipe", facts)
    assert (ctx.interval_start, ctx.interval_end) == (t(start), t(end))
    assert ctx.interval_end - ctx.interval_start == dt.timedelta(hours=hours)
    sources = build_plan(spec, ctx).stage("prepare_data").args.source
    assert [s.removeprefix("/data/").removesuffix("/*.csv") for s in sources] == read


@pytest.mark.parametrize("zone", [TOKYO, NEW_YORK])
@pytest.mark.parametrize("schedule", ["@daily", "@hourly", "30 1 * * *", "0 */2 * * *"])
@pytest.mark.parametrize("run_after", ["2026-03-08T06:30+00:00", "2026-03-08T07:30+00:00", "2026-11-01T06:10+00:00"])
def test_a_manual_runs_window_is_airflows_own_in_the_zone(zone, schedule, run_after):
    """Across both of New York's clock changes in 2026, as Airflow's timetable of the zone infers it."""
    import pendulum
    from airflow.timetables.interval import CronDataIntervalTimetable

    airflow = CronDataIntervalTimetable(schedule, timezone=zone).infer_manual_data_interval(
        run_after=pendulum.instance(t(run_after))
    )
    assert manual_interval(schedule, t(run_after), ZoneInfo(zone)) == (airflow.start, airflow.end)
    if airflow.start < airflow.end:  # Airflow's own interval of the 02:00 a clock skips is empty
        start = as_datetime(airflow.start)  # as the operator gathers Airflow's times
        assert scheduled_interval(schedule, start, ZoneInfo(zone)) == (airflow.start, airflow.end)


def test_a_bad_time_zone_is_refused_naming_the_field_and_an_example():
    with pytest.raises(SpecError) as refused:
        load_spec(make_spec("/tmp/tfdist-windows", timezone="Tokyo"))
    assert refused.value.problems == [
        "timezone: not an IANA time zone name (e.g. 'Asia/Tokyo', 'America/New_York', 'UTC'), got 'Tokyo'"
    ]


def test_the_time_zone_is_the_authors_a_trigger_cannot_change_it():
    spec = zoned_spec(TOKYO, "@daily")
    with pytest.raises(SpecError, match="timezone: not overridable"):
        spec.with_overrides({"timezone": "UTC"})
    with pytest.raises(
        SpecError, match="'timezone' cannot be overridden by whoever triggers a run: the DAG takes it when its file"
    ):
        load_spec({**make_spec("/tmp/tfdist-windows"), "overridable": ["timezone"]})


def test_a_naive_start_date_is_read_in_the_time_zone_and_utc_stays_the_default():
    assert zoned_spec(TOKYO, "@daily").start_date == t("2026-11-01T00:00+09:00")
    assert load_spec(make_spec("/tmp/tfdist-windows")).start_date == t("2026-11-01T00:00+00:00")


def test_tfdist_plan_reads_a_logical_date_without_a_zone_in_the_time_zone(tmp_path, capsys):
    from tfdist.operators.cli import main

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(make_spec(str(tmp_path), timezone=TOKYO)))
    assert main(["plan", str(spec_path), "--logical-date", "2026-11-20"]) == 0
    out = capsys.readouterr().out
    assert "data interval 2026-11-19T15:00:00+00:00 → 2026-11-20T15:00:00+00:00" in out  # Tokyo's 2026-11-20
    assert f"{tmp_path}/raw/digits/2026-11-20/*.csv" in out
    assert main(["plan", str(spec_path)]) == 0  # the start date, Tokyo's 2026-11-01: run ids are Airflow's, in UTC
    assert (
        "run scheduled__2026-10-31T15:00:00+00:00, data interval 2026-10-31T15:00:00+00:00" in capsys.readouterr().out
    )
