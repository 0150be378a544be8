"""Spec → Airflow DAG: prepare_data → validate_data → train → evaluate → (approve: with export.approval) →
export. Nothing heavy happens at parse time."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import yaml
from airflow.sdk import (DAG, Asset, AssetAll, AssetAny, AssetOrTimeSchedule, BaseOperator, CronDataIntervalTimetable,
                        PartitionedAssetTimetable, StartOfDayMapper, StartOfHourMapper, StartOfMonthMapper,
                        StartOfWeekMapper, StartOfYearMapper)
from airflow.sdk.exceptions import AirflowFailException

from tfdist.operators.approval import PublishApprovalOperator
from tfdist.operators.evaluate import EvaluateOperator
from tfdist.operators.export import ExportModelOperator
from tfdist.operators.params import dag_params
from tfdist.operators.prepare import PrepareDataOperator
from tfdist.operators.train import DistributedTrainOperator
from tfdist.operators.validate_data import ValidateDataOperator
from tfdist.operators.plan import PARTITION_KEY_FORMATS
from tfdist.trainer.spec import NAME_PATTERN, AssetSchedule, Spec, SpecError, load_spec

log = logging.getLogger(__name__)


PARTITION_MAPPERS = {"hour": StartOfHourMapper, "day": StartOfDayMapper, "week": StartOfWeekMapper,
                     "month": StartOfMonthMapper, "year": StartOfYearMapper}


def timetable(spec: Spec) -> Any:
    """The DAG's schedule: a cron's data intervals, or the upstream assets (any or all of them; or the time too;
    or their partitions, each mapped to the pipeline's own period)."""
    schedule = spec.schedule
    if not isinstance(schedule, AssetSchedule):
        return schedule and CronDataIntervalTimetable(schedule, timezone="UTC")
    assets = []
    for i, uri in enumerate(schedule.assets):
        try:
            assets.append(Asset(uri))
        except (ValueError, TypeError) as exc:
            raise SpecError([f"schedule.assets[{i}]: Airflow refuses {uri!r}: {exc}"], f"spec {spec.name!r}") from None
    condition = (AssetAll if schedule.when == "all" else AssetAny)(*assets)
    if schedule.partitions:
        mapper = PARTITION_MAPPERS[schedule.partitions](input_format=schedule.partition_key_format,
                                                        output_format=PARTITION_KEY_FORMATS[schedule.partitions])
        return PartitionedAssetTimetable(assets=condition, default_partition_mapper=mapper)
    if schedule.cron:
        return AssetOrTimeSchedule(timetable=CronDataIntervalTimetable(schedule.cron, timezone="UTC"), assets=condition)
    return condition


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
        t = spec.training
        pool = {"pool": t.pool, "pool_slots": t.pool_slots or t.processes} if t.pool else {}
        evaluated = (
            PrepareDataOperator(task_id="prepare_data", spec=spec)
            >> ValidateDataOperator(task_id="validate_data", spec=spec)
            >> DistributedTrainOperator(task_id="train", spec=spec, **pool)
            >> EvaluateOperator(task_id="evaluate", spec=spec)
        )
        if spec.export.approval:
            evaluated = evaluated >> PublishApprovalOperator(task_id="approve", spec=spec)
        evaluated >> ExportModelOperator(task_id="export", spec=spec)
    return dag


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
        name = yaml.safe_load(path.read_text()).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return name if isinstance(name, str) and re.fullmatch(NAME_PATTERN, name) else None


def build_dags_from_directory(directory: str | os.PathLike) -> dict[str, DAG]:
    """One DAG per ``*.yaml``/``*.yml`` spec file. A file that does not validate does not stop the others:
    it becomes an invalid-spec DAG (see ``invalid_spec_dag``) under its own ``name`` when that is free,
    else ``invalid_spec.<file stem>``, and its problems are logged."""
    dags, origins, invalid = {}, {}, []
    for path in sorted(Path(directory).glob("*.y*ml")):
        try:
            spec = load_spec(path)
            if spec.name in origins:
                raise SpecError([f"name: {spec.name!r} is already the name of {origins[spec.name]}; give each "
                                 "spec file its own name"], f"spec file {path}")
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
