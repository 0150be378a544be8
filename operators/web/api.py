"""The plugin's FastAPI app on the Airflow API server, mounted at ``<base>/tfdist``: the training-runs page and
its data, read from each pipeline's artifact root (the roots its serialized tasks name) and from Airflow's
metadata database (run type, state, times, backfills).

Every route requires a user signed in to Airflow (the UI's session cookie, or the Bearer token from
``/auth/token`` that the REST API takes): 401 without one. A pipeline's page and data also require the
permission to read the runs of its DAG (403), as Airflow's own run pages do; a pipeline is known by its id, its
DAG's id or, embedded in a DAG (``build_task_group``), '<dag id>.<task group id>'. Withdrawing or restoring a version
requires the permission to edit the DAG that publishes the model and to create asset events (403), as Airflow's
own ``POST /api/v2/assets/events`` does. A pipeline or run id with a control character is refused first (400)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import (
    GetUserDep,
    requires_access_asset,
    requires_access_dag,
    requires_authenticated,
)
from airflow.assets.manager import asset_manager
from airflow.configuration import conf
from airflow.models.asset import AssetModel
from airflow.models.backfill import Backfill as BackfillRow
from airflow.models.base import ID_LEN
from airflow.models.dag import DagModel, DagTag
from airflow.models.dagrun import DagRun
from airflow.models.serialized_dag import SerializedDagModel
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse
from pydantic import AfterValidator, BaseModel
from sqlalchemy import select

from tfdist.contract.data_records import DataValidation
from tfdist.contract.layout import CONTROL_CHARACTERS, run_path
from tfdist.contract.publish_records import Withdrawn
from tfdist.operators.artifact_store import StoreUnreachable, connect
from tfdist.operators.dag import EMBEDDED_TAG
from tfdist.operators.export import model_asset
from tfdist.operators.plan import pipeline_id
from tfdist.operators.report import (
    AirflowRun,
    Backfill,
    Curve,
    PipelineRuns,
    Progress,
    RunRow,
    all_model_dirs,
    curve,
    data_validation,
    list_runs,
    now_served,
    overview,
    progress,
)
from tfdist.publishing import registry

MEDIA_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
PAGE_FILES = {path.name: path for path in sorted(Path(__file__).parent.iterdir()) if path.suffix in MEDIA_TYPES}
"""The page's files by name: page.html, page.css and its ES modules (page.js, the entry, imports the others)."""
NO_CACHE = {"Cache-Control": "no-cache"}  # a plugin upgrade shows at the next load


def page_file(name: str) -> FileResponse:
    """One of the page's files by its name, with its media type (a module script must be served as JavaScript);
    404 for any other name (no path: the names are those of PAGE_FILES)."""
    if name not in PAGE_FILES:
        raise HTTPException(404, f"no file {name!r}")
    path = PAGE_FILES[name]
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=NO_CACHE)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _stage_tasks(dag: Any) -> dict[str, list]:
    """The serialized DAG's tfdist stage tasks by pipeline id (its own, and those of pipelines embedded in it)."""
    found: dict[str, list] = {}
    for task in dag.tasks if dag else []:
        if getattr(task, "artifact_root", None):
            found.setdefault(pipeline_id(dag.dag_id, getattr(task, "pipeline_group", None)), []).append(task)
    return found


def holding_dag_ids(pipeline: str) -> list[str]:
    """The ids a DAG holding the pipeline may have, longest first: its own, and its parts up to a '.' (a task group
    nested in another has a '.' in its id), none longer than Airflow's DAG ids: at most ID_LEN / 2 + 1 of them,
    found in time linear in the id's length."""
    dots = [i for i, c in enumerate(pipeline[: ID_LEN + 1]) if c == "."]
    return [pipeline[:i] for i in [len(pipeline), *reversed(dots)] if 0 < i <= ID_LEN]


def _holding_dag(pipeline: str, session: Any, authorize: Any = lambda dag_id: None) -> tuple[Any, list]:
    """(the serialized DAG holding the pipeline, its tasks): the DAG of that id, else the DAG whose id is the
    pipeline's up to a '.', longest first, each one ``authorize``-d (which raises) before it is read; (None, [])
    when no DAG holds it."""
    candidates = holding_dag_ids(pipeline)
    known = set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(candidates))))
    for dag_id in (c for c in candidates if c in known):
        authorize(dag_id)
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        if tasks := _stage_tasks(dag).get(pipeline):
            return dag, tasks
    return None, []


def _pipeline(pipeline: str, session: Any) -> tuple[Any, list[str], list[str]]:
    """(the serialized DAG holding it, its artifact roots, its model directories); 404 for an id that is no
    pipeline."""
    dag, tasks = _holding_dag(pipeline, session)
    if not tasks:
        raise HTTPException(404, f"{pipeline!r} is not a tfdist pipeline known to Airflow")
    roots = sorted({t.artifact_root for t in tasks})
    model_dirs = [t.model_dir for t in tasks if getattr(t, "model_dir", None)]
    reach(*roots, *model_dirs)
    return dag, roots, model_dirs


def reach(*urls: str) -> None:
    """Connect to the stores of ``urls`` through the Airflow connection; 502 naming it where that fails."""
    try:
        connect(*urls)
    except StoreUnreachable as exc:
        raise HTTPException(502, str(exc)) from None


def requires_pipeline_access(method: ResourceMethod, access_entity: DagAccessEntity | None = None) -> Any:
    """Airflow's DAG access check (``requires_access_dag``) against each DAG that may hold the path's pipeline,
    before it is read (403 at the first the user may not access, fail closed), and against the pipeline id itself
    when none holds it."""

    def inner(pipeline_id: str, request: Request, user: GetUserDep, session: SessionDep) -> None:
        def authorize(dag_id: str) -> None:
            requires_access_dag(method, access_entity, param_dag_id=dag_id)(request, user)

        dag, _ = _holding_dag(pipeline_id, session, authorize)
        if dag is None:
            authorize(pipeline_id)

    return inner


def printable_ids(request: Request) -> None:
    """400 for a pipeline or run id in the path holding control characters (NUL, escape codes): no DAG, task
    group or run has one."""
    for name in ("pipeline_id", "run_id"):
        if CONTROL_CHARACTERS.search(request.path_params.get(name, "")):
            raise HTTPException(
                400,
                f"{name}: {request.path_params[name]!r} holds control characters (NUL, escape codes), which no "
                f"{name} has; give it as Airflow shows it",
            )


def _description(dag: Any, pipeline: str, model_dirs: list[str]) -> str | None:
    """A pipeline that is its DAG: the DAG's description; an embedded one: what it trains, in which DAG."""
    if pipeline == dag.dag_id:
        return dag.description
    model = f"{os.path.basename(model_dirs[0])} " if model_dirs else ""
    return f"Distributed TensorFlow training of {model}in DAG {dag.dag_id}"


def embedded_pipelines(dag_ids: list[str], session: Any) -> list[dict[str, Any]]:
    """The pipelines embedded in the DAGs ``dag_ids`` (their ids, DAGs and descriptions)."""
    found = []
    for dag_id in dag_ids:
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        for pipeline, tasks in _stage_tasks(dag).items():
            model_dirs = [t.model_dir for t in tasks if getattr(t, "model_dir", None)]
            found.append(
                {"pipeline_id": pipeline, "dag_id": dag_id, "description": _description(dag, pipeline, model_dirs)}
            )
    return found


class PipelinePage(PipelineRuns):
    """A pipeline's page data: its runs and versions, and the DAG holding it."""

    dag_id: str
    description: str | None
    model_name: str | None


class LiveProgress(Progress):
    """The train stage's progress and the run's state in Airflow."""

    state: str


def pipeline_overview(pipeline: str, session: Any) -> PipelinePage:
    dag, roots, model_dirs = _pipeline(pipeline, session)
    rows = session.scalars(select(DagRun).where(DagRun.dag_id == dag.dag_id)).all()
    runs = {
        r.run_id: AirflowRun(
            str(r.run_type),
            str(r.state),
            _iso(r.data_interval_start),
            _iso(r.data_interval_end),
            _iso(r.start_date),
            _iso(r.end_date),
            r.backfill_id,
        )
        for r in rows
    }
    backfill_ids = {r.backfill_id for r in rows if r.backfill_id is not None}
    backfills = {
        b.id: Backfill(b.id, b.from_date.isoformat(), b.to_date.isoformat(), b.dag_run_conf or {})
        for b in session.scalars(select(BackfillRow).where(BackfillRow.id.in_(backfill_ids)))
    }
    return PipelinePage(
        **dict(overview(pipeline, roots, model_dirs, runs, backfills)),
        dag_id=dag.dag_id,
        description=_description(dag, pipeline, model_dirs),
        model_name=os.path.basename(model_dirs[0]) if model_dirs else None,
    )


def run_record(pipeline: str, run_id: str, session: Any, read: Any, missing: str) -> Any:
    """What ``read`` finds in the run's directory under any of the pipeline's artifact roots; 404 saying
    ``missing`` where it finds nothing."""
    _, roots, _ = _pipeline(pipeline, session)
    found = next(filter(None, (read(run_path(root, pipeline, run_id)) for root in roots)), None)
    if not found:
        raise HTTPException(404, missing)
    return found


def add_run_routes(app: FastAPI, reads_runs: list) -> None:
    """One run's records: its live progress, training curve and data gate record (404 before there is one)."""

    @app.get("/pipelines/{pipeline_id}/runs/{run_id}/progress", dependencies=reads_runs)
    def run_progress(pipeline_id: str, run_id: str, session: SessionDep) -> LiveProgress:
        """The train stage's live progress (step, epoch, loss, train metrics, examples/s, time left)."""
        dag, _ = _holding_dag(pipeline_id, session)
        state = dag and session.scalar(select(DagRun.state).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id))
        missing = f"no training progress of run {run_id!r} yet"
        if not state:
            raise HTTPException(404, missing)
        found: Progress = run_record(pipeline_id, run_id, session, progress, missing)
        return LiveProgress(**dict(found), state=str(state))

    @app.get("/pipelines/{pipeline_id}/runs/{run_id}/curve", dependencies=reads_runs)
    def run_curve(pipeline_id: str, run_id: str, session: SessionDep) -> Curve:
        """The training curve by step (loss, train metrics, examples/s, learning rate), the parent's final values."""
        return run_record(pipeline_id, run_id, session, curve, f"no training curve of run {run_id!r} yet")

    @app.get("/pipelines/{pipeline_id}/runs/{run_id}/data", dependencies=reads_runs, response_model=DataValidation)
    def run_data_gate(pipeline_id: str, run_id: str, session: SessionDep) -> DataValidation:
        """The data gate's record of the run: every check, what was not compared and why, this run's and the
        baseline's data statistics."""
        return run_record(pipeline_id, run_id, session, data_validation, f"no data gate record of run {run_id!r}")


def _reason(reason: str) -> str:
    if problem := registry.reason_problem(reason):
        raise ValueError(problem)
    return reason.strip()


class Withdrawal(BaseModel):
    reason: Annotated[str, AfterValidator(_reason)]
    """Why the version is bad (required; one line, at most ``registry.REASON_MAX_CHARS`` characters)."""


def version_model_dir(pipeline: str, version: int, session: Any) -> str:
    """The pipeline's model directory that holds ``version``, published or withdrawn; 404 if none does."""
    _, roots, declared = _pipeline(pipeline, session)
    model_dirs = all_model_dirs(list_runs(pipeline, roots), declared)
    reach(*model_dirs)
    for model_dir in model_dirs:
        if version in {m.version for m in [*registry.versions(model_dir), *registry.withdrawn(model_dir)]}:
            return model_dir
    raise HTTPException(404, f"no version {version} of {pipeline!r}, published or withdrawn")


def emit_model_event(model_dir: str, extra: dict[str, Any], user: Any, session: Any) -> list:
    """Record an event on the model's Asset in this request's session (committed with it), as Airflow's
    ``POST /api/v2/assets/events`` does; its callbacks (listeners) for the caller to run once the change is
    made. 404 if Airflow knows no such Asset."""
    uri = model_asset(os.path.basename(model_dir)).uri
    asset = session.scalar(select(AssetModel).where(AssetModel.uri == uri))
    teams = get_auth_manager().get_authorized_teams(user=user) if conf.getboolean("core", "multi_team") else set()
    callbacks: list = []
    if asset is None or not asset_manager.register_asset_change(
        asset=asset, extra=extra, source_is_api=True, api_user_teams=teams, session=session, callback_sink=callbacks
    ):
        raise HTTPException(404, f"Airflow knows no Asset {uri} (the DAG's export task declares it)")
    return callbacks


class VersionChanged(Withdrawn):
    """A withdrawal or restore done: the version's withdrawal record, ``live`` (the version served now, None:
    none is left), the model directory, what TF Serving serves now in words, and the Asset event emitted."""

    live: int | None
    model_dir: str
    message: str
    asset_event: dict[str, Any]


def change_version(
    pipeline: str, version: int, extra: dict[str, Any], user: Any, session: Any, change: Any
) -> VersionChanged:
    """Emit the model's Asset event, then ``change(model_dir)`` (a withdrawal or restore): if it is refused,
    the request's session rolls the event back. The change's record, the model directory and what is served."""
    model_dir = version_model_dir(pipeline, version, session)
    callbacks = emit_model_event(model_dir, extra, user, session)
    try:
        done: registry.VersionChange = change(model_dir)
    except registry.UnknownVersion as exc:
        raise HTTPException(404, str(exc)) from exc
    except registry.RegistryError as exc:
        raise HTTPException(409, str(exc)) from exc
    for callback in callbacks:
        callback()
    return VersionChanged(
        **dict(done.withdrawn),
        live=done.live,
        model_dir=model_dir,
        message=now_served(model_dir, done.live),
        asset_event=extra,
    )


def add_version_routes(app: FastAPI) -> FastAPI:
    """Withdraw and restore a published version: for who may edit the DAG and create asset events."""
    edits_dag = [Depends(requires_pipeline_access("PUT")), Depends(requires_access_asset("POST"))]

    @app.post(
        "/pipelines/{pipeline_id}/versions/{version}/withdraw", dependencies=edits_dag, response_model=VersionChanged
    )
    def withdraw(
        pipeline_id: str, version: int, body: Withdrawal, user: GetUserDep, session: SessionDep
    ) -> VersionChanged:
        """Withdraw a published version (moved aside; TF Serving serves the previous one), recording who and
        why, and tell the model's consumers with an Asset event."""
        by = user.get_name()
        return change_version(
            pipeline_id,
            version,
            {"withdrawn": version, "reason": body.reason, "by": by},
            user,
            session,
            lambda model_dir: registry.withdraw(model_dir, version, body.reason, by),
        )

    @app.post(
        "/pipelines/{pipeline_id}/versions/{version}/restore", dependencies=edits_dag, response_model=VersionChanged
    )
    def restore(pipeline_id: str, version: int, user: GetUserDep, session: SessionDep) -> VersionChanged:
        """Put a withdrawn version back (refused while a version of that number is published); an Asset event
        says so."""
        return change_version(
            pipeline_id,
            version,
            {"restored": version, "by": user.get_name()},
            user,
            session,
            lambda model_dir: registry.restore(model_dir, version),
        )

    return app


def readable_pipelines(user: Any, session: Any) -> list[dict[str, Any]]:
    """The tfdist pipelines ``user`` may read (invalid specs left out), those embedded in DAGs included."""
    tags = session.execute(
        select(DagTag.dag_id, DagTag.name).where(DagTag.name.in_(["tfdist", "invalid-spec", EMBEDDED_TAG]))
    )
    tagged: dict[str, set[str]] = {}
    for dag_id, name in tags:
        tagged.setdefault(dag_id, set()).add(name)
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    live = set(
        session.scalars(
            select(DagModel.dag_id).where(DagModel.dag_id.in_(readable & set(tagged)), DagModel.is_stale.is_(False))
        )
    )
    own = session.execute(
        select(DagModel.dag_id, DagModel.description).where(
            DagModel.dag_id.in_(sorted(d for d in live if tagged[d] == {"tfdist"}))
        )
    )
    embedded = embedded_pipelines(sorted(d for d in live if EMBEDDED_TAG in tagged[d]), session)
    return sorted(
        [
            *({"pipeline_id": dag_id, "dag_id": dag_id, "description": description} for dag_id, description in own),
            *embedded,
        ],
        key=lambda p: p["pipeline_id"],
    )


def build_app() -> FastAPI:
    app = FastAPI(
        title="tfdist",
        description="Training runs of distributed TensorFlow pipelines",
        dependencies=[Depends(printable_ids)],  # before the routes' own: no id with a NUL reaches the database
    )
    signed_in = [Depends(requires_authenticated())]
    reads_runs = [Depends(requires_pipeline_access("GET", DagAccessEntity.RUN))]

    @app.get("/pipelines")
    def pipelines(user: GetUserDep, session: SessionDep) -> list[dict[str, Any]]:
        """The tfdist pipelines the user may read (invalid specs left out), those embedded in DAGs included."""
        return readable_pipelines(user, session)

    @app.get("/pipelines/{pipeline_id}", dependencies=reads_runs)
    def pipeline(pipeline_id: str, session: SessionDep) -> PipelinePage:
        """Every run side by side, the metrics and thresholds to chart, the published versions."""
        return pipeline_overview(pipeline_id, session)

    add_run_routes(app, reads_runs)

    @app.get("/runs/{pipeline_id}", dependencies=reads_runs)
    def runs(pipeline_id: str, session: SessionDep) -> list[RunRow]:
        """Every run of the pipeline, newest data interval first."""
        return pipeline_overview(pipeline_id, session).runs

    @app.get("/ui/", dependencies=signed_in)
    def index_page() -> FileResponse:
        return page_file("page.html")

    @app.get("/ui/{pipeline_id}", dependencies=reads_runs)
    def pipeline_page(pipeline_id: str) -> FileResponse:
        return page_file("page.html")

    @app.get("/static/{name}", dependencies=signed_in)
    def asset(name: str) -> FileResponse:
        return page_file(name)

    return add_version_routes(app)
