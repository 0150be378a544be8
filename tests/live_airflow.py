"""A real, running Airflow 3.3 for end-to-end tests: API server, scheduler and dag-processor on
127.0.0.1 (SQLite, LocalExecutor), in a home of its own; stopped with every process it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil
import requests

from operators.launchers.local import free_ports

BIN = os.path.dirname(sys.executable)
COMPONENTS = (["api-server"], ["scheduler"], ["dag-processor"])
USER, PASSWORD = "admin", "admin"


class LiveAirflow:
    def __init__(self, home: str, dags_folder: str, artifact_root: str):
        self.home = home
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        os.makedirs(home, exist_ok=True)
        passwords = os.path.join(home, "passwords.json")
        with open(passwords, "w") as f:
            json.dump({USER: PASSWORD}, f)
        self.env = {
            **os.environ,
            "PATH": f"{BIN}:{os.environ['PATH']}",  # the task runner starts the venv's own tools
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": dags_folder,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": passwords,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "TFDIST_ARTIFACT_ROOT": artifact_root,
        }
        self.processes: list[subprocess.Popen] = []
        self._token: str | None = None

    def cli(self, *args: str) -> str:
        return subprocess.run([os.path.join(BIN, "airflow"), *args], env=self.env, capture_output=True, text=True,
                              check=True, timeout=120).stdout

    def start(self, dag_ids: list[str], timeout: float = 120) -> None:
        self.cli("db", "migrate")
        for args in COMPONENTS:
            log = open(os.path.join(self.home, f"{args[0]}.log"), "w")
            self.processes.append(subprocess.Popen([os.path.join(BIN, "airflow"), *args], env=self.env, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        while True:
            try:
                parsed = {d["dag_id"] for d in self.api("GET", "/api/v2/dags")["dags"]}
                if set(dag_ids) <= parsed:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Airflow did not come up with {dag_ids} in {timeout} s; logs in {self.home}")
            time.sleep(1)

    def stop(self) -> None:
        victims = []
        for proc in self.processes:
            try:
                victims += [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for victim in victims:
            victim.terminate()
        _, alive = psutil.wait_procs(victims, timeout=20)
        for victim in alive:
            victim.kill()
        psutil.wait_procs(alive, timeout=10)

    @property
    def token(self) -> str:
        """A JWT from ``/auth/token``, as a REST client logs in."""
        if self._token is None:
            response = requests.post(f"{self.url}/auth/token", json={"username": USER, "password": PASSWORD}, timeout=30)
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, body: Any = None, expect: int | None = None) -> Any:
        response = requests.request(method, f"{self.url}{path}", json=body, timeout=30,
                                    headers={"Authorization": f"Bearer {self.token}"})
        if expect is not None:
            assert response.status_code == expect, response.text
            return response.json()
        response.raise_for_status()
        return response.json()

    def runs(self, dag_id: str) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]

    def wait_for_runs(self, dag_id: str, predicate, timeout: float = 300) -> list[dict]:
        """Poll until ``predicate(runs)`` holds and none of those runs is still queued or running."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs(dag_id)
            if predicate(runs) and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dag_id} runs: {[(r['dag_run_id'], r['state']) for r in runs]}")
            time.sleep(2)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        instances = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in instances}

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as text (its JSON records, non-ASCII characters kept)."""
        folder = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}", f"task_id={task_id}")
        with open(os.path.join(folder, f"attempt={try_number}.log")) as f:
            return "\n".join(json.dumps(json.loads(line), ensure_ascii=False) for line in f if line.strip())
