"""Airflow's side without a running Airflow: a DAGs folder of the tests' specs, a stage operator's task instance."""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator


@contextlib.contextmanager
def dags_folder(folder, specs: list[dict], what: str) -> Iterator[None]:
    """Airflow's DAGs folder is ``folder`` (a path) meanwhile, holding one DAG file that builds a DAG of each spec
    (``what``: the file's docstring)."""
    folder.mkdir(exist_ok=True)
    (folder / "pipelines.py").write_text(
        f'"""{what}"""\nfrom tfdist.operators import build_dag\n\n'
        f"for spec in {specs!r}:\n    globals()[spec['name']] = build_dag(spec)\n"
    )
    saved = os.environ["AIRFLOW__CORE__DAGS_FOLDER"]
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(folder)
    try:
        yield
    finally:
        os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = saved


def task_instance(dag_id: str, run_id: str, try_number: int = 1) -> types.SimpleNamespace:
    """What a stage operator's execute uses of Airflow's task instance: its key, its try number and XCom
    pushes (kept in ``pushed``)."""
    pushed: dict = {}
    return types.SimpleNamespace(
        dag_id=dag_id,
        run_id=run_id,
        try_number=try_number,
        pushed=pushed,
        xcom_push=lambda key, value: pushed.__setitem__(key, value),
    )
