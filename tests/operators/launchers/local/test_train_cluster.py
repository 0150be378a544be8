"""Real 2-worker TF-cluster training through the local launcher: separate processes on 127.0.0.1,
MultiWorkerMirroredStrategy, checkpoints by the chief; a failing worker stops the rest at once."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading

import pytest

from tests.support.dags import task_instance
from tests.support.plans import plan_for, prepared_plan, run
from tests.support.processes import assert_all_stopped, assert_no_process_of, wait_for
from tests.support.specs import START, make_spec
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageStopped
from tfdist.operators.launchers.processes import local_processes
from tfdist.operators.page_urls import page_url


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_two_workers_train_with_checkpoints(digits_root):
    plan = plan_for(digits_root, "train_ok")
    run(plan, "prepare_data")
    launcher, lines = run(plan, "train")
    assert_all_stopped(launcher)
    result = read_json(plan.layout.result("train"))
    manifest = read_json(plan.layout.manifest_file)
    steps_per_epoch = manifest["train"]["examples"] // 64
    assert result["final_step"] == 4 * steps_per_epoch and result["workers"] == 2
    assert result["metrics"]["accuracy"] > 0.8 and result["examples_per_sec"] > 0
    checkpoints = sorted(f for f in os.listdir(plan.layout.checkpoint_dir) if f.endswith(".index"))
    assert f"ckpt-{result['final_step']}.index" in checkpoints and len(checkpoints) == 3  # keep_checkpoints
    assert result["checkpoint"].endswith(f"ckpt-{result['final_step']}")
    for worker in ("worker-0", "worker-1"):
        assert any(line.startswith(f"[{worker}] {worker}: step ") and "examples/s" in line for line in lines)
    for process in local_processes(plan.stage("train")):  # pinned as planned (2+ cores), else any core
        cores = process.env["TFDIST_CORES"] or ",".join(map(str, sorted(os.sched_getaffinity(0))))
        assert any(line.startswith(f"[{process.name}]") and f"cores {cores})" in line for line in lines), cores

    # a second run of the same task finds the finished checkpoint and does not train again
    _, again = run(plan, "train")
    assert any("already trained" in line for line in again)
    assert read_json(plan.layout.result("train")) == result


@pytest.mark.e2e  # real worker processes, 15-40 s: in make test, not in the fast set
def test_on_kill_stops_every_worker(digits_root):
    """The operator's on_kill (what Airflow calls when the task is stopped) ends all worker processes of the
    run while they train: the stage ends as stopped (not failed), each worker by the launcher's signals."""

    from tfdist.operators.dag import build_dag

    spec = make_spec(digits_root, training={"epochs": 400})
    plan = prepared_plan(digits_root, "train_on_kill", training={"epochs": 400})
    operator = build_dag(spec).get_task("train")  # in its DAG: the run directory prepared above
    context = {
        "run_id": "train_on_kill",
        "data_interval_start": START,
        "data_interval_end": START + dt.timedelta(days=1),
        "params": {},
        "ti": task_instance(operator.dag_id, "train_on_kill"),
    }
    errors = []
    thread = threading.Thread(target=lambda: errors.append(_execute(operator, context)))
    thread.start()
    wait_for(
        lambda: (
            os.path.isdir(plan.layout.checkpoint_dir)
            and any(f.startswith("ckpt-") for f in os.listdir(plan.layout.checkpoint_dir))
        ),
        120,
        "the first checkpoint",
    )
    workers = operator._launcher.processes
    assert all(proc.poll() is None for proc in workers.values()), "a worker ended before on_kill"
    # the task's link to its run on the training-runs page is there while it trains
    assert context["ti"].pushed["_link_TrainingRunLink"] == page_url(operator.dag_id, run="train_on_kill")
    operator.on_kill()
    thread.join(30)
    assert not thread.is_alive() and isinstance(errors[0], StageStopped), errors
    # ended by the launcher's signals (TF's MultiWorkerMirrored workers ignore SIGTERM: SIGKILL after the grace)
    assert {proc.returncode for proc in workers.values()} <= {-signal.SIGTERM, -signal.SIGKILL}, workers
    assert_no_process_of(plan)
    assert not os.path.exists(plan.layout.result("train"))


def _execute(operator, context: dict):
    try:
        operator.execute(context)
    except Exception as exc:
        return exc


@pytest.mark.e2e
def test_a_retry_stops_workers_left_by_an_earlier_attempt(digits_root):
    """Workers of an earlier attempt that are still alive are stopped before the retry starts its own."""
    import subprocess

    plan = prepared_plan(digits_root, "train_retry", training={"epochs": 2})
    stage = plan.stage("train")
    stale = [
        subprocess.Popen(p.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **p.env})
        for p in local_processes(stage, addresses=["127.0.0.1:1", "127.0.0.1:2"])
    ]
    _, lines = run(plan, "train")
    assert any("stopping 2 process(es) left by an earlier attempt" in line for line in lines)
    assert all(proc.poll() is not None for proc in stale)
    assert read_json(plan.layout.result("train"))["final_step"] > 0
