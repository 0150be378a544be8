"""The plugin's FastAPI app on the Airflow API server, mounted at ``<base>/tfdist``: the training-runs page and
its data, read from each pipeline's artifact root (the roots its serialized tasks name) and from Airflow's
metadata database (run type, state, times, backfills).

Every route requires a user signed in to Airflow (the UI's session cookie, or the Bearer token from
``/auth/token`` that the REST API takes): 401 without one. A pipeline's page and data also require the
permission to read that DAG's runs (403), as Airflow's own run pages do."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_authenticated
from airflow.models.backfill import Backfill as BackfillRow
from airflow.models.dag import DagModel, DagTag
from airflow.models.dagrun import DagRun
from airflow.models.serialized_dag import SerializedDagModel
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse
from sqlalchemy import select

from tfdist.operators.report import AirflowRun, Backfill, curve, data_validation, overview, progress
from tfdist.trainer.contract import run_path

PAGE_FILES = {name: Path(__file__).with_name(name) for name in ("page.html", "page.js", "page.css")}
NO_CACHE = {"Cache-Control": "no-cache"}  # a plugin upgrade shows at the next load


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _pipeline(dag_id: str, session: Any) -> tuple[Any, list[str], list[str]]:
    """(the serialized DAG, its artifact roots, its model directories); 404 for a DAG that is no pipeline."""
    dag = SerializedDagModel.get_dag(dag_id, session=session)
    tasks = dag.tasks if dag else []
    roots = sorted({t.artifact_root for t in tasks if getattr(t, "artifact_root", None)})
    if not roots:
        raise HTTPException(404, f"{dag_id!r} is not a tfdist pipeline known to Airflow")
    return dag, roots, [t.model_dir for t in tasks if getattr(t, "model_dir", None)]


def pipeline_overview(dag_id: str, session: Any) -> dict[str, Any]:
    dag, roots, model_dirs = _pipeline(dag_id, session)
    rows = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)).all()
    runs = {r.run_id: AirflowRun(str(r.run_type), str(r.state), _iso(r.data_interval_start),
                                 _iso(r.data_interval_end), _iso(r.start_date), _iso(r.end_date), r.backfill_id)
            for r in rows}
    backfill_ids = {r.backfill_id for r in rows if r.backfill_id is not None}
    backfills = {b.id: Backfill(b.id, b.from_date.isoformat(), b.to_date.isoformat(), b.dag_run_conf or {})
                 for b in session.scalars(select(BackfillRow).where(BackfillRow.id.in_(backfill_ids)))}
    return {**overview(dag_id, roots, model_dirs, runs, backfills), "description": dag.description,
            "model_name": os.path.basename(model_dirs[0]) if model_dirs else None}


def run_record(dag_id: str, run_id: str, session: Any, read: Any) -> Any:
    """What ``read`` finds in the run's directory under any of the pipeline's artifact roots, else None."""
    _, roots, _ = _pipeline(dag_id, session)
    return next(filter(None, (read(run_path(root, dag_id, run_id)) for root in roots)), None)


def add_run_routes(app: FastAPI, reads_runs: list) -> None:
    """One run's records: its live progress, training curve and data gate record (404 before there is one)."""

    @app.get("/pipelines/{dag_id}/runs/{run_id}/progress", dependencies=reads_runs)
    def run_progress(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        """The train stage's live progress (step, epoch, loss, examples/s, time left)."""
        state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        found = state and run_record(dag_id, run_id, session, progress)
        if not found:
            raise HTTPException(404, f"no training progress of run {run_id!r} yet")
        return {**found, "state": str(state)}

    @app.get("/pipelines/{dag_id}/runs/{run_id}/curve", dependencies=reads_runs)
    def run_curve(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        """The training curve by step (loss, accuracy, examples/s, learning rate), the parent's final values."""
        found = run_record(dag_id, run_id, session, curve)
        if not found:
            raise HTTPException(404, f"no training curve of run {run_id!r} yet")
        return found

    @app.get("/pipelines/{dag_id}/runs/{run_id}/data", dependencies=reads_runs)
    def run_data_gate(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        """The data gate's record of the run: every check, this run's and the baseline's data statistics."""
        found = run_record(dag_id, run_id, session, data_validation)
        if not found:
            raise HTTPException(404, f"no data gate record of run {run_id!r}")
        return found


def build_app() -> FastAPI:
    app = FastAPI(title="tfdist", description="Training runs of distributed TensorFlow pipelines")
    signed_in = [Depends(requires_authenticated())]
    reads_runs = [Depends(requires_access_dag("GET", DagAccessEntity.RUN))]

    @app.get("/pipelines")
    def pipelines(user: GetUserDep, session: SessionDep) -> list[dict[str, Any]]:
        """The tfdist pipelines the user may read (invalid specs left out)."""
        tags = session.execute(select(DagTag.dag_id, DagTag.name).where(DagTag.name.in_(["tfdist", "invalid-spec"])))
        tagged: dict[str, set[str]] = {}
        for dag_id, name in tags:
            tagged.setdefault(dag_id, set()).add(name)
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        wanted = sorted(d for d, names in tagged.items() if names == {"tfdist"} and d in readable)
        found = session.execute(select(DagModel.dag_id, DagModel.description)
                                .where(DagModel.dag_id.in_(wanted), DagModel.is_stale.is_(False)))
        return [{"dag_id": dag_id, "description": description} for dag_id, description in sorted(found)]

    @app.get("/pipelines/{dag_id}", dependencies=reads_runs)
    def pipeline(dag_id: str, session: SessionDep) -> dict[str, Any]:
        """Every run side by side, the metrics and thresholds to chart, the published versions."""
        return pipeline_overview(dag_id, session)

    add_run_routes(app, reads_runs)

    @app.get("/runs/{dag_id}", dependencies=reads_runs)
    def runs(dag_id: str, session: SessionDep) -> list[dict[str, Any]]:
        """Every run of the pipeline, newest data interval first."""
        return pipeline_overview(dag_id, session)["runs"]

    @app.get("/ui/", dependencies=signed_in)
    def index_page() -> FileResponse:
        return FileResponse(PAGE_FILES["page.html"], headers=NO_CACHE)

    @app.get("/ui/{dag_id}", dependencies=reads_runs)
    def pipeline_page(dag_id: str) -> FileResponse:
        return FileResponse(PAGE_FILES["page.html"], headers=NO_CACHE)

    @app.get("/static/{name}", dependencies=signed_in)
    def asset(name: str) -> FileResponse:
        if name not in PAGE_FILES:
            raise HTTPException(404, f"no file {name!r}")
        return FileResponse(PAGE_FILES[name], headers=NO_CACHE)

    return app
