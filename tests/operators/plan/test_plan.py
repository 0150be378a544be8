"""operators/plan/__init__.py: the plan (pure data, argv lists, run-scoped paths, the partitions read, the printed
plan)."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.layout import run_key, run_path
from tfdist.operators import plan as plan_module
from tfdist.operators.launchers.processes import local_processes
from tfdist.operators.plan import RunContext, StagePlan, build_plan, version_base
from tfdist.spec import load_spec

UTC = dt.UTC
CTX = RunContext(
    "digits_test",
    "scheduled__2026-11-20T00:00:00+00:00",
    dt.datetime(2026, 11, 20, tzinfo=UTC),
    dt.datetime(2026, 11, 21, tzinfo=UTC),
)


def one_argv(spec, stage: StagePlan, python: str = "python") -> list[str]:
    """The argv of the stage's one process, as the local launcher starts it."""
    (process,) = local_processes(stage, python=python)
    return list(process.argv)


def test_stages_and_run_scoped_paths(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    plan = build_plan(spec, CTX)
    assert [s.task_id for s in plan.stages] == ["prepare_data", "validate_data", "train", "evaluate", "export"]
    assert plan.layout.run_dir == f"{tmp_path}/digits_test/runs/{run_key(CTX.run_id)}"
    assert run_key(CTX.run_id).startswith("scheduled__2026-11-20T00_00_00_00_00-")
    for stage in plan.stages:
        for process in local_processes(stage, python="python"):
            assert isinstance(process.argv, tuple) and all(isinstance(a, str) for a in process.argv)
            assert process.argv[:2] == ("python", "-m")
            assert plan.layout.spec_file in process.argv
        assert type(stage.args).parse(stage.args.to_argv()) == stage.args  # what the stage's entry point reads
    prepare = one_argv(spec, plan.stage("prepare_data"))
    assert prepare[prepare.index("--source") + 1] == f"{tmp_path}/raw/digits/2026-11-20/*.csv"
    export = one_argv(spec, plan.stage("export"))
    assert export[export.index("--version-base") + 1] == "20261121000000" == str(version_base(CTX))


def test_window_lists_each_partition(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), data={"window": 3}))
    assert [s.split("/")[-2] for s in build_plan(spec, CTX).stage("prepare_data").args.source] == [
        "2026-11-18",
        "2026-11-19",
        "2026-11-20",
    ]


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


PARTITIONS = [  # schedule, source's partition path, data interval, window → the partitions read
    ("@hourly", "{date}/{hour}", (at(2026, 11, 20, 23), at(2026, 11, 21)), None, ["2026-11-20/23"]),
    (
        "@hourly",
        "{date}/{hour}",
        (at(2026, 11, 21, 1), at(2026, 11, 21, 2)),
        3,
        ["2026-11-20/23", "2026-11-21/00", "2026-11-21/01"],
    ),
    ("@hourly", "{date}", (at(2026, 11, 20, 5), at(2026, 11, 20, 6)), None, ["2026-11-20"]),
    ("@weekly", "{date}", (at(2026, 11, 15), at(2026, 11, 22)), None, [f"2026-11-{d}" for d in range(15, 22)]),
    ("@daily", "{year}/{month}/{day}", (at(2026, 12, 31), at(2027, 1, 1)), 2, ["2026/12/30", "2026/12/31"]),
    ("@monthly", "{year}-{month}", (at(2026, 11, 1), at(2026, 12, 1)), 3, ["2026-09", "2026-10", "2026-11"]),
    ("@daily", "all", (at(2026, 11, 20), at(2026, 11, 21)), 3, ["all"]),
]


@pytest.mark.parametrize("schedule, partition, interval, window, expected", PARTITIONS)
def test_a_run_reads_exactly_the_partitions_of_its_window_in_the_schedules_periods(
    tmp_path, schedule, partition, interval, window, expected
):
    spec = load_spec(
        make_spec(
            str(tmp_path),
            schedule=schedule,
            data={"source": f"{{artifact_root}}/raw/{partition}/part.csv", "window": window},
        )
    )
    sources = build_plan(spec, RunContext("d", "r", *interval)).stage("prepare_data").args.source
    assert list(sources) == [f"{tmp_path}/raw/{p}/part.csv" for p in expected]


AIRFLOW_RUN_IDS = st.from_regex(r"\A[A-Za-z0-9_.~:+-]{1,250}\Z")
"""Run ids Airflow's default ``allowed_run_id_pattern`` accepts (a run id is at most 250 characters)."""


def inside_runs_root(run_id: str) -> bool:
    root = os.path.join(os.sep, "artifacts", "dag", "runs")
    path = run_path(os.path.join(os.sep, "artifacts"), "dag", run_id)
    return os.path.dirname(os.path.normpath(path)) == root and os.path.basename(path) == run_key(run_id)


def test_run_key_keeps_a_readable_prefix_and_no_run_id_escapes_or_shares_a_directory():
    assert run_key("manual__2026-11-22T03:19:01.713668+00:00").startswith("manual__2026-11-22T03_19_01_713668_00_00-")
    for escape in ("..", ".", "../../x", "~"):  # a trigger chooses the run id
        assert run_key(escape) not in ("", ".", "..") and inside_runs_root(escape)
    # the scheduled run's id, and a triggered id that read the same once sanitized
    assert run_key("scheduled__2026-11-20T00:00:00+00:00") != run_key("scheduled__2026-11-20T00_00_00_00_00")


@pytest.mark.e2e
@settings(max_examples=500, deadline=None)
@given(AIRFLOW_RUN_IDS, AIRFLOW_RUN_IDS)
def test_distinct_run_ids_get_distinct_keys_inside_the_runs_directory(first, second):
    assert inside_runs_root(first) and len(run_key(first)) <= 255  # a file name's limit
    twin = re.sub(r"[^A-Za-z0-9_-]", "_", first)  # the same readable prefix as ``first``
    for other in (second, twin):
        assert (run_key(first) == run_key(other)) == (first == other)


@pytest.mark.e2e
def test_plan_command_prints_every_process_without_running_anything(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(make_spec(str(tmp_path))))
    out = subprocess.run(
        [sys.executable, "-m", "tfdist.operators.cli", "plan", str(spec_path), "--logical-date", "2026-11-20"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "data interval 2026-11-20T00:00:00+00:00 → 2026-11-21T00:00:00+00:00" in out
    assert '[worker-1] env TF_CONFIG={"cluster": {"worker": ["127.0.0.1:<free port>", "127.0.0.1:<free port>"]}' in out
    assert "task export: 1 process(es)" in out
    assert not (tmp_path / "digits_test").exists()


@pytest.mark.e2e
def test_validate_command_reports_field_errors(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(make_spec(str(tmp_path), training={"num_workers": 0})))
    result = subprocess.run(
        [sys.executable, "-m", "tfdist.operators.cli", "validate", str(spec_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "training.num_workers: Input should be greater than or equal to 1 (got 0)" in result.stderr


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "schedule, logical_date, interval",
    [
        ("@hourly", "2026-11-20T05:00", ("2026-11-20T05:00", "2026-11-20T06:00")),
        ("@weekly", "2026-11-15T00:00", ("2026-11-15T00:00", "2026-11-22T00:00")),  # Sunday to Sunday
        ("0 2 * * 1-5", "2026-11-20T02:00", ("2026-11-20T02:00", "2026-11-23T02:00")),  # Friday to Monday
        ("@daily", "2026-11-20T00:00", ("2026-11-20T00:00", "2026-11-21T00:00")),
    ],
)
def test_scheduled_interval_ends_at_the_next_tick(schedule, logical_date, interval):
    assert plan_module.scheduled_interval(schedule, at(logical_date), UTC) == (at(interval[0]), at(interval[1]))


@pytest.mark.parametrize(
    "schedule, run_after, interval",
    [
        ("@hourly", "2026-11-20T05:30", ("2026-11-20T04:00", "2026-11-20T05:00")),
        ("@hourly", "2026-11-20T05:00", ("2026-11-20T04:00", "2026-11-20T05:00")),
        ("@weekly", "2026-11-18T10:00", ("2026-11-08T00:00", "2026-11-15T00:00")),  # a Wednesday
        ("0 2 * * 1-5", "2026-11-21T12:00", ("2026-11-19T02:00", "2026-11-20T02:00")),  # a Saturday: Thu → Fri
        ("0 2 * * 1-5", "2026-11-23T01:00", ("2026-11-19T02:00", "2026-11-20T02:00")),  # Monday before 02:00
        (None, "2026-11-20T15:00", ("2026-11-19T00:00", "2026-11-20T00:00")),  # manual only: the last whole day
    ],
)
def test_manual_run_trains_on_the_last_complete_interval_as_airflow_infers_it(schedule, run_after, interval):
    expected = (at(interval[0]), at(interval[1]))
    assert plan_module.manual_interval(schedule, at(run_after), UTC) == expected
    if schedule:
        import pendulum
        from airflow.timetables.interval import CronDataIntervalTimetable

        timetable = CronDataIntervalTimetable(schedule, timezone="UTC")
        airflow = timetable.infer_manual_data_interval(run_after=pendulum.instance(at(run_after)))
        assert (airflow.start, airflow.end) == expected


def test_rank_tags_of_mpirun_and_horovodrun_output_are_split_per_rank():
    from tfdist.contract.launch import split_rank_tags

    assert split_rank_tags("mpirun-0", "[1,0]<stdout>:rank-0: step 10/88") == [("rank-0", "rank-0: step 10/88")]
    assert split_rank_tags("mpirun-0", "[1,1]<stderr>:warning[1,0]<stdout>:done") == [
        ("rank-1", "warning"),
        ("rank-0", "done"),
    ]
    assert split_rank_tags("horovodrun-0", "[0]<stdout>:rank-0: saved") == [("rank-0", "rank-0: saved")]
    assert split_rank_tags("mpirun-0", "mpirun noticed that process rank 1 exited") == [
        ("mpirun-0", "mpirun noticed that process rank 1 exited")
    ]
    assert split_rank_tags("mpirun-0", "[1,12]<stdout>:") == []
