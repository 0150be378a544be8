"""``make demo``: the example nightly DAG once, end to end, through real Airflow (``airflow dags test``: the
real task runner, XCom and task logs) on scikit-learn's digits, ending with the exported model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.publishing.versions import published_metadata
from tests.support.roots import REPO

pytestmark = pytest.mark.e2e


def test_demo_runs_the_example_dag_and_shows_its_exported_model(tmp_path):
    root, logs = tmp_path / "artifacts", tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "tfdist.operators.cli", "demo", "--logs", str(logs)],
        cwd=REPO,
        env={**os.environ, "TFDIST_ARTIFACT_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = (logs / "dags-test.log").read_text() if (logs / "dags-test.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-5000:]
    (published,) = published_metadata(str(root / "models" / "digits"))
    assert f"exported model: {published['path']}" in done.stdout
    shown = float(re.search(r"eval accuracy:\s+([\d.]+)", done.stdout)[1])
    assert shown == pytest.approx(published["metrics"]["accuracy"], abs=1e-4) and shown >= 0.9
    assert published["serving_eval_metrics"]["accuracy"] >= 0.9 and published["gate"] == "value thresholds"
    for worker in ("worker-0", "worker-1"):
        assert f"[{worker}] {worker}: step " in done.stdout + log, f"no progress lines from {worker}"

    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run(
        [airflow, "tasks", "states-for-dag-run", "digits_nightly", published["run_id"], "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = {row["task_id"]: row["state"] for row in json.loads(out[out.index("[") :])}
    assert states == dict.fromkeys(["prepare_data", "validate_data", "train", "evaluate", "export"], "success")
