"""Shared fixtures: the digits partitions (scikit-learn's data set, no download) and a small spec."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import logging
import os
import random
import signal
import threading
import time
import types
from collections.abc import Iterator

import psutil
import pytest

from tests.file_seconds import FILE_SECONDS
from tests.object_store import GCSServer, S3Server, TokenServer
from tfdist.contract.layout import record_run
from tfdist.contract.progress import last_beats
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import write_digits_partitions
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.plan import RunContext, build_plan
from tfdist.spec import load_spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = dt.date(2026, 11, 20)
ROOT_REQUIRED = os.environ.get("TFDIST_REQUIRE_ROOT") == "1"
"""Set by .ci/run, which runs as root: there a test that needs root fails instead of skipping."""
STANDIN_NEEDS_ROOT = "the stand-in's pods need root (network namespaces)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest test files first (tests/file-seconds.json), each file's tests in their order: pytest-xdist,
    run with --no-loadscope-reorder, then hands the files out in this order, and the short ones fill in at the end."""
    with open(FILE_SECONDS) as f:
        seconds = json.load(f)
    items.sort(key=lambda item: -seconds.get(os.path.relpath(item.path, REPO), 0))


def lacks_root() -> bool:
    """Whether a root-only test skips here: not root, outside CI (a non-root newcomer's ``make test``). As root, a
    tool it needs that is missing fails it."""
    return os.geteuid() != 0 and not ROOT_REQUIRED


def needs_root(why: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(lacks_root(), reason=why)


SMALL_SPEC = {
    "name": "digits_test",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "data": {
        "source": "{artifact_root}/raw/digits/{date}/*.csv",
        "format": "csv",
        "features": [{"name": "pixel", "shape": [64]}],
        "label": {"name": "label", "num_classes": 10},
        "num_shards": 4,
    },
    "model": {"family": "mlp", "hidden_units": [64], "learning_rate": 0.003},
    "training": {"num_workers": 2, "epochs": 4, "global_batch_size": 64, "checkpoint_every_steps": 20},
    "validation": {"thresholds": {"accuracy": {"lower": 0.9}}},
    "export": {"model_name": "digits_small"},
}


def make_spec(root: str, **sections) -> dict:
    """SMALL_SPEC with artifact root ``root``; each keyword updates one section (``model`` is replaced
    when it names another family) or sets a top-level field."""
    spec = copy.deepcopy(SMALL_SPEC)
    spec["artifact_root"] = root
    for key, value in sections.items():
        current = spec.get(key)
        same_family = isinstance(current, dict) and value.get("family") in (None, current.get("family"))
        if isinstance(value, dict) and same_family:
            spec[key].update(value)
        else:
            spec[key] = value
    return spec


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


STORE_FIXTURES = {"s3": "s3", "gs": "gcs"}
"""The fixture of each object store's test server, by URL scheme."""


def new_bucket_url(request, scheme: str, prefix: str) -> str:
    """``<scheme>://<a new empty bucket>/<prefix>`` on that store's test server."""
    return f"{scheme}://{request.getfixturevalue(STORE_FIXTURES[scheme]).new_bucket()}/{prefix}"


@pytest.fixture(scope="session")
def digits_root(tmp_path_factory) -> str:
    """An artifact root holding three daily digits partitions ending at DAY."""
    root = str(tmp_path_factory.mktemp("artifacts"))
    write_digits_partitions(os.path.join(root, "raw", "digits"), DAY, 3)
    return root


class Lines(logging.Handler):
    """Collects formatted log lines; ``on_line`` may react to each one."""

    def __init__(self, on_line=None):
        super().__init__()
        self.lines: list[str] = []
        self.on_line = on_line

    def emit(self, record):
        line = record.getMessage()
        self.lines.append(line)
        if self.on_line:
            self.on_line(line)


def collecting_logger(name: str, on_line=None) -> tuple[logging.Logger, Lines]:
    logger = logging.getLogger(f"tfdist.test.{name}")
    logger.setLevel(logging.INFO)
    handler = Lines(on_line)
    logger.handlers = [handler]
    return logger, handler


START = dt.datetime.combine(DAY, dt.time(), dt.UTC)


def plan_for(root: str, run_id: str, day: dt.date = DAY, **sections):
    """The plan of a run of SMALL_SPEC on the daily partition of ``day``, its run directory recorded."""
    spec = load_spec(make_spec(root, **sections))
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    plan = build_plan(spec, RunContext(spec.name, run_id, start, start + dt.timedelta(days=1)))
    record_run(plan.layout, spec.to_json_dict(), plan.run_record())
    return plan


_PREPARED: dict[str, str] = {}
"""The data directories this test process prepared, by their input and data section."""


def prepare_once(plan, input_key: str) -> None:
    """Run the plan's prepare_data stage; or, when this test process prepared the same input (``input_key``) with
    the same data section before, link the run's data to what that made (later stages only read it)."""
    key = json.dumps([input_key, plan.spec.data.model_dump(mode="json")])
    if key in _PREPARED:
        os.symlink(_PREPARED[key], plan.layout.data_dir)
    else:
        run(plan, "prepare_data")
        _PREPARED[key] = plan.layout.data_dir


def prepared_plan(root: str, run_id: str, day: dt.date = DAY, **sections):
    """``plan_for``, with the run's data prepared once per day's partition and data section (``prepare_once``)."""
    plan = plan_for(root, run_id, day, **sections)
    prepare_once(plan, json.dumps(plan.stage("prepare_data").args.source))
    return plan


def steps_of(plan, epochs: int) -> int:
    """The steps of ``epochs`` over the run's prepared training data, at the global batch of 64."""
    return read_json(plan.layout.manifest_file)["train"]["examples"] // 64 * epochs


def run(plan, task_id: str) -> tuple[LocalLauncher, list[str]]:
    logger, lines = collecting_logger(task_id)
    launcher = LocalLauncher(plan)
    launcher.run(plan.stage(task_id), logger)
    return launcher, lines.lines


def ended(process: psutil.Process) -> bool:
    """Gone, or a zombie its new parent has yet to reap (nothing reaps orphans in some containers)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_all_stopped(launcher: LocalLauncher) -> None:
    """Every process the launcher started has ended (and been reaped: ``poll``)."""
    for name, proc in launcher.processes.items():
        assert proc.poll() is not None, f"{name} still running"


def assert_no_process_of(plan) -> None:
    """No process anywhere (orphans included) still works on this run."""
    left = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and plan.layout.run_dir in " ".join(proc.info["cmdline"] or []):
            left.append(proc)
    assert not left, f"processes left behind: {left}"


def wait_for(predicate, timeout: float, what: str):
    """The predicate's first true value, asked every 0.1 s until ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


FAULT_TRIALS = int(os.environ.get("TFDIST_FAULT_TRIALS", "1"))
"""Trials (seeds) of each fault-injection case: 1 in ``make test``, more in ``make faults``."""


def fault_modes(modes, run_once: str) -> list[str]:
    """The modes a fault case runs in: every one under make faults, ``run_once`` alone when the suite runs
    each case once (make test-extended, within CI's time budget)."""
    return list(modes) if FAULT_TRIALS > 1 else [run_once]


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


class RandomKill(threading.Thread):
    """SIGKILLs one training process at a random point of training: inside the step call after the furthest
    heartbeat passes a step drawn from ``after`` to ``before``. The victim is a Horovod rank or TF cluster
    member by its heartbeat (``rank-1``), else a stage process by name (``worker-1`` of a parameter-server
    cluster, whose workers do not beat)."""

    def __init__(self, plan, launcher: LocalLauncher, victim: str, seed: int, after: int, before: int):
        super().__init__(daemon=True)
        self.plan, self.launcher, self.victim = plan, launcher, victim
        draw = random.Random(seed)
        self.target, self.delay = draw.randint(after + 1, before), draw.uniform(0, 0.05)
        self.at: float | None = None
        self.step = 0
        """The furthest step any training process had reached when the victim was killed (a step call that
        ended as it died included), read 0.5 s later."""
        self.beaten = 0
        """The furthest step beaten as the victim was killed: what survivors that go on within 0.5 s (Horovod's
        elastic ranks) must keep."""

    def furthest(self) -> int:
        return max((b.step for b in last_beats(self.plan.layout.heartbeat_dir).values()), default=0)

    def run(self) -> None:
        while self.furthest() < self.target:
            time.sleep(0.01)
        time.sleep(self.delay)
        beats = last_beats(self.plan.layout.heartbeat_dir)
        pid = beats[self.victim].pid if self.victim in beats else self.launcher.processes[self.victim].pid
        self.beaten = max((b.step for b in beats.values()), default=0)
        os.kill(pid, signal.SIGKILL)
        self.at = time.time()
        # the others' last step call may have ended as the victim died (and its checkpoint been saved): their
        # beats follow within moments, long before a restarted cluster steps again
        time.sleep(0.5)
        self.step = self.furthest()


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
