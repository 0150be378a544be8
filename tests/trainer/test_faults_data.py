"""Data and checkpoints changed under a run (fault case 5): a byte flipped in a shard, a shard deleted, a shard
cut short, a cut checkpoint. Each is refused (EXIT_REFUSED: no retry) before anything reads it, naming the file
and the check that failed, and nothing the run produced is lost."""

from __future__ import annotations

import glob
import os
import time

import pytest

from tests.support.plans import plan_for, run
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.extended]


def flip_a_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def cut_in_half(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def files_of(run_dir: str) -> dict[str, bytes]:
    return {
        path: open(path, "rb").read()
        for path in glob.glob(os.path.join(run_dir, "**"), recursive=True)
        if os.path.isfile(path) and "/train/heartbeats/" not in path
    }


def test_changed_shards_and_a_cut_checkpoint_are_refused_before_use_naming_the_file_and_the_check(
    digits_root, fault_figures
):
    plan = plan_for(digits_root, "data_changed", training={"epochs": 2})  # its own data: it is damaged below
    run(plan, "prepare_data")
    run(plan, "train")
    shards = read_json(plan.layout.manifest_file)
    shard = {
        split: [os.path.join(plan.layout.data_dir, s["file"]) for s in shards[split]["shards"]]
        for split in ("train", "eval")
    }
    cases = [
        ("train", shard["train"][1], "sha256", flip_a_byte),
        ("train", shard["train"][0], "missing", os.remove),
        ("evaluate", shard["eval"][0], "size", cut_in_half),
    ]
    for task_id, path, check, damage in cases:
        before = files_of(plan.layout.run_dir)
        damage(path)
        started = time.monotonic()
        with pytest.raises(StageFailed) as failure:
            run(plan, task_id)
        refused_after = time.monotonic() - started
        message = str(failure.value)
        assert failure.value.returncode == EXIT_REFUSED, message
        assert f"data check '{check}' failed for {path}" in message and "clear this run's prepare_data" in message
        assert not any("starting fresh" in line or "resuming" in line for line in message.splitlines())
        after = files_of(plan.layout.run_dir)
        assert {p: c for p, c in after.items() if p != path} == {p: c for p, c in before.items() if p != path}
        with open(path, "wb") as f:  # as prepare_data wrote it, for the next case
            f.write(before[path])
        fault_figures(
            "5 data or checkpoint changed",
            f"{task_id}: shard {check}",
            refused=True,
            seconds_to_refuse=round(refused_after, 2),
        )

    checkpoint = read_json(plan.layout.result("train"))["checkpoint"]
    (data_file,) = glob.glob(checkpoint + ".data-*")
    cut_in_half(data_file)
    for task_id in ("train", "evaluate"):  # train resumes from it; evaluate validates it
        started = time.monotonic()
        with pytest.raises(StageFailed) as failure:
            run(plan, task_id)
        assert failure.value.returncode == EXIT_REFUSED
        assert f"integrity check 'restores' failed for {checkpoint}" in str(failure.value), str(failure.value)
        fault_figures(
            "5 data or checkpoint changed",
            f"{task_id}: checkpoint cut",
            refused=True,
            seconds_to_refuse=round(time.monotonic() - started, 2),
        )
    assert not os.path.exists(os.path.join(plan.layout.eval_dir, "metrics.json"))
