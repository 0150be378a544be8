"""The trainer's uploads (trainer/uploads.py ``Uploader``): run in order in a process of their own, on idle cores
only, that never imports the training's main module and ends with the training; a job the same job (or a later one
of its key) follows in the queue is skipped; a failure stops the rest and is raised, as is the upload process's
death."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.processes import ended
from tfdist.contract.progress import checkpoint_state, kept_checkpoints
from tfdist.infra import storage
from tfdist.infra.stopping import STOP_GRACE_SECONDS
from tfdist.trainer import scratch
from tfdist.trainer.uploads import Pace, Uploader

pytestmark = pytest.mark.e2e  # starts upload processes


def record(path: str, name: str) -> None:
    """A job: append which process ran ``name``, and the scheduling policy of each of its threads."""
    threads = [int(t) for t in os.listdir("/proc/self/task")]
    policies = sorted({os.sched_getscheduler(t) for t in threads})
    with open(path, "a") as f:
        f.write(json.dumps({"name": name, "pid": os.getpid(), "threads": len(threads), "policies": policies}) + "\n")


def refuse(path: str) -> None:
    """A job failing for good at once (a missing local file is not retried)."""
    raise FileNotFoundError(path)


DATA_AND_INDEX = ("data-00000-of-00001", "index")


def ran(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_jobs_run_in_order_in_a_process_of_their_own_on_idle_cores_only(tmp_path):
    log = str(tmp_path / "log")
    uploads = Uploader(str(tmp_path))
    for name in ("a", "b", "c"):
        uploads.submit(functools.partial(record, log, name), f"job {name}")
    uploads.close()
    jobs = ran(log)
    assert [job["name"] for job in jobs] == ["a", "b", "c"]
    assert {job["pid"] for job in jobs} == {uploads.process.pid} != {os.getpid()}
    assert all(job["threads"] > 1 for job in jobs)  # the upload process's: started before it lowered its priority
    assert [job["policies"] for job in jobs] == [[os.SCHED_IDLE]] * 3


def wait(path: str, seconds: float) -> None:
    """A job that keeps the upload process busy, and says when it started."""
    record(path, "busy")
    time.sleep(seconds)


def test_a_job_the_same_job_follows_in_the_queue_is_skipped(tmp_path):
    log = str(tmp_path / "log")
    uploads = Uploader(str(tmp_path))
    uploads.submit(functools.partial(wait, log, 2.0), "a slow upload")
    while not os.path.exists(log):  # the rest queue up behind it
        time.sleep(0.05)
    for k in range(5):
        uploads.submit(functools.partial(record, log, f"summaries {k}"), "the upload of the summaries")
        uploads.submit(functools.partial(record, log, f"ckpt-{k}"), f"the upload of ckpt-{k}")
    uploads.close()
    assert [job["name"] for job in ran(log)] == ["busy", *(f"ckpt-{k}" for k in range(4)), "summaries 4", "ckpt-4"]


def save_checkpoint(directory: str, step: int) -> None:
    """Leave the files a checkpoint manager keeping two checkpoints leaves once it saved ``ckpt-<step>``."""
    for name in os.listdir(directory):
        if name.startswith(f"ckpt-{step - 2}."):
            os.remove(os.path.join(directory, name))
    for suffix in DATA_AND_INDEX:
        with open(os.path.join(directory, f"ckpt-{step}.{suffix}"), "w") as f:
            f.write(f"step {step}")
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(checkpoint_state([f"ckpt-{s}" for s in (step - 1, step) if s > 0], time.time()))


def test_a_checkpoint_upload_is_discarded_only_behind_keep_checkpoints_later_ones(tmp_path):
    """Of the uploads queued, those the last ``keep`` follow are discarded (their state would not keep them): the
    store ends with the last ``keep`` queued, as if every one had run."""
    log, saved, store = str(tmp_path / "log"), tmp_path / "saved", str(tmp_path / "store")
    saved.mkdir()
    uploads = Uploader(str(tmp_path))
    uploads.submit(functools.partial(wait, log, 2.0), "a slow upload")
    while not os.path.exists(log):  # the checkpoints queue up behind it
        time.sleep(0.05)
    jobs = []
    for step in (1, 2, 3, 4):
        save_checkpoint(str(saved), step)
        jobs.append(scratch.checkpoint_upload(str(saved), store, 2))
    for job in jobs[:2]:
        shutil.rmtree(job.snapshot)  # were they run, the first two uploads would fail: their files are gone
    for step, job in enumerate(jobs, 1):
        uploads.submit(job, f"the upload of ckpt-{step}", key="the checkpoints' upload")
    uploads.close()
    assert sorted(os.listdir(store)) == ["checkpoint", *(f"ckpt-{s}.{x}" for s in (3, 4) for x in DATA_AND_INDEX)]
    assert kept_checkpoints((Path(store) / "checkpoint").read_text()) == ["ckpt-3", "ckpt-4"]
    assert not [name for name in os.listdir(saved) if name.startswith(".uploading-")]  # the others': discarded


def test_a_checkpoint_upload_sends_its_checkpoint_alone_and_the_store_keeps_the_last_ones_uploaded(tmp_path):
    saved, store = tmp_path / "saved", tmp_path / "store"
    saved.mkdir()
    save_checkpoint(str(saved), 1)
    scratch.checkpoint_upload(str(saved), str(store), 2)()
    os.utime(store / "ckpt-1.index", (0, 0))
    (store / "ckpt-2.index").write_text("left by a crashed upload")  # no state names it: not whole
    save_checkpoint(str(saved), 2)
    scratch.checkpoint_upload(str(saved), str(store), 2)()
    assert os.stat(store / "ckpt-1.index").st_mtime == 0  # not written again
    assert (store / "ckpt-2.index").read_text() == "step 2"
    assert sorted(os.listdir(store)) == ["checkpoint", *(f"ckpt-{s}.{x}" for s in (1, 2) for x in DATA_AND_INDEX)]
    for step in (3, 4):
        save_checkpoint(str(saved), step)
    scratch.checkpoint_upload(str(saved), str(store), 2)()  # ckpt-3's was not queued (paced)
    assert kept_checkpoints((store / "checkpoint").read_text()) == ["ckpt-2", "ckpt-4"]
    assert sorted(os.listdir(store)) == ["checkpoint", *(f"ckpt-{s}.{x}" for s in (2, 4) for x in DATA_AND_INDEX)]


def test_after_a_failed_job_the_rest_are_skipped_and_close_names_it(tmp_path):
    log = str(tmp_path / "log")
    uploads = Uploader(str(tmp_path))
    uploads.submit(functools.partial(record, log, "before"), "job before")
    uploads.submit(functools.partial(refuse, "/nowhere/ckpt-7.index"), "the upload of ckpt-7")
    uploads.submit(functools.partial(record, log, "after"), "job after")
    with pytest.raises(OSError, match=r"the upload of ckpt-7 failed: FileNotFoundError: /nowhere/ckpt-7\.index"):
        uploads.close()
    assert [job["name"] for job in ran(log)] == ["before"]


def test_a_killed_upload_process_is_raised_by_the_next_check(tmp_path):
    uploads = Uploader(str(tmp_path))
    uploads.check()
    os.kill(uploads.process.pid, signal.SIGKILL)
    uploads.process.wait()
    with pytest.raises(OSError, match=r"the upload process ended \(exit code -9\)"):
        uploads.check()


TRAINING = """
import functools, os, sys, time
from tfdist.infra import storage
from tfdist.trainer.uploads import Pace, Uploader

ran, how = sys.argv[1], sys.argv[2]
with open(ran + ".imports", "a") as f:  # each import of this main module
    f.write("imported\\n")
if __name__ == "__main__":
    uploads = Uploader(ran)
    uploads.submit(functools.partial(storage.write_bytes, ran, b"ran"), "a job")
    if how == "closes":
        uploads.close()
        sys.exit()
    uploads.submit(functools.partial(time.sleep, 60), "a slow job")
    while not os.path.exists(ran):  # the slow job is next
        time.sleep(0.05)
    print(uploads.process.pid, flush=True)
    if how == "fails":
        raise RuntimeError("the training failed")
    time.sleep(60)  # killed
"""


def start_training(tmp_path, how: str) -> tuple[subprocess.Popen, str]:
    """A training's stand-in run as a main module: it uploads a job, then closes, fails or is killed."""
    (tmp_path / "training.py").write_text(TRAINING)
    ran = str(tmp_path / "ran")
    argv = [sys.executable, str(tmp_path / "training.py"), ran, how]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), ran


def test_the_upload_process_never_imports_the_trainings_main_module(tmp_path):
    """A stage's main module imports TensorFlow: seconds of CPU before the first upload could run."""
    training, ran = start_training(tmp_path, "closes")
    assert training.wait(timeout=60) == 0
    assert open(ran).read() == "ran"
    assert open(f"{ran}.imports").read() == "imported\n"


@pytest.mark.parametrize("how", ["fails", "is killed"])
def test_the_upload_process_ends_with_the_training(tmp_path, how):
    """A failing training's exit ends it at once; a killed one's within STOP_GRACE_SECONDS."""
    training, _ = start_training(tmp_path, how)
    assert training.stdout
    uploads = psutil.Process(int(training.stdout.readline()))  # its slow job runs
    if how == "is killed":
        training.kill()
    training.wait(timeout=60)
    deadline = time.monotonic() + (STOP_GRACE_SECONDS + 2 if how == "is killed" else 0.5)
    while not ended(uploads) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended(uploads)


def test_after_its_first_a_processs_checkpoint_uploads_read_nothing_until_one_fails(s3, tmp_path):
    """The store's checkpoint state is read by the first upload of a process and after a failed one only; each
    upload sends its checkpoint and the state."""
    bucket, saved = s3.new_bucket(), tmp_path / "saved"
    url = f"s3://{bucket}/run/checkpoints"
    saved.mkdir()
    reads = []
    for step in (1, 2, 3, 4):
        save_checkpoint(str(saved), step)
        upload = scratch.checkpoint_upload(str(saved), url, 2)
        before = len(s3.requests(bucket))
        if step == 3:
            shutil.rmtree(upload.snapshot)  # its upload fails
            with pytest.raises(FileNotFoundError):
                upload()
        else:
            upload()
        reads.append([r for r in s3.requests(bucket)[before:] if not r.startswith("PUT ")])
    assert [bool(r) for r in reads] == [True, False, False, True]
    puts = [r.removeprefix("PUT run/checkpoints/") for r in s3.requests(bucket) if r.startswith("PUT ")]
    assert sorted(puts) == sorted(["checkpoint"] * 3 + [f"ckpt-{s}.{x}" for s in (1, 2, 4) for x in DATA_AND_INDEX])
    assert storage.names(url) == ["checkpoint", *(f"ckpt-{s}.{x}" for s in (2, 4) for x in DATA_AND_INDEX)]
    assert kept_checkpoints(storage.read_bytes(f"{url}/checkpoint").decode()) == ["ckpt-2", "ckpt-4"]


def test_of_each_kind_the_first_and_the_last_upload_are_due_and_between_them_one_per_pace():
    pace = Pace(0.5)
    due = [pace.due(kind, last) for kind, last in (("ckpt", False), ("ckpt", False), ("curve", False), ("ckpt", True))]
    assert due == [True, False, True, True]
    assert not pace.due("ckpt", False)  # counted from the last one queued
    time.sleep(0.5)
    assert pace.due("ckpt", False) and pace.due("curve", False)
    assert all(Pace(0).due("ckpt", False) for _ in range(3))
