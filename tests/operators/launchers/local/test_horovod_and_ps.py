"""Horovod for real: ranks over Gloo and over OpenMPI (the parameter-server cluster is in
tests/operators/launchers/local/test_faults_training.py, killed and resumed)."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.logs import collecting_logger
from tests.support.plans import prepared_plan, run
from tests.support.processes import assert_all_stopped, assert_no_process_of
from tfdist.contract.progress import TrainProgress
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageStopped
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.launchers.processes import local_processes

DIGEST = re.compile(r"^\[(rank-\d+)\] rank-\d+: done at step \d+; weights sha256 (\w+);")

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_horovod_ranks_end_with_identical_weights_and_lower_loss(digits_root, controller):
    plan = prepared_plan(
        digits_root, f"hvd_{controller}", training={"backend": "mpi", "mpi": {"controller": controller}}
    )
    _launcher, lines = run(plan, "train")
    assert_no_process_of(plan)
    digests = dict(m.groups() for m in map(DIGEST.match, lines) if m)
    assert sorted(digests) == ["rank-0", "rank-1"], lines[-20:]
    assert len(set(digests.values())) == 1, f"ranks diverged: {digests}"
    (process,) = local_processes(plan.stage("train"))
    blocks = process.env["TFDIST_CORES"].split(";")
    for rank in (0, 1):
        assert any(line.startswith(f"[rank-{rank}] rank-{rank}: step ") for line in lines)
        cores = blocks[rank] if blocks[0] else ",".join(map(str, sorted(os.sched_getaffinity(0))))
        assert any(line.startswith(f"[rank-{rank}]") and f"cores {cores})" in line for line in lines), cores
    result = read_json(plan.layout.result("train"))
    assert result["workers"] == 2 and result["loss_per_epoch"][-1] < result["loss_per_epoch"][0] / 2
    assert f"ckpt-{result['final_step']}.index" in os.listdir(plan.layout.checkpoint_dir)  # written by rank 0
    progress = read_record(plan.layout.progress_file, TrainProgress)  # the training-runs page's live record, by rank 0
    assert (progress.step, progress.total_steps, progress.workers) == (result["final_step"], result["final_step"], 2)
    assert progress.examples_per_sec > 0 and progress.seconds_left == 0 and progress.epoch == progress.epochs


def test_stopping_horovodrun_ends_every_rank(digits_root):
    """on_kill's path for Horovod: horovodrun starts its ranks in sessions of their own, the launcher
    still ends them all."""
    plan = prepared_plan(
        digits_root, "hvd_stop", training={"backend": "mpi", "epochs": 400, "mpi": {"controller": "gloo"}}
    )

    def stop_once_both_ranks_train(line: str) -> None:
        seen.add(line.split("]")[0])
        if {"[rank-0", "[rank-1"} <= seen:
            launcher.stop()

    seen: set[str] = set()
    logger, _ = collecting_logger("hvd_stop", lambda line: "step" in line and stop_once_both_ranks_train(line))
    launcher = LocalLauncher(plan)
    with pytest.raises(StageStopped):
        launcher.run(plan.stage("train"), logger)
    assert_all_stopped(launcher)
    assert_no_process_of(plan)
