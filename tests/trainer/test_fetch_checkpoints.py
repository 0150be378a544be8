"""Checkpoints in a bucket fetched at once by the processes of one host, which share its scratch directory (the
training processes of a local stage all restore before their first step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tfdist.contract import storage

pytestmark = pytest.mark.e2e  # 10 s: six processes
FETCHES = """
import json, os, sys, time
from tfdist.trainer import scratch
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all at once
local = scratch.fetch_checkpoints(sys.argv[1])
print(json.dumps(sorted(os.listdir(local))))
"""
STATE = 'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n'


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
