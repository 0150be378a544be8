"""The parse-time yardstick (not in the DAGs folder): the example DAG's shape, daily with its five chained
tasks, doing nothing, its last declaring the same Asset outlet as the example's export (a model's)."""

import datetime as dt

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

with DAG("empty_nightly", schedule="@daily", start_date=dt.datetime(2026, 11, 1), catchup=False):
    (
        EmptyOperator(task_id="prepare_data")
        >> EmptyOperator(task_id="validate_data")
        >> EmptyOperator(task_id="train")
        >> EmptyOperator(task_id="evaluate")
        >> EmptyOperator(task_id="export", outlets=[Asset("model://digits")])
    )
