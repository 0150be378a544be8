"""operators/launchers/local.py: what the local launcher reads of a stage's heartbeats and checkpoints (the loss of
an elastic restart, a hang), how it relays its processes' output, and whose elastic restarts it makes. The
launcher runs whole in tests/operators/launchers/local/ (real TF clusters, e2e)."""

from __future__ import annotations

import collections
import os
import queue
import subprocess
import time

import pytest

from tests.operators.plan.test_plan import CTX
from tests.support.logs import collecting_logger
from tests.support.specs import make_spec
from tfdist.contract.progress import CHECKPOINT_STATE, beat, checkpoint_state
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.plan import build_plan
from tfdist.spec import load_spec

ELASTIC = {"num_workers": 4, "min_workers": 2, "max_restarts": 2}


def launcher(tmp_path, **training) -> tuple[LocalLauncher, object]:
    """The local launcher of a real plan, and its train stage."""
    plan = build_plan(load_spec(make_spec(str(tmp_path), training=training)), CTX)
    return LocalLauncher(plan), plan.stage("train")


def test_the_launcher_restarts_an_elastic_tf_cluster_and_leaves_elastic_horovod_to_horovodrun(tmp_path):
    local, cluster = launcher(tmp_path, **ELASTIC)
    assert local.restart_policy(cluster) is cluster.elastic is not None
    local, horovod = launcher(tmp_path, backend="mpi", **ELASTIC)
    assert horovod.elastic is not None and local.restart_policy(horovod) is None


def test_a_loss_is_measured_at_the_furthest_step_beaten_and_resumed_from_the_latest_checkpoint(tmp_path):
    local, stage = launcher(tmp_path, **ELASTIC)
    assert local.heartbeats(stage) == stage.heartbeat_dir  # a local root: no scratch copy
    assert local.measure_loss(stage)["lost_at_step"] == 0 and local.furthest_step(stage) == 0
    os.makedirs(stage.heartbeat_dir)
    beat(stage.heartbeat_dir, "worker-0", 30)
    beat(stage.heartbeat_dir, "worker-1", 42)
    os.makedirs(stage.checkpoint_dir, exist_ok=True)
    with open(os.path.join(stage.checkpoint_dir, CHECKPOINT_STATE), "w") as f:
        f.write(checkpoint_state(["ckpt-20", "ckpt-40"], time.time()))
    before = time.time()
    loss = local.measure_loss(stage)
    assert (loss["lost_at_step"], loss["resumed_at_step"]) == (42, 40) and before <= loss["stopped_at"] <= time.time()


def test_a_stage_is_hung_once_no_process_of_this_attempt_has_beaten_for_the_hang_timeout(tmp_path):
    local, stage = launcher(tmp_path, hang_timeout_seconds=60)
    os.makedirs(stage.heartbeat_dir)
    started = time.time() - 300
    for member, silent in (("worker-0", 100), ("worker-1", 200)):
        beat(stage.heartbeat_dir, member, 10)
        os.utime(os.path.join(stage.heartbeat_dir, member), (time.time() - silent,) * 2)
    who, why = local._hung(stage, started)
    assert who == "worker-1" and why.startswith("the others wait for it: worker-0 last stepped 100 s ago")
    assert local._hung(stage, time.time() - 50) is None  # no beat of this attempt yet
    unbounded, never_hung = launcher(tmp_path, hang_timeout_seconds=None)
    assert unbounded._hung(never_hung, started) is None
    os.utime(os.path.join(stage.heartbeat_dir, "worker-0"))
    assert local._hung(stage, started) is None


def test_relayed_lines_reach_the_log_prefixed_and_each_sources_tail():
    lines: queue.Queue = queue.Queue()
    for item in [("worker-0", "step 1"), ("rank-1", "step 2"), ("worker-0", "step 3")]:
        lines.put(item)
    log, logged = collecting_logger("relay")
    tails: dict = collections.defaultdict(lambda: collections.deque(maxlen=2))
    LocalLauncher._relay(lines, tails, log)
    assert logged.lines == ["[worker-0] step 1", "[rank-1] step 2", "[worker-0] step 3"]
    assert {name: list(tail) for name, tail in tails.items()} == {
        "worker-0": ["step 1", "step 3"],
        "rank-1": ["step 2"],
    }
    LocalLauncher._relay(lines, tails, log, timeout=0.01)  # nothing more: returns
    assert len(logged.lines) == 3


@pytest.mark.e2e  # a real process
def test_a_rank_tagged_processs_output_is_pumped_as_each_ranks_lines():
    printing = "printf '[1,0]<stdout>:step 1\\n[1,1]<stderr>:warning\\nmpirun noticed\\n'"
    proc = subprocess.Popen(["sh", "-c", printing], stdout=subprocess.PIPE)
    lines: queue.Queue = queue.Queue()
    LocalLauncher._pump("mpirun-0", proc, True, lines)
    assert proc.wait() == 0
    assert list(lines.queue) == [("rank-0", "step 1"), ("rank-1", "warning"), ("mpirun-0", "mpirun noticed")]
