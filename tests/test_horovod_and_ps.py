"""The other distribution modes, for real: Horovod ranks over Gloo and over OpenMPI, and a TF
parameter-server cluster (1 chief, 1 ps, 2 workers)."""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest

from operators.launchers import StageFailed, StageStopped
from operators.launchers.local import LocalLauncher
from tests.conftest import assert_all_stopped, assert_no_process_of, collecting_logger, prepared_plan, run
from trainer.artifacts import read_json

DIGEST = re.compile(r"^\[(rank-\d+)\] rank-\d+: done at step \d+; weights sha256 (\w+);")

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_horovod_ranks_end_with_identical_weights_and_lower_loss(digits_root, controller):
    plan = prepared_plan(digits_root, f"hvd_{controller}",
                         training={"backend": "mpi", "mpi": {"controller": controller}})
    launcher, lines = run(plan, "train")
    assert_no_process_of(plan)
    digests = dict(m.groups() for m in map(DIGEST.match, lines) if m)
    assert sorted(digests) == ["rank-0", "rank-1"], lines[-20:]
    assert len(set(digests.values())) == 1, f"ranks diverged: {digests}"
    (process,) = plan.stage("train").processes
    blocks = process.env["TFDIST_CORES"].split(";")
    for rank in (0, 1):
        assert any(line.startswith(f"[rank-{rank}] rank-{rank}: step ") for line in lines)
        cores = blocks[rank] if blocks[0] else ",".join(map(str, sorted(os.sched_getaffinity(0))))
        assert any(line.startswith(f"[rank-{rank}]") and f"cores {cores})" in line for line in lines), cores
    result = read_json(plan.layout.result("train"))
    assert result["workers"] == 2 and result["loss_per_epoch"][-1] < result["loss_per_epoch"][0] / 2
    assert f"ckpt-{result['final_step']}.index" in os.listdir(plan.layout.checkpoint_dir)  # written by rank 0


def test_crashing_rank_fails_the_stage_fast_and_leaves_no_process(digits_root):
    plan = prepared_plan(digits_root, "hvd_crash",
                         training={"backend": "mpi", "epochs": 400, "mpi": {"controller": "mpi"}})
    killed = {}

    def kill_rank_1(line: str) -> None:
        if line.startswith("[rank-1] rank-1: step") and not killed:
            (rank_1,) = [p for p in psutil.Process(launcher.processes["mpirun-0"].pid).children(recursive=True)
                         if "trainer.train" in " ".join(p.cmdline()) and p.environ().get("OMPI_COMM_WORLD_RANK") == "1"]
            killed["at"] = time.monotonic()
            rank_1.send_signal(signal.SIGKILL)

    logger, _ = collecting_logger("hvd_crash", kill_rank_1)
    launcher = LocalLauncher()
    with pytest.raises(StageFailed) as failure:
        launcher.run(plan.stage("train"), logger)
    assert failure.value.process == "mpirun-0" and failure.value.returncode != 0
    assert "rank 1" in str(failure.value) and "[rank-1] last lines:" in str(failure.value)
    assert time.monotonic() - killed["at"] < 15, "the other rank was not stopped at once"
    assert_all_stopped(launcher)
    assert_no_process_of(plan)


def test_parameter_server_cluster_trains_and_resumes_after_a_restart(digits_root):
    plan = prepared_plan(digits_root, "ps", training={"strategy": "parameter_server", "num_ps": 1, "epochs": 6,
                                                      "checkpoint_every_steps": 30})

    def stop_after_first_checkpoint(line: str) -> None:
        if "chief-0: saved checkpoint" in line:
            launcher.stop()

    logger, first = collecting_logger("ps_first", stop_after_first_checkpoint)
    launcher = LocalLauncher()
    with pytest.raises(StageStopped):
        launcher.run(plan.stage("train"), logger)
    assert {line.split("]")[0] + "]" for line in first.lines if "serving at" in line} == {"[ps-0]", "[worker-0]", "[worker-1]"}
    assert_no_process_of(plan)
    assert not os.path.exists(plan.layout.result("train"))

    launcher, lines = run(plan, "train")
    assert any(re.match(r"\[chief-0\] chief-0: resuming from .*ckpt-30 at step 30 of", line) for line in lines)
    result = read_json(plan.layout.result("train"))
    steps_per_epoch = read_json(os.path.join(plan.layout.data_dir, "manifest.json"))["train"]["examples"] // 64
    assert result["resumed_from_step"] == 30 and result["final_step"] == 6 * steps_per_epoch
    assert result["metrics"]["accuracy"] > 0.8
    assert_all_stopped(launcher)  # ps and workers never exit by themselves: the launcher stopped them
    assert_no_process_of(plan)


def test_stopping_horovodrun_ends_every_rank(digits_root):
    """on_kill's path for Horovod: horovodrun starts its ranks in sessions of their own, the launcher
    still ends them all."""
    plan = prepared_plan(digits_root, "hvd_stop",
                         training={"backend": "mpi", "epochs": 400, "mpi": {"controller": "gloo"}})

    def stop_once_both_ranks_train(line: str) -> None:
        seen.add(line.split("]")[0])
        if {"[rank-0", "[rank-1"} <= seen:
            launcher.stop()

    seen: set[str] = set()
    logger, _ = collecting_logger("hvd_stop", lambda line: "step" in line and stop_once_both_ranks_train(line))
    launcher = LocalLauncher()
    with pytest.raises(StageStopped):
        launcher.run(plan.stage("train"), logger)
    assert_all_stopped(launcher)
    assert_no_process_of(plan)
