"""operators/web/api.py: the plugin's API. Without Airflow running: how many DAG ids a pipeline id is looked up under,
the routes' response models, reading a curve without TensorFlow. Against hostile input (issue 37), on a live
Airflow (tests/support/live_airflow.py, marked e2e): ids with control characters, a 14 kB pipeline id of dots,
withdrawal reasons too long or with escape codes."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.dag.test_dag_parse import run_python
from tests.live.test_live_airflow import dag_file
from tests.publishing.test_withdraw import publish
from tests.support.live_airflow import LiveAirflow
from tests.support.specs import make_spec
from tfdist.contract.layout import RunLayout
from tfdist.contract.progress import CurveWrite, curve_line
from tfdist.contract.train_records import CurvePoint
from tfdist.operators.report import curve
from tfdist.publishing import registry

GUARDED, RESTRICTED = "digits_guarded", "restricted_pipeline"
LONG = ".".join(["a"] * 7000)
"""A 13,999-character pipeline id with a '.' every other character: 6,999 prefixes ending at a dot."""


def test_a_pipeline_id_is_looked_up_under_few_dag_ids_however_long_it_is():
    from airflow.models.base import ID_LEN

    from tfdist.operators.web.api import holding_dag_ids

    ids = holding_dag_ids(f"{GUARDED}.{LONG}")
    assert ids[-1] == GUARDED and len(ids) <= ID_LEN // 2 + 1 and max(map(len, ids)) <= ID_LEN
    assert holding_dag_ids("etl.outer.inner") == ["etl.outer.inner", "etl.outer", "etl"]
    assert holding_dag_ids(".x") == [".x"]


@pytest.mark.e2e  # starts a Python process that imports the API server (~9 s)
def test_the_api_server_reads_a_curve_without_importing_tensorflow(tmp_path):
    layout = RunLayout(str(tmp_path))
    CurveWrite(layout.curve_file, curve_line(CurvePoint(step=1, loss=2.0, examples_per_sec=None)))()
    out = run_python(f"""
        import sys
        from tfdist.operators.web.api import build_app, curve
        build_app()
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
        print("POINTS", len(curve({layout.run_dir!r}).points), "HEAVY", heavy)
    """)
    assert "POINTS 1 HEAVY []" in out


def test_the_plugin_api_answers_with_the_records_models_in_the_shapes_the_page_reads(tmp_path):
    """The routes' response models are the report's (built from the records); a curve's points over the wire keep
    the train metrics at their top level and no schema version (the page charts every other key)."""
    from fastapi.encoders import jsonable_encoder

    from tfdist.operators.report import Curve, RunRow
    from tfdist.operators.web.api import LiveProgress, PipelinePage, build_app

    models = {route.path: route.response_model for route in build_app().routes if hasattr(route, "response_model")}
    assert models["/pipelines/{pipeline_id}"] is PipelinePage and models["/runs/{pipeline_id}"] == list[RunRow]
    assert models["/pipelines/{pipeline_id}/runs/{run_id}/progress"] is LiveProgress
    assert models["/pipelines/{pipeline_id}/runs/{run_id}/curve"] is Curve
    layout = RunLayout(str(tmp_path))
    point = CurvePoint(step=1, loss=2.0, metrics={"auc": None}, examples_per_sec=None, learning_rate=0.1)
    CurveWrite(layout.curve_file, curve_line(point))()
    assert jsonable_encoder(curve(layout.run_dir)) == {
        "points": [{"step": 1, "loss": 2.0, "auc": None, "examples_per_sec": None, "learning_rate": 0.1}],
        "parent_final": None,
        "parent_version": None,
    }


def test_a_withdrawal_reason_is_required_one_line_and_kept_without_its_surrounding_blanks():
    from pydantic import ValidationError

    from tfdist.operators.web.api import Withdrawal

    assert Withdrawal(reason="  bad labels in the 11-20 data ").reason == "bad labels in the 11-20 data"
    for refused in ("", "   ", "two\nlines", "x" * (registry.REASON_MAX_CHARS + 1)):
        with pytest.raises(ValidationError):
            Withdrawal(reason=refused)


def test_an_id_with_control_characters_in_the_path_is_refused_with_400_before_the_route_runs():
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from tfdist.operators.web.api import printable_ids

    app = FastAPI()
    app.get("/p/{pipeline_id}/r/{run_id}", dependencies=[Depends(printable_ids)])(lambda pipeline_id, run_id: "ran")
    client = TestClient(app)
    assert client.get("/p/digits/r/manual__1").json() == "ran"
    refused = client.get("/p/digits/r/manual%1B%5B31m")
    assert refused.status_code == 400 and refused.json()["detail"].startswith("run_id: 'manual\\x1b[31m' holds")
    assert client.get("/p/dig%00its/r/x").status_code == 400


def test_a_store_the_api_cannot_reach_is_a_502_naming_the_root(tmp_path):
    from fastapi import HTTPException

    from tfdist.operators.web.api import reach

    reach(str(tmp_path))
    with pytest.raises(HTTPException) as refused:
        reach("hdfs://nn/models")
    assert refused.value.status_code == 502 and "hdfs://nn/models" in refused.value.detail


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("artifacts"))
    dags, restricted = tmp_path_factory.mktemp("dags"), tmp_path_factory.mktemp("restricted")
    tomorrow = str(dt.date.today() + dt.timedelta(days=1))  # unpaused or not, nothing is scheduled
    for folder, name in ((dags, GUARDED), (restricted, RESTRICTED)):
        spec = make_spec(root, name=name, start_date=tomorrow, export={"model_name": name})
        (folder / f"{name}.py").write_text(dag_file(spec))
    live = LiveAirflow(str(tmp_path_factory.mktemp("home")), str(dags), str(restricted), root)
    try:
        live.start([GUARDED, RESTRICTED])
        live.root = root
        yield live
    finally:
        live.stop()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "path",
    [
        f"/tfdist/pipelines/{GUARDED}%00",
        "/tfdist/runs/digits%1b[2J",
        "/tfdist/ui/digits%1bguarded",
        f"/tfdist/pipelines/{GUARDED}/runs/manual%00/progress",
        f"/tfdist/pipelines/{GUARDED}/runs/manual%7f/curve",
    ],
)
def test_an_id_with_control_characters_is_refused_with_400_naming_it(airflow, path):
    response = airflow.request("GET", path)
    assert response.status_code == 400, response.text
    field = "run_id" if "/runs/manual" in path else "pipeline_id"
    detail = response.json()["detail"]
    assert detail.startswith(f"{field}: ") and detail.endswith(
        f"holds control characters (NUL, escape codes), which no {field} has; give it as Airflow shows it"
    )
    withdraw = airflow.request("POST", f"/tfdist/pipelines/{GUARDED}%00/versions/1/withdraw", body={"reason": "x"})
    assert withdraw.status_code == 400


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("prefix", "user", "status"),
    [(RESTRICTED, "analyst", 403), (RESTRICTED, "admin", 404), (GUARDED, "analyst", 404), ("a", "analyst", 404)],
)
def test_a_long_dotted_pipeline_id_is_authorized_and_answered_at_once(airflow, prefix, user, status):
    airflow.request("GET", f"/tfdist/pipelines/{prefix}", user=user)  # the token and connections made beforehand
    response = airflow.request("GET", f"/tfdist/pipelines/{prefix}.{LONG}", user=user)
    assert response.status_code == status, response.text
    assert response.elapsed.total_seconds() < 0.5  # 1.6 s when every prefix ending at a dot was looked up


@pytest.mark.e2e
def test_a_withdrawal_reason_is_one_line_of_at_most_the_limit(airflow):
    model_dir = os.path.join(airflow.root, "models", GUARDED)
    publish(model_dir, 1)
    path = f"/tfdist/pipelines/{GUARDED}/versions/1/withdraw"
    for reason, problem in [("x" * 200_000, f"at most {registry.REASON_MAX_CHARS}"), ("ok\x1b[2J", "control")]:
        response = airflow.request("POST", path, body={"reason": reason})
        assert response.status_code == 422 and problem in response.text
        assert response.json()["detail"][0]["loc"] == ["body", "reason"]
    assert [m.version for m in registry.versions(model_dir)] == [1]
    longest = airflow.request("POST", path, body={"reason": "y" * registry.REASON_MAX_CHARS})
    assert longest.status_code == 200, longest.text
