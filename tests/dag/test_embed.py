"""A pipeline embedded in a DAG someone wrote (build_task_group): its tasks after their upstream task, its id
keying runs, links, routes and k8s names, the refusals; and ``airflow dags test`` of a DAG with an upstream task
and two tiny pipelines."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import subprocess
import sys
import textwrap
import types

import pendulum
import pytest
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

from tests.publishing.versions import published_metadata
from tests.support.specs import DAY, make_spec
from tfdist.contract.layout import RunLayout, run_path
from tfdist.infra.jsonfiles import read_json
from tfdist.operators import SpecError, build_dag, build_task_group
from tfdist.operators.demo import airflow_dags_test, write_digits_partitions
from tfdist.operators.launchers.kubernetes.objects import object_name
from tfdist.operators.links import TrainingRunLink

START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def embeddable(root: str, name: str, **sections) -> dict:
    """A small spec without the DAG-level fields (its DAG is the user's)."""
    spec = make_spec(root, name=name, **sections)
    del spec["schedule"]
    return spec


def team_dag(root: str, schedule: str | None = "@daily", **sections) -> DAG:
    """The user's DAG: an upstream task, then two pipelines."""
    with DAG("team_etl", schedule=schedule, start_date=START) as dag:

        @task
        def extract() -> None:
            pass

        extract() >> [
            build_task_group(embeddable(root, "digits_a", export={"model_name": "model_a"}, **sections)),
            build_task_group(embeddable(root, "digits_b", export={"model_name": "model_b"}, **sections)),
        ]
    return dag


def test_two_pipelines_follow_the_upstream_task_each_under_its_own_id(tmp_path):
    dag = team_dag(str(tmp_path))
    for group in ("digits_a", "digits_b"):
        chain = [f"{group}.{t}" for t in ("prepare_data", "validate_data", "train", "evaluate", "export")]
        assert dag.get_task(chain[0]).upstream_task_ids == {"extract"}
        for before, after in itertools.pairwise(chain):
            assert dag.get_task(after).upstream_task_ids == {before}
        assert {dag.get_task(t).pipeline_id for t in chain} == {f"team_etl.{group}"}
    assert "tfdist-embedded" in dag.tags and not dag.params  # the trigger form stays the DAG author's
    assert build_dag(make_spec(str(tmp_path))).get_task("train").pipeline_id == "digits_test"  # unchanged


def test_the_dags_cron_schedule_paces_the_pipelines_windows(tmp_path):
    assert team_dag(str(tmp_path), "0 2 * * *").get_task("digits_a.train").spec.schedule == "0 2 * * *"
    assert team_dag(str(tmp_path), None).get_task("digits_a.train").spec.schedule is None


def test_the_dags_time_zone_is_the_pipelines_and_a_fixed_offset_is_refused(tmp_path):
    with DAG("etl", schedule="@daily", start_date=pendulum.datetime(2026, 11, 1, tz="Asia/Tokyo")) as dag:
        build_task_group(embeddable(str(tmp_path), "p"))
    assert dag.get_task("p.train").spec.timezone == "Asia/Tokyo"
    assert team_dag(str(tmp_path)).get_task("digits_a.train").spec.timezone == "UTC"
    with pytest.raises(SpecError, match=r"timezone: the DAG 'etl' has the fixed offset \+09:00, which the"):
        with DAG("etl", schedule="@daily", start_date=START.astimezone(dt.timezone(dt.timedelta(hours=9)))):
            build_task_group(embeddable(str(tmp_path), "p"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("schedule", "@hourly"),
        ("timezone", "Asia/Tokyo"),
        ("catchup", True),
        ("max_active_runs", 2),
        ("tags", ["x"]),
        ("description", "mine"),
    ],
)
def test_a_dag_level_spec_field_is_refused_naming_it(tmp_path, field, value):
    with pytest.raises(SpecError, match=rf"{field}: belongs to the DAG 'etl' the pipeline is embedded in"):
        with DAG("etl", schedule=None):
            build_task_group({**embeddable(str(tmp_path), "p"), field: value})


def test_two_pipelines_of_one_dag_may_not_publish_one_model(tmp_path):
    with pytest.raises(SpecError, match=r"export.model_name: 'same' is published to .* by the pipeline 'etl.a'"):
        with DAG("etl", schedule=None):
            build_task_group(embeddable(str(tmp_path), "a", export={"model_name": "same"}))
            build_task_group(embeddable(str(tmp_path), "b", export={"model_name": "same"}))


def test_outside_a_dag_or_under_a_name_no_task_group_takes_it_is_refused(tmp_path):
    with pytest.raises(SpecError, match="call it inside 'with DAG"):
        build_task_group(embeddable(str(tmp_path), "p"))
    with pytest.raises(SpecError, match=r"name: 'a.b' cannot be the task group id"), DAG("etl", schedule=None):
        build_task_group(embeddable(str(tmp_path), "a.b"))
    with pytest.raises(SpecError, match=r"group_id: 'a b' is no task group id"), DAG("etl", schedule=None):
        build_task_group(embeddable(str(tmp_path), "ab"), group_id="a b")
    with DAG("etl", schedule=None) as dag:
        build_task_group(embeddable(str(tmp_path), "a.b"), group_id="ab")
    assert dag.get_task("ab.train").pipeline_id == "etl.ab"


def context(conf: dict, start: dt.datetime, end: dt.datetime, params: dict | None = None) -> dict:
    return {
        "dag_run": types.SimpleNamespace(conf=conf, run_after=end),
        "params": params or {},
        "run_id": "manual__1",
        "data_interval_start": start,
        "data_interval_end": end,
    }


def test_runs_take_overrides_from_their_own_conf_mapping_only(tmp_path):
    dag = team_dag(str(tmp_path), overridable=["training.epochs"])
    a, b = dag.get_task("digits_a.train"), dag.get_task("digits_b.train")
    run = context(
        {"digits_a": {"training.epochs": 1}, "training.epochs": 3},
        START,
        START + dt.timedelta(days=1),
        params={"training.epochs": 2},
    )
    assert a.effective_spec(run)[1] == {"training.epochs": 1}
    assert b.effective_spec(run)[1] == {}
    with pytest.raises(AirflowFailException, match=r"data\.source: not overridable"):
        a.effective_spec(context({"digits_a": {"data.source": "/etc/*"}}, START, START))
    with pytest.raises(AirflowFailException, match=r"conf\.digits_a: must be a mapping"):
        a.effective_spec(context({"digits_a": 3}, START, START))


def test_run_directories_are_keyed_by_the_pipeline_id_and_an_empty_interval_trains_on_the_period_before(tmp_path):
    dag = team_dag(str(tmp_path))
    run = context({}, START, START)  # a cron trigger's run: its interval starts and ends at its logical date
    plans = {g: dag.get_task(f"{g}.train").plan(run) for g in ("digits_a", "digits_b")}
    for group, plan in plans.items():
        assert plan.layout.run_dir == run_path(str(tmp_path), f"team_etl.{group}", "manual__1")
        assert (plan.context.interval_start, plan.context.interval_end) == (START - dt.timedelta(days=1), START)
    names = {object_name(p.context.pipeline_id, p.context.run_id, "train") for p in plans.values()}
    assert len(names) == 2 and all(len(n) <= 63 for n in names)


def test_links_and_the_served_tasks_name_the_pipeline(tmp_path):
    from airflow.serialization.serialized_objects import DagSerialization

    from tfdist.operators.web.api import _stage_tasks

    served = DagSerialization.from_dict(DagSerialization.to_dict(team_dag(str(tmp_path))))  # the API server's
    assert sorted(_stage_tasks(served)) == ["team_etl.digits_a", "team_etl.digits_b"]
    ti_key = types.SimpleNamespace(dag_id="team_etl", run_id="manual__1")
    link = TrainingRunLink().get_link(served.get_task("digits_b.export"), ti_key=ti_key)
    assert link.endswith("/tfdist/ui/team_etl.digits_b?run=manual__1")


PIPELINES = textwrap.dedent('''
    """A team's DAG: its own extract task, then two tfdist pipelines."""
    import datetime as dt

    from airflow.sdk import DAG, task
    from tfdist.operators import build_task_group

    with DAG("team_etl", schedule="@daily", start_date=dt.datetime(2026, 11, 1)) as dag:
        @task
        def extract():
            print("extracted")

        extract() >> [build_task_group(spec) for spec in SPECS]
''')

API_CHECK = textwrap.dedent("""
    import json
    from airflow.utils.session import create_session
    from tfdist.operators.web.api import embedded_pipelines, pipeline_overview

    with create_session() as session:
        print(json.dumps({"listed": embedded_pipelines(["team_etl"], session),
                          "runs": {p: [r.run_id for r in pipeline_overview(p, session).runs]
                                   for p in ("team_etl.digits_a", "team_etl.digits_b")}}))
""")


@pytest.mark.e2e
def test_airflow_runs_a_dag_with_an_upstream_task_and_two_embedded_pipelines(tmp_path, monkeypatch):
    root, dags = str(tmp_path / "artifacts"), tmp_path / "dags"
    write_digits_partitions(os.path.join(root, "raw", "digits"), DAY, 1)
    tiny = {"training": {"num_workers": 1, "epochs": 1}, "validation": {"thresholds": {}, "allow_unvalidated": True}}
    specs = [embeddable(root, name, export={"model_name": name}, **tiny) for name in ("digits_a", "digits_b")]
    dags.mkdir()
    (dags / "team_etl.py").write_text(PIPELINES.replace("SPECS", repr(specs)))
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    outcome = airflow_dags_test("team_etl", DAY + dt.timedelta(days=1), str(tmp_path / "dags-test.log"), echo=False)
    assert outcome.state == "success", open(outcome.log_path).read()[-4000:]
    for name in ("digits_a", "digits_b"):
        (version,) = published_metadata(os.path.join(root, "models", name))
        assert version["run_id"] == outcome.run_id
        run = read_json(RunLayout(run_path(root, f"team_etl.{name}", outcome.run_id)).run_file)
        # '@daily' is a cron trigger: an empty interval at the logical date, so the day before is trained on
        assert (run["pipeline_id"], run["data_interval_start"], run["data_interval_end"]) == (
            f"team_etl.{name}",
            f"{DAY}T00:00:00+00:00",
            f"{DAY + dt.timedelta(days=1)}T00:00:00+00:00",
        )
    found = subprocess.run([sys.executable, "-c", API_CHECK], capture_output=True, text=True, check=True).stdout
    api = json.loads(found.splitlines()[-1])
    assert sorted(p["pipeline_id"] for p in api["listed"]) == ["team_etl.digits_a", "team_etl.digits_b"]
    assert api["runs"] == {"team_etl.digits_a": [outcome.run_id], "team_etl.digits_b": [outcome.run_id]}
