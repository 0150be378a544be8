"""Airflow DAG loader: every ``specs/*.yaml`` file beside this one becomes a DAG.

An invalid spec makes this file's import fail with every problem named by file and field
(the Airflow UI shows it as an import error)."""

from pathlib import Path

from operators import build_dags_from_directory

globals().update(build_dags_from_directory(Path(__file__).parent / "specs"))
