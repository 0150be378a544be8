"""trainer/scratch.py: a host's local copies. Files in a bucket fetched at once by the processes of one host, which
share its scratch directory (the training processes of a local stage all stage their data and restore before their
first step): checkpoints, and data each downloaded once; and checkpoints fetched while the chief's uploads delete
those their newer state no longer keeps (an elastic rank that rejoins late). A local path is its own copy, a
checkpoint's files are found by its name, and the host lock is held by one at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tfdist.contract.launch import SCRATCH_ENV
from tfdist.contract.progress import checkpoint_state, kept_checkpoints
from tfdist.infra import storage
from tfdist.trainer import scratch

E2E = pytest.mark.e2e  # 20 s: six processes; uploads racing fetches
FETCHES = """
import json, os, sys, time
from tfdist.trainer import scratch
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all at once
local = scratch.fetch_checkpoints(sys.argv[1])
print(json.dumps(sorted(os.listdir(local))))
"""
STAGING = """
import sys, time
from tfdist.trainer import scratch
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all at once
scratch.fetch(sys.argv[1], sys.argv[3:])
"""
STATE = checkpoint_state(["ckpt-1", "ckpt-2"], time.time())


@E2E
def test_processes_sharing_a_scratch_fetch_the_same_checkpoints_at_once(s3, tmp_path):
    url = f"s3://{s3.new_bucket()}/run/checkpoints"
    for step in (1, 2):
        storage.write_bytes(storage.join(url, f"ckpt-{step}.index"), b"index")
        storage.write_bytes(storage.join(url, f"ckpt-{step}.data-00000-of-00001"), os.urandom(1 << 20))
    storage.write_bytes(storage.join(url, "checkpoint"), STATE.encode())
    env = {**os.environ, **s3.env, "TFDIST_SCRATCH": str(tmp_path / "scratch")}
    start = str(time.time() + 8)
    fetching = [
        subprocess.Popen(
            [sys.executable, "-c", FETCHES, url, start],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    done = [(p.wait(120), *p.communicate()) for p in fetching]
    assert all(code == 0 for code, _, _ in done), [err[-1500:] for code, _, err in done if code]
    every_file = ["checkpoint", *(f"ckpt-{s}.{part}" for s in (1, 2) for part in ("data-00000-of-00001", "index"))]
    assert [json.loads(out.splitlines()[-1]) for _, out, _ in done] == [every_file] * 6


@E2E
def test_processes_sharing_a_scratch_download_each_file_once(s3, tmp_path, monkeypatch):
    """The training processes of a host all stage their shards as they start: the first downloads them, the
    others find them there."""
    bucket = s3.new_bucket()
    url = f"s3://{bucket}/run/data"
    names = [f"train-{k:05d}.tfrecord" for k in range(4)]
    for name in names:
        storage.write_bytes(storage.join(url, name), os.urandom(1 << 20))
    monkeypatch.setenv("TFDIST_SCRATCH", str(tmp_path / "scratch"))
    env, start = {**os.environ, **s3.env}, str(time.time() + 8)
    fetching = [subprocess.Popen([sys.executable, "-c", STAGING, url, start, *names], env=env) for _ in range(3)]
    assert [p.wait(120) for p in fetching] == [0, 0, 0]
    assert sorted(r for r in s3.requests(bucket) if r.startswith("GET ")) == [f"GET run/data/{n}" for n in names]
    assert sorted(os.listdir(scratch.local_path(url))) == names


def save(directory, step: int) -> str:
    """A checkpoint's files and the state keeping it and the one before, as a CheckpointManager (max_to_keep 2)
    leaves them in ``directory``: its prefix."""
    for name in os.listdir(directory):
        if name.startswith(f"ckpt-{step - 2}."):
            os.remove(directory / name)
    (directory / f"ckpt-{step}.index").write_bytes(b"index")
    (directory / f"ckpt-{step}.data-00000-of-00001").write_bytes(os.urandom(256 << 10))
    kept = [f"ckpt-{s}" for s in (step - 1, step) if s > 0]
    (directory / "checkpoint").write_text(checkpoint_state(kept, time.time()))
    return str(directory / f"ckpt-{step}")


@E2E
def test_a_fetch_while_the_chief_uploads_newer_checkpoints_gets_a_whole_state(s3, tmp_path, monkeypatch):
    """A rank that (re)starts late restores while the chief's uploads delete the checkpoints their newer state no
    longer keeps: each fetch ends with every checkpoint its state keeps."""
    url = f"s3://{s3.new_bucket()}/run/checkpoints"
    saved = tmp_path / "chief"
    saved.mkdir()
    save(saved, 1)
    scratch.checkpoint_upload(str(saved), url, 2)()
    uploading = threading.Event()
    uploading.set()

    def chief() -> None:
        step = 2
        while uploading.is_set():
            save(saved, step)
            scratch.checkpoint_upload(str(saved), url, 2)()
            step += 1

    uploads = threading.Thread(target=chief)
    uploads.start()
    try:
        for k in range(20):
            monkeypatch.setenv("TFDIST_SCRATCH", str(tmp_path / f"scratch-{k}"))
            local = scratch.fetch_checkpoints(url)
            kept = kept_checkpoints(storage.read_bytes(os.path.join(local, "checkpoint")).decode())
            assert {f"{name}.{part}" for name in kept for part in ("index", "data-00000-of-00001")} <= set(
                os.listdir(local)
            ), k
    finally:
        uploading.clear()
        uploads.join()


def test_a_kept_checkpoint_already_deleted_is_missing_not_skipped(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    state = (tmp_path / "checkpoint").read_text()
    assert scratch.kept_files(str(tmp_path), state) == [
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
    ]
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001"):
        os.remove(tmp_path / name)
    with pytest.raises(FileNotFoundError, match=r"ckpt-1\.index"):
        scratch.kept_files(str(tmp_path), state)


def test_a_local_path_is_its_own_copy_and_a_url_has_one_under_the_scratch(tmp_path, monkeypatch):
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))
    assert scratch.scratch_dir() == str(tmp_path / "scratch")
    assert scratch.local_path(str(tmp_path / "data")) == str(tmp_path / "data")
    assert scratch.local_path("s3://bucket/run/data/") == str(tmp_path / "scratch" / "s3" / "bucket" / "run" / "data")
    save(tmp_path, 1)
    assert scratch.fetch(str(tmp_path), ["ckpt-1.index"]) == str(tmp_path)  # local: nothing copied
    assert scratch.fetch_checkpoints(str(tmp_path)) == str(tmp_path)
    assert scratch.local_checkpoint(str(tmp_path / "ckpt-1")) == str(tmp_path / "ckpt-1")
    assert not (tmp_path / "scratch").exists()


def test_a_checkpoints_files_are_found_by_its_name(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 12)
    assert sorted(scratch.checkpoint_files(str(tmp_path), "ckpt-1")) == ["ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    assert scratch.checkpoint_of("ckpt-12.data-00000-of-00001") == "ckpt-12"
    assert scratch.checkpoint_of("ckpt-12.index") == "ckpt-12"


def test_the_host_lock_is_held_by_one_holder_at_a_time(tmp_path):
    path = str(tmp_path / "locks" / "fetching")
    order: list[str] = []
    with scratch.host_lock(path):
        waiter = threading.Thread(target=lambda: _locked(path, order))
        waiter.start()
        time.sleep(0.2)
        order.append("first done")
    waiter.join()
    assert order == ["first done", "second"] and os.path.exists(path)


def _locked(path: str, order: list[str]) -> None:
    with scratch.host_lock(path):
        order.append("second")
