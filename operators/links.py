"""The operator extra links: each stage to its run on the training-runs page, export also to its version, train
to its run in TensorBoard where one is named."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink, BaseXCom, conf

from tfdist.operators.page_urls import page_url


def run_page_url(operator: Any, ti_key: Any, **query: Any) -> str:
    """The training-runs page of the operator's pipeline, at the task instance's run (``query`` adds to it)."""
    from tfdist.operators.plan import pipeline_id  # when a link is asked for, not when a DAG file is parsed

    pipeline = pipeline_id(ti_key.dag_id, getattr(operator, "pipeline_group", None))
    return page_url(pipeline, run=ti_key.run_id, **query)


class TrainingRunLink(BaseOperatorLink):
    """Every stage's link to its run on the training-runs page."""

    name = "Training run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return run_page_url(operator, ti_key)


class PublishedVersionLink(BaseOperatorLink):
    """Export's link to the version it published (none when it published nothing)."""

    name = "Published version"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        result = BaseXCom.get_value(ti_key=ti_key, key="return_value") or {}
        return run_page_url(operator, ti_key, version=result["version"]) if "version" in result else ""


class TensorBoardLink(BaseOperatorLink):
    """Train's link to its run in TensorBoard (its time series, filtered to the run), where the spec's
    ``training.tensorboard_url`` or Airflow's setting ``[tfdist] tensorboard_url`` names a TensorBoard serving the
    pipeline's runs directory; none otherwise."""

    name = "TensorBoard"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        url = getattr(operator, "tensorboard_url", None) or conf.get("tfdist", "tensorboard_url", fallback="")
        from tfdist.contract.layout import run_key

        query = urlencode({"runFilter": f"^{run_key(ti_key.run_id)}/"})  # a run key has no regex metacharacter
        return f"{url.rstrip('/')}/?{query}#timeseries" if url else ""
