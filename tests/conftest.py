"""The suite's pytest hooks and fixtures; the helpers tests import are in tests/support/."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.support.file_seconds import FILE_SECONDS
from tests.support.object_store import GCSServer, S3Server, TokenServer
from tests.support.roots import REPO
from tests.support.specs import DAY
from tfdist.infra import storage
from tfdist.operators.demo import write_digits_partitions


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest test files first (tests/file-seconds.json), each file's tests in their order: pytest-xdist,
    run with --no-loadscope-reorder, then hands the files out in this order, and the short ones fill in at the end."""
    with open(FILE_SECONDS) as f:
        seconds = json.load(f)
    items.sort(key=lambda item: -seconds.get(os.path.relpath(item.path, REPO), 0))


@pytest.fixture(scope="session", autouse=True)
def airflow_home(tmp_path_factory) -> str:
    """A private AIRFLOW_HOME for the whole session (its SQLite DB is created by the tests that need one)."""
    home = str(tmp_path_factory.mktemp("airflow_home"))
    os.environ.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "plugins"),  # the thin file beside the entry point
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",  # as recommended: the dag-processor pre-imports tfdist
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )
    return home


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """One S3-protocol server per test process; this process reaches it as the Airflow side does (credentials
    set from a connection), a worker through ``s3.env`` (its ambient identity)."""
    server = S3Server().start()
    storage.configure("s3", server.options)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def token_server() -> Iterator[TokenServer]:
    """Google's OAuth endpoint, stood in for: the service account keys of the gs:// tests sign in here."""
    server = TokenServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def gcs(token_server) -> Iterator[GCSServer]:
    """One GCS emulator per test process, found by gcsfs here and in every process started after (its variables
    set in this one's environment); this process signs in as the Airflow side does (a key from a connection)."""
    server = GCSServer().start()
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    storage.configure("gs", {"token": token_server.service_account_key()})
    yield server
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


@pytest.fixture(scope="session")
def digits_root(tmp_path_factory) -> str:
    """An artifact root holding three daily digits partitions ending at DAY."""
    root = str(tmp_path_factory.mktemp("artifacts"))
    write_digits_partitions(os.path.join(root, "raw", "digits"), DAY, 3)
    return root


@pytest.fixture
def fault_figures(request):
    """``record(case, mode, **measures)``: one trial's figures of a fault-injection case, appended to the
    JSON lines file named by $TFDIST_FAULT_FIGURES (``make faults`` sets it; bench/faults.py tabulates)."""
    path = os.environ.get("TFDIST_FAULT_FIGURES")

    def record(case: str, mode: str, **measures) -> None:
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"case": case, "mode": mode, "test": request.node.name, **measures}) + "\n")

    return record
