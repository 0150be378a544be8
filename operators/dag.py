"""Spec → Airflow DAG (or a task group of a DAG someone wrote): prepare_data → validate_data → train →
evaluate → (approve: with export.approval) → export. Nothing heavy happens at parse time."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from airflow.sdk import (
    DAG,
    Asset,
    AssetAll,
    AssetAny,
    AssetOrTimeSchedule,
    BaseOperator,
    CronDataIntervalTimetable,
    PartitionedAssetTimetable,
    StartOfDayMapper,
    StartOfHourMapper,
    StartOfMonthMapper,
    StartOfWeekMapper,
    StartOfYearMapper,
    TaskGroup,
)
from airflow.sdk.definitions._internal.contextmanager import DagContext
from airflow.sdk.definitions._internal.node import GROUP_KEY_REGEX
from airflow.sdk.exceptions import AirflowFailException

from tfdist.operators.evaluate import EvaluateOperator
from tfdist.operators.export import ExportModelOperator
from tfdist.operators.params import dag_params
from tfdist.operators.prepare import PrepareDataOperator
from tfdist.operators.train import DistributedTrainOperator
from tfdist.operators.validate_data import ValidateDataOperator
from tfdist.spec import NAME_PATTERN, PARTITION_KEY_FORMATS, AssetSchedule, Spec, SpecError, load_spec
from tfdist.spec.load import read_yaml

log = logging.getLogger(__name__)


PARTITION_MAPPERS = {
    "hour": StartOfHourMapper,
    "day": StartOfDayMapper,
    "week": StartOfWeekMapper,
    "month": StartOfMonthMapper,
    "year": StartOfYearMapper,
}


def timetable(spec: Spec) -> Any:
    """The DAG's schedule: a cron's data intervals, or the upstream assets (any or all of them; or the time too;
    or their partitions, each mapped to the pipeline's own period), in the spec's time zone."""
    schedule = spec.schedule
    if not isinstance(schedule, AssetSchedule):
        return schedule and CronDataIntervalTimetable(schedule, timezone=spec.timezone)
    assets = []
    for i, uri in enumerate(schedule.assets):
        try:
            assets.append(Asset(uri))
        except (ValueError, TypeError) as exc:
            raise SpecError([f"schedule.assets[{i}]: Airflow refuses {uri!r}: {exc}"], f"spec {spec.name!r}") from None
    condition = (AssetAll if schedule.when == "all" else AssetAny)(*assets)
    if schedule.partitions:
        mapper = PARTITION_MAPPERS[schedule.partitions](
            timezone=spec.timezone,
            input_format=schedule.partition_key_format,
            output_format=PARTITION_KEY_FORMATS[schedule.partitions],
        )
        return PartitionedAssetTimetable(assets=condition, default_partition_mapper=mapper)
    if schedule.cron:
        return AssetOrTimeSchedule(
            timetable=CronDataIntervalTimetable(schedule.cron, timezone=spec.timezone), assets=condition
        )
    return condition


EMBEDDED_TAG = "tfdist-embedded"
"""Tags a DAG holding pipelines embedded by build_task_group: the plugin's API looks in these DAGs for them."""
DAG_FIELDS = ("schedule", "timezone", "catchup", "max_active_runs", "tags", "description")
"""Spec fields of the pipeline's own DAG (build_dag); an embedded pipeline's DAG is its author's."""


def _chain(spec: Spec, group_id: str | None = None) -> None:
    """prepare_data → validate_data → train → evaluate → (approve) → export, in the DAG or task group being
    defined."""
    t = spec.training
    pool = {"pool": t.pool, "pool_slots": t.pool_slots or t.processes} if t.pool else {}
    common: dict[str, Any] = {"spec": spec, "pipeline_group": group_id}
    evaluated = (
        PrepareDataOperator(task_id="prepare_data", **common)
        >> ValidateDataOperator(task_id="validate_data", **common)
        >> DistributedTrainOperator(task_id="train", **common, **pool)
        >> EvaluateOperator(task_id="evaluate", **common)
    )
    if spec.export.approval:  # imported here: Airflow's HITL operator costs ~8 ms to import, paid only when used
        from tfdist.operators.approval import PublishApprovalOperator

        evaluated = evaluated >> PublishApprovalOperator(task_id="approve", **common)
    evaluated >> ExportModelOperator(task_id="export", **common)


def build_dag(spec: Spec | dict | str | os.PathLike, **dag_kwargs: Any) -> DAG:
    """The spec's DAG; invalid specs raise SpecError, which Airflow shows as the file's import error."""
    spec = load_spec(spec)
    schedule = timetable(spec)
    with DAG(
        dag_id=spec.name,
        description=spec.description or f"Distributed TensorFlow training of {spec.export.model_name}",
        schedule=schedule,
        start_date=spec.start_date,
        catchup=spec.catchup,
        max_active_runs=spec.max_active_runs,
        params=dag_params(spec),
        tags=["tfdist", *spec.tags],
        **dag_kwargs,
    ) as dag:
        _chain(spec)
    return dag


def _embedding_problems(spec: Spec, dag: DAG | None, group_id: str | None) -> list[str]:
    """Why ``spec`` cannot be embedded as task group ``group_id`` (None: its name) of the DAG being defined ([]
    when it can)."""
    if dag is None:
        return ["<spec>: build_task_group makes a task group of the DAG being defined; call it inside 'with DAG(...):'"]
    problems = [
        f"{field}: belongs to the DAG {dag.dag_id!r} the pipeline is embedded in (set it there); remove it "
        "from the spec"
        for field in DAG_FIELDS
        if field in spec.model_fields_set
    ]
    if _zone_name(dag) is None:
        problems.append(
            f"timezone: the DAG {dag.dag_id!r} has the fixed offset {dag.timezone.name}, which the pipeline's windows "
            "cannot follow across clock changes; give its start_date a named zone, e.g. "
            "pendulum.datetime(2026, 11, 1, tz='Asia/Tokyo')"
        )
    if not GROUP_KEY_REGEX.match(group_id or spec.name):
        problems.append(
            f"group_id: {group_id!r} is no task group id (letters, digits, '_' and '-' only)"
            if group_id
            else f"name: {spec.name!r} cannot be the task group id (letters, digits, '_' and '-' only); "
            "pass build_task_group(spec, group_id=...)"
        )
    model_dir = os.path.join(spec.export_root, spec.export.model_name)
    problems += [
        f"export.model_name: {spec.export.model_name!r} is published to {model_dir} by the pipeline "
        f"{task.pipeline_id!r} of this DAG too, and their versions would interleave; give each pipeline its "
        "own export.model_name"
        for task in dag.tasks
        if isinstance(task, ExportModelOperator) and task.model_dir == model_dir
    ]
    return problems


def _zone_name(dag: DAG) -> str | None:
    """The IANA name of the DAG's time zone (None for a fixed offset)."""
    name = getattr(dag.timezone, "name", "")
    with contextlib.suppress(ValueError, ZoneInfoNotFoundError):
        return ZoneInfo(name).key
    return None


def build_task_group(
    spec: Spec | dict | str | os.PathLike, group_id: str | None = None, **task_group_kwargs: Any
) -> TaskGroup:
    """The spec's pipeline as a task group (``group_id``: default the spec's name) of the DAG being defined, e.g.
    ``extract >> build_task_group(spec)``: the DAG's schedule and data interval drive it, its run conf's
    ``<group_id>`` mapping holds the run's overrides. Invalid or conflicting specs raise SpecError."""
    spec = load_spec(spec)
    dag = DagContext.get_current()
    if problems := _embedding_problems(spec, dag, group_id):
        raise SpecError(problems, f"spec {spec.name!r} embedded in a DAG")
    assert dag is not None  # else a problem above
    dag.tags.add(EMBEDDED_TAG)
    # the windows (data.window, a run without an interval) follow the DAG's cron schedule (days without one) in
    # the DAG's time zone
    spec = spec.model_copy(update={"schedule": getattr(dag.timetable, "expression", None), "timezone": _zone_name(dag)})
    with TaskGroup(group_id or spec.name, **task_group_kwargs) as group:
        _chain(spec, group.group_id)
    return group


class InvalidSpecOperator(BaseOperator):
    """The one task of an invalid spec's DAG: fails with the spec's problems if anyone triggers it."""

    ui_color = "#ffcdd2"

    def __init__(self, *, problems: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problems = problems

    def execute(self, context: Any) -> None:
        raise AirflowFailException(self.problems)


def invalid_spec_dag(dag_id: str, path: Path, error: SpecError) -> DAG:
    """A DAG that shows an invalid spec file on the DAG list (its description names the file and every
    problem) and that nothing schedules: no schedule, paused, one task that fails with the problems."""
    with DAG(
        dag_id=dag_id,
        dag_display_name=f"{dag_id} (INVALID SPEC {path.name})",
        description=str(error),
        doc_md=f"**Invalid pipeline spec `{path}`**: nothing of it runs until it is fixed.\n\n"
        + "\n".join(f"- `{problem}`" for problem in error.problems),
        schedule=None,
        is_paused_upon_creation=True,
        tags=["tfdist", "invalid-spec"],
    ) as dag:
        InvalidSpecOperator(task_id="invalid_spec", problems=str(error), retries=0)
    return dag


def _declared_name(path: Path) -> str | None:
    """The spec file's ``name`` if it reads as one, whatever else is wrong with the file."""
    try:
        name = read_yaml(path.read_text()).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return name if isinstance(name, str) and re.fullmatch(NAME_PATTERN, name) else None


def build_dags_from_directory(directory: str | os.PathLike) -> dict[str, DAG]:
    """One DAG per ``*.yaml``/``*.yml`` spec file. A file that does not validate does not stop the others:
    it becomes an invalid-spec DAG (see ``invalid_spec_dag``) under its own ``name`` when that is free,
    else ``invalid_spec.<file stem>``, and its problems are logged."""
    with _cyclic_gc_paused():
        return _build_dags_from_directory(Path(directory))


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (if it was on). Building a folder's DAGs keeps every
    object it makes, so the collector's passes over them (a sixth of a large folder's time) would free next to
    nothing; it runs again, as usual, after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _build_dags_from_directory(directory: Path) -> dict[str, DAG]:
    dags: dict[str, DAG] = {}
    origins: dict[str, str] = {}
    invalid: list[tuple[Path, SpecError]] = []
    for path in sorted(directory.glob("*.y*ml")):
        try:
            spec = load_spec(path)
            if spec.name in origins:
                raise SpecError(
                    [
                        f"name: {spec.name!r} is already the name of {origins[spec.name]}; give each "
                        "spec file its own name"
                    ],
                    f"spec file {path}",
                )
        except SpecError as exc:
            invalid.append((path, exc))
            continue
        origins[spec.name] = path.name
        dags[spec.name] = build_dag(spec)
    for path, error in invalid:
        log.error("%s", error)
        name = _declared_name(path)
        dag_id = name if name and name not in dags else f"invalid_spec.{re.sub(r'[^A-Za-z0-9_.-]', '_', path.stem)}"
        dags[dag_id] = invalid_spec_dag(dag_id, path, error)
    return dags
