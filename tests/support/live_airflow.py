"""A real, running Airflow 3.3 for end-to-end tests: API server, scheduler and dag-processor on 127.0.0.1, on
a PostgreSQL server of its own (tests/support/postgres.py), LocalExecutor, in a home of its own; stopped with every
process it started.

It runs in multi-team mode with Airflow's simple auth manager, so that DAG authorization is real: the
DAGs folder is a bundle without a team (every user may read it), a second bundle belongs to the team
``other-team``; ``admin`` is an admin, ``analyst`` a viewer of the team ``ml-team``, ``editor`` a user (who may
trigger and answer approvals), ``ml_op`` an op of ``ml-team`` and ``other_op`` an op of ``other-team``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil
import requests

from tests.support.postgres import Postgres
from tests.support.roots import REPO
from tfdist.infra.stopping import stop_processes
from tfdist.operators.launchers.processes import free_ports

BIN = os.path.dirname(sys.executable)
COMPONENTS = (["api-server"], ["scheduler"], ["dag-processor"])
RESTRICTED_TEAM = "other-team"
USERS = {  # name: (role[:teams], password)
    "admin": ("admin", "admin"),
    "analyst": ("viewer:ml-team", "analyst"),
    "editor": ("user", "editor"),
    "ml_op": ("op:ml-team", "ml_op"),
    "other_op": (f"op:{RESTRICTED_TEAM}", "other_op"),
}


class CommandFailed(AssertionError):
    """An Airflow CLI command exited non-zero; the message holds its stdout and stderr."""


class LiveAirflow:
    def __init__(self, home: str, dags_folder: str, restricted_folder: str, artifact_root: str):
        self.home = home
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        os.makedirs(home, exist_ok=True)
        passwords = os.path.join(home, "passwords.json")
        with open(passwords, "w") as f:
            json.dump({name: password for name, (_, password) in USERS.items()}, f)
        self.database = Postgres()
        bundle = "airflow.dag_processing.bundles.local.LocalDagBundle"
        self.env = {
            **os.environ,
            "PATH": f"{BIN}:{os.environ['PATH']}",  # the task runner starts the venv's own tools
            "AIRFLOW_HOME": home,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database.url,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "plugins"),  # the thin file beside the entry point
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{r}" for n, (r, _) in USERS.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": passwords,
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                [
                    {"name": "dags-folder", "classpath": bundle, "kwargs": {"path": dags_folder}},
                    {
                        "name": "restricted",
                        "classpath": bundle,
                        "kwargs": {"path": restricted_folder},
                        "team_name": RESTRICTED_TEAM,
                    },
                ]
            ),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",  # tasks start sooner after their upstream
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",  # an approval's timeout is applied sooner
            "TFDIST_ARTIFACT_ROOT": artifact_root,
        }
        self.processes: list[subprocess.Popen] = []
        self._tokens: dict[str, str] = {}

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [os.path.join(BIN, "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode:
            raise CommandFailed(
                f"airflow {' '.join(args)} exited {done.returncode}\n"
                f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-8000:]}"
            )
        return done.stdout

    def start(self, dag_ids: list[str], timeout: float = 180) -> None:
        self.database.start()
        self.cli("db", "migrate")
        for team in ("ml-team", RESTRICTED_TEAM):
            self.cli("teams", "create", team)
        for args in COMPONENTS:
            log = open(os.path.join(self.home, f"{args[0]}.log"), "w")
            self.processes.append(
                subprocess.Popen(
                    [os.path.join(BIN, "airflow"), *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        self.wait_for(
            lambda: set(dag_ids) <= {d["dag_id"] for d in self.api("GET", "/api/v2/dags?limit=100")["dags"]},
            timeout,
            f"the dag-processor to parse {dag_ids} (logs in {self.home})",
        )

    def stop(self) -> None:
        victims = []
        for proc in self.processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(proc.pid)
                victims += [process, *process.children(recursive=True)]
        stop_processes(others=victims, grace=20)  # as the local launcher stops: a process may end in the meantime
        self.database.stop()

    @staticmethod
    def wait_for(predicate, timeout: float, what: str, every: float = 1.0) -> Any:
        """Poll ``predicate`` until it returns something true (API errors while Airflow starts count as not yet)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if result := predicate():
                    return result
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(every)

    def token(self, user: str = "admin") -> str:
        """A JWT from ``/auth/token``, as a REST client logs in."""
        if user not in self._tokens:
            response = requests.post(
                f"{self.url}/auth/token", json={"username": user, "password": USERS[user][1]}, timeout=30
            )
            response.raise_for_status()
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def request(self, method: str, path: str, user: str | None = "admin", body: Any = None) -> requests.Response:
        """One HTTP request to the API server, as ``user`` (None: without a token)."""
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return requests.request(method, f"{self.url}{path}", json=body, timeout=30, headers=headers)

    def api(self, method: str, path: str, body: Any = None, expect: int | None = None, user: str = "admin") -> Any:
        response = self.request(method, path, user=user, body=body)
        if expect is not None:
            assert response.status_code == expect, response.text
            return response.json()
        response.raise_for_status()
        return response.json()

    def unpause(self, dag_id: str, user: str = "admin") -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, user=user)

    def trigger(self, dag_id: str, conf: dict | None = None, user: str = "admin") -> str:
        """A manual run (no logical date) of an unpaused DAG, triggered by ``user``; its run id."""
        self.unpause(dag_id, user)
        body = {"logical_date": None, "conf": conf or {}}
        return self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body, user=user)["dag_run_id"]

    def runs(self, dag_id: str) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]

    def wait_for_runs(self, dag_id: str, predicate, timeout: float = 300) -> list[dict]:
        """Poll until ``predicate(runs)`` holds and none of those runs is still queued or running."""

        def finished():
            runs = self.runs(dag_id)
            return runs if predicate(runs) and all(r["state"] in ("success", "failed") for r in runs) else None

        return self.wait_for(finished, timeout, f"runs of {dag_id}", every=2)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict:
        """The finished run ``run_id``."""

        def finished():
            run = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in ("success", "failed") else None

        return self.wait_for(finished, timeout, f"run {run_id} of {dag_id}", every=2)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict]:
        instances = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti for ti in instances}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {task_id: ti["state"] for task_id, ti in self.task_instances(dag_id, run_id).items()}

    def scheduler_took_exit(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> bool:
        """The scheduler has handled the executor's event of the try's worker process ending (a deferral's too)."""
        key = f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}', try_number={try_number},"
        with open(os.path.join(self.home, "scheduler.log")) as f:
            return any("Received executor event" in line and key in line for line in f)

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as text (its JSON records, non-ASCII characters kept)."""
        folder = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}", f"task_id={task_id}")
        with open(os.path.join(folder, f"attempt={try_number}.log")) as f:
            return "\n".join(json.dumps(json.loads(line), ensure_ascii=False) for line in f if line.strip())
