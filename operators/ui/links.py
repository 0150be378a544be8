"""The operator extra links to the training-runs page: each stage to its run, export also to its version."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink, BaseXCom

from tfdist.operators.ui import page_url


class TrainingRunLink(BaseOperatorLink):
    """Every stage's link to its run on the training-runs page."""

    name = "Training run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return page_url(ti_key.dag_id, run=ti_key.run_id)


class PublishedVersionLink(BaseOperatorLink):
    """Export's link to the version it published (none when it published nothing)."""

    name = "Published version"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        result = BaseXCom.get_value(ti_key=ti_key, key="return_value") or {}
        return page_url(ti_key.dag_id, run=ti_key.run_id, version=result["version"]) if "version" in result else ""
