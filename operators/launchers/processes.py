from typing import Any, ClassVar
from airflow.plugins_manager import AirflowPlugin
class P(AirflowPlugin):
    fastapi_apps: ClassVar[list[Any]] = []
