"""The tfdist Airflow plugin: a small API on the Airflow API server, ``/tfdist/runs/<dag_id>``, listing each
training run of a pipeline (window, metrics, gate decision, export version) from that pipeline's own
artifact root (its spec's ``artifact_root``, as the DAG's tasks were serialized with it).

Every route requires a user authenticated by Airflow's auth manager (the Bearer token from
``/auth/token`` that the REST API takes, or the UI's session cookie) who may read the DAG's runs:
anonymous requests get 401, a user the auth manager does not allow to read that DAG 403."""

from typing import Any, Callable

from airflow.plugins_manager import AirflowPlugin

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


def build_api() -> Any:
    """The plugin's FastAPI app, behind Airflow's authentication and DAG authorization."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from airflow.models.serialized_dag import SerializedDagModel
    from fastapi import Depends, FastAPI, HTTPException

    from operators.report import list_runs

    api = FastAPI(title="tfdist", description="Distributed TensorFlow training pipelines")

    @api.get("/runs/{dag_id}", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))])
    def runs(dag_id: str, session: SessionDep) -> list[dict]:
        """Every run of the pipeline ``dag_id`` found under its artifact root(s), newest data interval first."""
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        roots = sorted({t.artifact_root for t in dag.tasks if getattr(t, "artifact_root", None)}) if dag else []
        if not roots:
            raise HTTPException(404, f"{dag_id!r} is not a tfdist pipeline known to Airflow")
        return list_runs(dag_id, roots)

    return api


class BuiltOnFirstRequest:
    """An ASGI app built on its first request: only the API server, which serves it, imports Airflow's API
    security modules (0.7 s), not every Airflow process that loads this plugin."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build, self._app = build, None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)


class TfdistPlugin(AirflowPlugin):
    name = "tfdist"
    fastapi_apps = [{"app": BuiltOnFirstRequest(build_api), "url_prefix": "/tfdist", "name": "tfdist training runs"}]
