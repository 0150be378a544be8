"""Where the training-runs page lives: the plugin's web app (``tfdist.operators.web``) serves it, the operators'
extra links (``tfdist.operators.links``) lead to it. Imports no Airflow at import."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

APP_PREFIX = "/tfdist"
NAV_ROUTE = "training-runs"
"""The page in Airflow's navigation: ``<base>/plugin/training-runs``, the app's page framed in it."""


def base_path() -> str:
    """The path Airflow is served under (``[api] base_url``), '' at the root."""
    from airflow.sdk import conf  # not at import: the plugin imports this module while Airflow loads it

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def page_url(pipeline_id: str, **query: Any) -> str:
    """The training-runs page of a pipeline inside Airflow's UI, ``query`` selecting a run or version."""
    base, args = base_path(), urlencode(query)
    page = f"{base}/plugin/{NAV_ROUTE}{base}{APP_PREFIX}/ui/{quote(pipeline_id, safe='')}"
    return page + (f"?{args}" if args else "")
