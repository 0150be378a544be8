"""Airflow DAG loader: every ``specs/*.yaml`` file beside this one becomes a DAG.

A spec file that does not validate never hides the others: it shows on the DAG list as its own paused
DAG, tagged ``invalid-spec``, whose description names the file and every problem by field; nothing of
it is scheduled until it is fixed."""

from pathlib import Path

from tfdist.operators import build_dags_from_directory

globals().update(build_dags_from_directory(Path(__file__).parent / "specs"))
