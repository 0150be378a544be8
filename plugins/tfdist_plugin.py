"""The tfdist Airflow plugin: a small API on the Airflow API server, ``/tfdist/runs/<dag_id>``, listing
each training run of a pipeline (window, metrics, gate decision, export version) from the artifact
root (``$TFDIST_ARTIFACT_ROOT``, else ``~/tfdist``)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI

from operators.report import list_runs
from operators.spec import default_artifact_root

# With "[core] lazy_load_plugins = False", every Airflow process loads this plugin when it imports
# Airflow, so the dag-processor has the DAG builder imported and warmed up before it forks a process
# per parse (README, "Performance").
try:
    import operators.dag  # noqa: F401
    from operators.params import warm_up

    warm_up()
except ImportError as exc:  # Airflow is being imported by one of our own modules: it warms up nothing here
    if "partially initialized module 'operators." not in str(exc):
        raise

app = FastAPI(title="tfdist", description="Distributed TensorFlow training pipelines")


@app.get("/runs/{dag_id}")
def runs(dag_id: str) -> list[dict]:
    if "/" in dag_id or dag_id.startswith("."):
        return []
    return list_runs(default_artifact_root(), dag_id)


class TfdistPlugin(AirflowPlugin):
    name = "tfdist"
    fastapi_apps = [{"app": app, "url_prefix": "/tfdist", "name": "tfdist training runs"}]
