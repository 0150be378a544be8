"""The tfdist Airflow plugin, registered by the ``airflow.plugins`` entry point of the installed package: the
training-runs page (``tfdist.operators.web``) in the Airflow UI, in its navigation and as a tab of every DAG,
with the data routes behind it on the API server (``<base>/tfdist``, see ``tfdist.operators.web.api``: Airflow's
authentication and DAG permissions apply). The operators' extra links are declared by the provider info."""

import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from tfdist.operators import page_urls, provider_info
from tfdist.operators.page_urls import APP_PREFIX, NAV_ROUTE, base_path


def importing_airflow_ourselves() -> bool:
    """Whether a module of tfdist's Airflow side is importing Airflow, which loads this plugin: the DAG
    builder is then being imported by that module, and importing it from here would find it half done."""
    own = {__name__, __package__, provider_info.__name__, page_urls.__name__}
    return any(name.startswith("tfdist.operators.") and name not in own for name in sys.modules)


# With "[core] lazy_load_plugins = False", every Airflow process loads this plugin when it imports
# Airflow, so the dag-processor has the DAG builder imported and warmed up before it forks a process
# per parse (docs/performance.md).
if not importing_airflow_ourselves():
    import tfdist.operators.approval  # the DAG builder imports it only for a spec with export.approval
    import tfdist.operators.dag  # noqa: F401
    from tfdist.operators.export import model_asset
    from tfdist.operators.params import warm_up

    warm_up()
    # The first Asset a process makes loads every provider's Asset URI handlers (the Amazon provider's imports
    # boto3: ~300 modules, 0.3 s); every tfdist DAG declares one (its model's).
    model_asset("warm-up")


def registered_by_entry_point() -> bool:
    """Whether an installed tfdist registers this plugin through its ``airflow.plugins`` entry point."""
    return any(point.module == __name__ for point in entry_points(group="airflow.plugins"))


def build_app() -> Any:
    from tfdist.operators.web.api import build_app

    return build_app()


class BuiltOnFirstRequest:
    """An ASGI app built on its first request: only the API server, which serves it, imports Airflow's API
    security modules (0.7 s), not every Airflow process that loads this plugin."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._app: Any = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)


def page_views() -> list[dict[str, str]]:
    """The page in Airflow's navigation (Browse) and as a tab of each DAG (``{DAG_ID}``: the UI fills it in)."""
    page = f"{base_path()}{APP_PREFIX}/ui/"
    return [
        {"name": "Training runs", "href": page, "url_route": NAV_ROUTE, "destination": "nav", "category": "browse"},
        {"name": "Training runs", "href": page + "{DAG_ID}", "url_route": f"{NAV_ROUTE}-of-dag", "destination": "dag"},
    ]


class TfdistPlugin(AirflowPlugin):
    name = "tfdist"
    # A false positive of RUF012: Airflow reads a plugin's parts from class attributes, which AirflowPlugin
    # declares as plain list attributes (marked ClassVar here, they would clash with that declaration).
    fastapi_apps = [  # noqa: RUF012
        {"app": BuiltOnFirstRequest(build_app), "url_prefix": APP_PREFIX, "name": "tfdist training runs"}
    ]
    external_views = page_views()
