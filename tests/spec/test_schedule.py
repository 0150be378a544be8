"""The schedule (tfdist.spec.schedule): a cron, or upstream Airflow Assets and the partitions their events
carry; each refusal names its field."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import AssetSchedule, load_spec, partition_unit
from tfdist.spec.schedule import valid_cron


def test_the_finest_time_placeholder_of_a_source_is_its_partitions_period():
    assert partition_unit("s3://lake/{year}/{month}/{date}/{hour}.csv") == "hour"
    assert partition_unit("/raw/{year}/{day}/*.csv") == "day"
    assert partition_unit("/raw/{year}-{month}.csv") == "month"
    assert partition_unit("{artifact_root}/raw/all.csv") is None


def test_a_cron_is_read_by_croniter_and_a_bad_one_is_refused_with_examples():
    assert valid_cron("0 2 * * *") == "0 2 * * *" and valid_cron("@daily") == "@daily" and valid_cron(None) is None
    with pytest.raises(ValueError) as err:
        valid_cron("61 * * * *")
    assert str(err.value) == "not a valid cron expression or preset (e.g. '0 2 * * *', '@daily'), got '61 * * * *'"


def test_an_asset_schedule_takes_its_defaults():
    schedule = AssetSchedule(assets=["s3://lake/raw/digits"])
    assert (schedule.when, schedule.cron, schedule.partitions, schedule.partition_key_format) == (
        "all",
        None,
        None,
        "%Y-%m-%dT%H:%M:%S",
    )


@pytest.mark.parametrize(
    "schedule, problem",
    [
        (
            {"assets": ["digits"]},
            "schedule.assets[0]: 'digits' is not an asset URI: give a scheme and a location, e.g. "
            "'s3://bucket/raw/digits'",
        ),
        ({"assets": ["s3://lake/raw digits"]}, "an asset URI is ASCII, without spaces, at most 1500 characters"),
        ({"assets": ["airflow://x"]}, "the scheme 'airflow' is Airflow's own"),
        ({"assets": ["s3://u:pw@lake/x"]}, "carries no password and no '#fragment'"),
        (
            {"assets": ["s3://lake/x", "s3://lake/x"]},
            "schedule.assets: each asset once, got ['s3://lake/x', 's3://lake/x']",
        ),
        ({"assets": ["s3://lake/x"], "partition_key_format": "day"}, "a strftime format of the upstream's keys"),
        ({"assets": ["s3://lake/x"], "cron": "sometimes"}, "schedule.cron: not a valid cron expression"),
        (
            {"assets": ["s3://lake/x"], "partitions": "day", "cron": "@daily"},
            "schedule.cron: a partitioned schedule runs for its partitions' events only; drop cron, or drop "
            "partitions to run on the assets or the time",
        ),
    ],
)
def test_a_bad_asset_schedule_is_refused_by_field(tmp_path, schedule, problem):
    found = problems(make_spec(str(tmp_path), schedule=schedule))
    assert any(problem in p for p in found), found


def test_a_partitioned_asset_schedule_is_read(tmp_path):
    schedule = {"assets": ["s3://lake/raw/digits", "file:///data/raw"], "when": "any", "partitions": "week"}
    spec = load_spec(make_spec(str(tmp_path), schedule=schedule))
    assert spec.schedule == AssetSchedule(**schedule)
