"""Spec → Airflow DAG: prepare_data → train → evaluate → export. Nothing heavy happens at parse time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable

from operators.evaluate import EvaluateOperator
from operators.export import ExportModelOperator
from operators.params import dag_params
from operators.prepare import PrepareDataOperator
from operators.spec import Spec, SpecError, load_spec
from operators.train import DistributedTrainOperator


def build_dag(spec: Spec | dict | str | os.PathLike, **dag_kwargs: Any) -> DAG:
    """The spec's DAG; invalid specs raise SpecError, which Airflow shows as the file's import error."""
    spec = load_spec(spec)
    schedule = CronDataIntervalTimetable(spec.schedule, timezone="UTC") if spec.schedule else None
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
        (
            PrepareDataOperator(task_id="prepare_data", spec=spec)
            >> DistributedTrainOperator(task_id="train", spec=spec, **pool)
            >> EvaluateOperator(task_id="evaluate", spec=spec)
            >> ExportModelOperator(task_id="export", spec=spec)
        )
    return dag


def build_dags_from_directory(directory: str | os.PathLike) -> dict[str, DAG]:
    """One DAG per ``*.yaml``/``*.yml`` spec file; every invalid file is reported together."""
    dags, problems = {}, []
    for path in sorted(Path(directory).glob("*.y*ml")):
        try:
            dag = build_dag(path)
        except SpecError as exc:
            problems += [f"{path.name}: {problem}" for problem in exc.problems]
            continue
        dags[dag.dag_id] = dag
    if problems:
        raise SpecError(problems, f"specs in {directory}")
    return dags
