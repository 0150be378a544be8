"""Scheduling on upstream assets (operators/dag.py ``timetable``, operators/base.py ``run_context``): the spec's
forms and their field-named errors, the Airflow timetables they become, and the window each kind of run reads.
The run of a whole asset-scheduled pipeline on a real Airflow is in test_live_airflow.py."""

from __future__ import annotations

import datetime as dt
import types

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.support.specs import make_spec
from tfdist.contract.layout import record_run
from tfdist.operators import build_dag
from tfdist.operators.plan import build_plan, partition_start, period_end
from tfdist.spec import PARTITION_KEY_FORMATS, SpecError, load_spec

UTC = dt.UTC
LANDED = "s3://lake/raw/digits"


def spec_with(root, schedule, **sections):
    return load_spec({**make_spec(root, **sections), "schedule": schedule})


@pytest.mark.parametrize(
    "schedule, sections, problem",
    [
        ({"assets": []}, {}, "schedule.assets: List should have at least 1 item"),
        ({"assets": [LANDED, "raw/digits"]}, {}, "schedule.assets[1]: 'raw/digits' is not an asset URI"),
        ({"assets": ["airflow://x"]}, {}, "schedule.assets[0]: 'airflow://x': the scheme 'airflow' is Airflow's own"),
        ({"assets": [LANDED, LANDED]}, {}, "schedule.assets: each asset once"),
        ({"assets": [LANDED], "when": "some"}, {}, "schedule.when: Input should be 'all' or 'any'"),
        ({"assets": [LANDED], "cron": "nightly"}, {}, "schedule.cron: not a valid cron expression"),
        ({"assets": [LANDED], "cron": "@daily", "partitions": "day"}, {}, "schedule.cron: a partitioned schedule runs"),
        ({"assets": [LANDED], "partitions": "days"}, {}, "schedule.partitions: Input should be 'hour', 'day'"),
        ({"assets": [LANDED], "partition_key_format": "YYYY-MM-DD"}, {}, "schedule.partition_key_format: a strftime"),
        ({"asset": [LANDED]}, {}, "schedule: unknown key 'asset' (did you mean 'assets'?)"),
        ({"assets": [LANDED], "partitions": "day"}, {"data": {"window": 7}}, "data.window: a partitioned schedule"),
        ({"assets": [LANDED], "partitions": "hour"}, {}, "data.source: each run reads its hour partition, but"),
        (
            {"assets": [LANDED], "partitions": "day"},
            {"data": {"source": "/lake/{year}/{month}/*.csv"}},
            "data.source: each run reads its day partition, but the source names no day or finer",
        ),
        ({"assets": [LANDED], "partitions": "day"}, {"data": {"source": "/lake/all.csv"}}, "data.source: each run"),
    ],
)
def test_a_bad_asset_schedule_is_refused_naming_its_field(tmp_path, schedule, sections, problem):
    spec = make_spec(str(tmp_path))
    for name, values in sections.items():
        spec[name] = {**spec[name], **values}
    with pytest.raises(SpecError) as refused:
        load_spec({**spec, "schedule": schedule})
    assert any(p.startswith(problem) for p in refused.value.problems), refused.value.problems


def test_the_schedule_is_the_authors_a_run_cannot_change_it(tmp_path):
    spec = spec_with(str(tmp_path), {"assets": [LANDED]})
    with pytest.raises(SpecError, match="schedule: not overridable"):
        spec.with_overrides({"schedule": "@hourly"})
    with pytest.raises(SpecError, match="'schedule' cannot be overridden"):
        load_spec({**make_spec(str(tmp_path)), "overridable": ["schedule"]})


def test_each_schedule_form_becomes_airflows_own_timetable(tmp_path):
    root = str(tmp_path)
    forms = {
        "@daily": "CronDataIntervalTimetable",
        None: "NullTimetable",
        "assets": ({"assets": [LANDED, "s3://lake/raw/labels"]}, "AssetTriggeredTimetable", "AssetAll"),
        "any": ({"assets": [LANDED, "s3://lake/raw/labels"], "when": "any"}, "AssetTriggeredTimetable", "AssetAny"),
        "or time": ({"assets": [LANDED], "cron": "0 3 * * *"}, "AssetOrTimeSchedule", "AssetAll"),
    }
    for schedule, expected in forms.items():
        if isinstance(expected, str):
            assert type(build_dag(spec_with(root, schedule)).timetable).__name__ == expected
            continue
        form, timetable, condition = expected
        dag = build_dag(spec_with(root, form))
        assert type(dag.timetable).__name__ == timetable
        assert type(dag.timetable.asset_condition).__name__ == condition
        assert sorted(a.uri for a in dag.timetable.asset_condition.objects) == sorted(form["assets"])
    partitioned = build_dag(
        spec_with(root, {"assets": [LANDED], "partitions": "week", "partition_key_format": "%Y-%m-%d"})
    ).timetable
    mapper = partitioned.default_partition_mapper
    assert type(partitioned).__name__ == "PartitionedAssetTimetable" and type(mapper).__name__ == "StartOfWeekMapper"
    assert (mapper.input_format, mapper.output_format) == ("%Y-%m-%d", PARTITION_KEY_FORMATS["week"])


@pytest.mark.parametrize(
    "period, upstream_key, upstream_format, window",
    [
        ("day", "2026-11-20", "%Y-%m-%d", ("2026-11-20T00:00", "2026-11-21T00:00")),
        ("hour", "2026-11-20T05:42:10", "%Y-%m-%dT%H:%M:%S", ("2026-11-20T05:00", "2026-11-20T06:00")),
        ("week", "2026-11-20", "%Y-%m-%d", ("2026-11-16T00:00", "2026-11-23T00:00")),  # a Friday: its Monday's week
        ("month", "2026-12-31", "%Y-%m-%d", ("2026-12-01T00:00", "2027-01-01T00:00")),
        ("year", "2026-11-20", "%Y-%m-%d", ("2026-01-01T00:00", "2027-01-01T00:00")),
    ],
)
def test_the_partition_airflows_mapper_names_is_the_period_a_run_reads(period, upstream_key, upstream_format, window):
    """Airflow's own mapper (the scheduler's) turns the upstream's key into the run's partition key: it reads
    back as the period's start, and as the partition date Airflow stamps on the run."""
    from airflow.partition_mappers import temporal

    mapper = getattr(temporal, f"StartOf{period.title()}Mapper")(
        input_format=upstream_format, output_format=PARTITION_KEY_FORMATS[period]
    )
    key = mapper.to_downstream(upstream_key)
    start = partition_start(key, period, UTC)
    assert start == mapper.to_partition_date(key)
    assert (start, period_end(start, period, UTC)) == tuple(
        dt.datetime.fromisoformat(t).replace(tzinfo=UTC) for t in window
    )


def test_a_partitioned_dag_maps_keys_to_periods_of_its_time_zone(tmp_path):
    """The scheduler's mapper of the DAG (serialized as the scheduler reads it) dates a key at the local
    midnight, where the pipeline's window of that key starts: New York's 2026-11-01, 25 hours long."""
    from airflow.serialization.serialized_objects import DagSerialization

    spec = load_spec(
        {
            **make_spec(str(tmp_path), timezone="America/New_York"),
            "schedule": {"assets": [LANDED], "partitions": "day", "partition_key_format": "%Y-%m-%d"},
        }
    )
    dag = DagSerialization.from_dict(DagSerialization.to_dict(build_dag(spec)))
    mapper = dag.timetable.default_partition_mapper
    key = mapper.to_downstream("2026-11-01")
    start = partition_start(key, "day", spec.zone)
    assert start == mapper.to_partition_date(key) == dt.datetime.fromisoformat("2026-11-01T00:00-04:00")
    assert period_end(start, "day", spec.zone) - start == dt.timedelta(hours=25)


class StageTask:
    """The one thing of a stage operator that ``run_context`` needs of Airflow: its task-side context."""

    def __init__(self, spec, **dag_run):
        from tfdist.operators.prepare import PrepareDataOperator

        self.operator = PrepareDataOperator(task_id="prepare_data", spec=spec)
        self.dag_run = types.SimpleNamespace(**{"partition_key": None, "partition_date": None, **dag_run})

    def context(self, run_id: str):
        return self.operator.run_context(self.operator.spec, {"run_id": run_id, "dag_run": self.dag_run})


def test_a_partitioned_run_reads_its_partition_and_a_manual_one_must_name_one(tmp_path):
    spec = spec_with(str(tmp_path), {"assets": [LANDED], "partitions": "day"})
    by_airflow = StageTask(
        spec,
        partition_key="2026-11-20",
        partition_date=dt.datetime(2026, 11, 20, tzinfo=UTC),
        run_after=dt.datetime(2026, 11, 24, 9, tzinfo=UTC),
    ).context("asset_triggered__1")
    assert (by_airflow.interval_start, by_airflow.interval_end, by_airflow.partition_key) == (
        dt.datetime(2026, 11, 20, tzinfo=UTC),
        dt.datetime(2026, 11, 21, tzinfo=UTC),
        "2026-11-20",
    )
    assert by_airflow.window == "the day partition '2026-11-20' its trigger names"
    by_hand = StageTask(spec, partition_key="2026-11-19", run_after=dt.datetime(2026, 11, 24, tzinfo=UTC))
    assert by_hand.context("manual__1").interval_start == dt.datetime(2026, 11, 19, tzinfo=UTC)
    with pytest.raises(AirflowFailException, match=r"one day partition per run, but the run names None.*'2026-11-20'"):
        StageTask(spec, run_after=dt.datetime(2026, 11, 24, tzinfo=UTC)).context("manual__2")


def test_an_asset_run_without_partitions_reads_since_the_previous_runs_window_and_every_stage_agrees(tmp_path):
    spec = spec_with(str(tmp_path), {"assets": [LANDED]})
    first = StageTask(spec, run_after=dt.datetime(2026, 11, 24, 9, tzinfo=UTC)).context("asset_triggered__1")
    assert (first.interval_start, first.interval_end) == (
        dt.datetime(2026, 11, 23, 9, tzinfo=UTC),
        dt.datetime(2026, 11, 24, 9, tzinfo=UTC),
    )
    assert first.window == "the day before it ran: no earlier run of this pipeline has a window"
    elsewhere = spec_with(str(tmp_path / "not_mounted"), {"assets": [LANDED]})
    assert (
        StageTask(elsewhere, run_after=dt.datetime(2026, 11, 24, 9, tzinfo=UTC))
        .context("asset_triggered__1")
        .window.endswith(
            f"(this task does not see the artifact root {tmp_path / 'not_mounted'}, where they are recorded)"
        )
    )
    plan = build_plan(spec, first)
    record_run(plan.layout, spec.to_json_dict(), plan.run_record())

    later = StageTask(spec, run_after=dt.datetime(2026, 11, 24, 15, tzinfo=UTC))
    second = later.context("asset_triggered__2")
    assert (second.interval_start, second.interval_end) == (
        dt.datetime(2026, 11, 24, 9, tzinfo=UTC),
        dt.datetime(2026, 11, 24, 15, tzinfo=UTC),
    )
    assert second.window == "since the end of the previous run's window (run 'asset_triggered__1')"
    plan = build_plan(spec, second)
    record_run(plan.layout, spec.to_json_dict(), plan.run_record())
    assert later.context("asset_triggered__2") == second
    later.dag_run.run_after = dt.datetime(2026, 11, 25, tzinfo=UTC)  # a retry, much later: the recorded window
    assert later.context("asset_triggered__2") == second
