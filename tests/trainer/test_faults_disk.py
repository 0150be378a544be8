"""A full disk (fault case 6): the artifact root on a small tmpfs, filled while prepare_data, train and export
write. Each stage fails with one line naming the path and the fix; nothing partial is published, and the
checkpoints and versions written before stay intact (the next try of train, with space again, resumes).
Needs root (mount)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading

import pytest

from tests.publishing.versions import published_metadata
from tests.support.plans import plan_for, run
from tests.support.processes import wait_for
from tests.support.roots import needs_root
from tests.support.specs import DAY
from tfdist.contract.progress import checkpoint_step
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.operators.demo import write_digits_partitions
from tfdist.operators.launchers import StageFailed

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.extended, needs_root("mounting a tmpfs needs root")]
SECTIONS = {
    "training": {"num_workers": 1, "epochs": 12, "checkpoint_every_steps": 20},
    "validation": {"thresholds": {"accuracy": {"lower": 0.5}}},
}


@pytest.fixture
def small_disk(tmp_path):
    """An artifact root on a 24 MB tmpfs holding the digits input."""
    root = str(tmp_path / "disk")
    os.makedirs(root)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", root], check=True)
    try:
        write_digits_partitions(os.path.join(root, "raw", "digits"), DAY, 1)
        yield root
    finally:
        subprocess.run(["umount", "--lazy", root], check=True)


def fill(root: str, leave: int = 0) -> str:
    """Take all the disk's free space but ``leave`` bytes; the filler's path (remove it to free the space).
    A stage writing meanwhile can take some of the space measured: then measure again."""
    path = os.path.join(root, "filler")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        for attempt in range(10):
            free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
            try:
                if free > leave:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, free - leave)
                break
            except OSError as exc:
                if exc.errno != errno.ENOSPC or attempt == 9:
                    raise
    finally:
        os.close(fd)
    return path


def refused_for_space(plan, task_id: str, root: str) -> str:
    with pytest.raises(StageFailed) as failure:
        run(plan, task_id)
    message = str(failure.value)
    assert f"ERROR: no space left on the device holding {root}/" in message, message
    assert "free space under the artifact root" in message and "Traceback" not in message
    return message


def test_a_full_disk_fails_each_stage_naming_the_path_and_keeps_what_was_published(small_disk, fault_figures):
    plan = plan_for(small_disk, "full_disk", **SECTIONS)

    filler = fill(small_disk, leave=64 * 1024)  # prepare_data: its shards do not fit
    refused_for_space(plan, "prepare_data", small_disk)
    assert not os.path.exists(plan.layout.data_dir)  # no manifest, no temp directory left
    assert [d for d in os.listdir(os.path.dirname(plan.layout.data_dir)) if d.startswith(".tmp-")] == []
    os.remove(filler)
    run(plan, "prepare_data")

    def fill_after_two_checkpoints():  # train: the disk fills up between two checkpoints
        wait_for(lambda: checkpoint_step(plan.layout.checkpoint_dir) >= 40, 120, "two checkpoints")
        fill(small_disk)

    filling = threading.Thread(target=fill_after_two_checkpoints)
    filling.start()
    refused_for_space(plan, "train", small_disk)
    filling.join()
    kept = checkpoint_step(plan.layout.checkpoint_dir)
    assert kept >= 40 and not os.path.exists(plan.layout.result("train"))
    os.remove(filler)
    _, lines = run(plan, "train")  # the latest checkpoint restores: training goes on from it
    assert any(f"resuming from {plan.layout.checkpoint_dir}/ckpt-{kept} at step {kept}" in line for line in lines)
    run(plan, "evaluate")

    earlier = os.path.join(plan.model_dir, "20261119000000")  # a version published before, by another run
    write_json_atomic(
        os.path.join(earlier, "metadata.json"),
        {
            "version": 20261119000000,
            "run_id": "earlier",
            "data_interval_end": "2026-11-20T00:00:00+00:00",
            "metrics": {"accuracy": 0.9},
        },
    )
    shutil.copy(plan.layout.spec_file, os.path.join(earlier, "saved_model.pb"))  # stands for its SavedModel
    before = {name: open(os.path.join(earlier, name), "rb").read() for name in os.listdir(earlier)}
    filler = fill(small_disk, leave=64 * 1024)  # export: the SavedModel does not fit
    refused_for_space(plan, "export", small_disk)
    assert [m["run_id"] for m in published_metadata(plan.model_dir)] == ["earlier"]
    assert {name: open(os.path.join(earlier, name), "rb").read() for name in os.listdir(earlier)} == before
    assert [d for d in os.listdir(plan.model_dir) if d.startswith(".tmp-")] == []
    fault_figures(
        "6 full disk",
        "local",
        prepare_refused=True,
        train_refused=True,
        export_refused=True,
        checkpoint_kept_at_step=kept,
        earlier_version_intact=True,
    )
