"""operators/web/plugin.py: the page in Airflow's navigation and on every DAG, under Airflow's base path, and the API
app built on its first request. Loading the plugin in Airflow's processes: tests/packaging/test_packaging.py."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tfdist.operators.web.plugin import BuiltOnFirstRequest, TfdistPlugin, page_views, registered_by_entry_point


def test_the_page_is_in_the_navigation_and_a_tab_of_each_dag_under_airflows_base_path(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/ml/")
    nav, tab = page_views()
    assert (nav["href"], nav["destination"], nav["category"]) == ("/ml/tfdist/ui/", "nav", "browse")
    assert (tab["href"], tab["destination"]) == ("/ml/tfdist/ui/{DAG_ID}", "dag")
    assert (nav["url_route"], tab["url_route"]) == ("training-runs", "training-runs-of-dag")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert page_views()[0]["href"] == "/tfdist/ui/"


def test_the_app_is_built_once_on_its_first_request_and_serves_every_request_after():
    built = []

    def build() -> FastAPI:
        app = FastAPI()
        app.get("/ping")(lambda: len(built))
        built.append(app)
        return app

    served = BuiltOnFirstRequest(build)
    assert built == []  # loading the plugin builds nothing
    client = TestClient(served)
    assert [client.get("/ping").json() for _ in range(3)] == [1, 1, 1] and len(built) == 1


def test_the_installed_package_registers_the_plugin_by_its_entry_point_with_its_app():
    assert registered_by_entry_point()
    assert TfdistPlugin.name == "tfdist" and isinstance(TfdistPlugin.fastapi_apps[0]["app"], BuiltOnFirstRequest)
