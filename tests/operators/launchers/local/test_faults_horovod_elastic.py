"""Horovod elastic training on Gloo through the local launcher (operators/backends/mpi.py, trainer/syncs/elastic.py):
a rank SIGKILLed in the middle of training leaves the other one training from its last step call within the
same run of the stage, and the killed worker's rank rejoins once its host's blacklist cooldown ends. Each
trial records its figures (``make faults`` runs several and tabulates them).

Alone, rank 0 steps ~10 times faster than the pair and could finish before the cooldown ends (2-3 s, then up
to 1 s until Horovod's discovery sees the host again): once it has trained alone, the test stops it
(SIGSTOP) for longer than that, so the rejoin comes before the end on a machine of any speed. Horovod's
driver notifies rank 0 of the returning host over a socket it answers when continued."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from tests.support.faults import FAULT_TRIALS, RandomKill
from tests.support.logs import collecting_logger
from tests.support.plans import prepared_plan, run, steps_of
from tests.support.processes import assert_no_process_of, wait_for
from tfdist.contract.progress import last_beats
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.trainer.train import STEPS_PER_CALL

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.extended]

EVERY = 20  # checkpoint_every_steps: also how often the ranks ask whether a host came back
EPOCHS = 60  # 1,140 steps
COOLDOWN_AND_DISCOVERY = 5.0  # the first blacklisting's cooldown (at most 3 s) and a discovery round (1 s)
TRAINING = {
    "backend": "mpi",
    "mpi": {"controller": "gloo"},
    "num_workers": 2,
    "min_workers": 1,
    "epochs": EPOCHS,
    "checkpoint_every_steps": EVERY,
}
RESIZED = re.compile(r"^\[rank-0\] rank-0: world size (\d+) -> (\d+) at step (\d+) \(restored commit at step (\d+)\)$")
REFORMING = re.compile(r"^\[rank-0\] rank-0: hosts changed at step \d+; re-forming the world$")
STEPPED = re.compile(r"^\[rank-0\] rank-0: step (\d+)/")
DIGEST = re.compile(r"^\[(rank-\d+)\] rank-\d+: done at step \d+; weights sha256 (\w+);")
FIGURES = FAULT_TRIALS > 1 or bool(os.environ.get("TFDIST_FAULT_FIGURES"))
"""Also train the same spec undisturbed, for the figures' accuracy_undisturbed (not in the normal suite)."""
_UNDISTURBED: dict[str, float] = {}


class Timeline:
    """When the lines that matter arrived: rank 0's world size changes, its re-forming, its progress reports."""

    def __init__(self):
        self.resized: list[tuple[float, tuple[int, ...]]] = []
        self.reforming: list[float] = []
        self.stepped: list[float] = []

    def __call__(self, line: str) -> None:
        now = time.time()
        if found := RESIZED.match(line):
            self.resized.append((now, tuple(map(int, found.groups()))))
        elif REFORMING.match(line):
            self.reforming.append(now)
        elif STEPPED.match(line):
            self.stepped.append(now)

    def first_step_after(self, moment: float) -> float:
        return next(t for t in self.stepped if t > moment)

    def alone(self) -> bool:
        """Rank 0 has trained a step call in a world of one."""
        return any(sizes[1] == 1 and self.stepped and self.stepped[-1] > t for t, sizes in self.resized)


def hold_rank_0_through_the_cooldown(plan, timeline: Timeline) -> threading.Thread:
    """Stop rank 0 once it trains alone, until its peer's host is discoverable again."""

    def hold() -> None:
        wait_for(timeline.alone, timeout=120, what="rank 0 training alone")
        pid = last_beats(plan.layout.heartbeat_dir)["rank-0"].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(COOLDOWN_AND_DISCOVERY)
        finally:
            os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def eval_accuracy(plan) -> float:
    run(plan, "evaluate")
    return read_json(os.path.join(plan.layout.eval_dir, "metrics.json"))["metrics"]["accuracy"]


def undisturbed_accuracy(digits_root: str) -> float:
    """The eval accuracy of the same spec trained without a fault (once per test session)."""
    if "accuracy" not in _UNDISTURBED:
        plan = prepared_plan(digits_root, "hvd_elastic_undisturbed", training=TRAINING)
        _, lines = run(plan, "train")
        assert not any(RESIZED.match(line) for line in lines)
        _UNDISTURBED["accuracy"] = eval_accuracy(plan)
    return _UNDISTURBED["accuracy"]


@pytest.mark.parametrize("trial", range(FAULT_TRIALS))
def test_a_killed_rank_leaves_the_other_training_from_its_last_step_call_and_rejoins(digits_root, fault_figures, trial):
    """Rank 1 SIGKILLed mid-training: rank 0 goes back at most one step call, goes on alone with the whole
    global batch, and the stage succeeds with every step trained; rank 1's host comes back after its
    cooldown, its new rank receives rank 0's state, both end with the same weights, and the model is as
    good as the spec's gate asks (and as an undisturbed run's, when figures are recorded)."""
    plan = prepared_plan(digits_root, f"hvd_elastic_{trial}", training=TRAINING)
    timeline = Timeline()
    logger, lines = collecting_logger(f"hvd_elastic_{trial}", timeline)
    launcher = LocalLauncher(plan)
    total = steps_of(plan, EPOCHS)
    killer = RandomKill(plan, launcher, "rank-1", seed=trial, after=EVERY, before=total // 4)
    killer.start()
    holder = hold_rank_0_through_the_cooldown(plan, timeline)
    result = launcher.run(plan.stage("train"), logger)
    holder.join(timeout=1)
    assert_no_process_of(plan)

    assert killer.at and result["final_step"] == total and result["workers"] == 2, result
    assert [sizes[:2] for _, sizes in timeline.resized] == [(2, 1), (1, 2)], lines.lines[-40:]
    (lost_at, (_, _, reached, restored)), (back_at, _) = timeline.resized
    steps_lost = reached - restored  # the step call the rank was lost in, if any (rank 0 may have finished it)
    assert 0 <= steps_lost <= STEPS_PER_CALL, (reached, restored)
    assert restored >= killer.beaten - STEPS_PER_CALL, (killer.beaten, restored)
    assert any(line.startswith("[rank-0] rank-0: lost a peer at step") for line in lines.lines)
    digests = dict(m.groups() for m in map(DIGEST.match, lines.lines) if m)
    assert sorted(digests) == ["rank-0", "rank-1"] and len(set(digests.values())) == 1, digests
    accuracy = eval_accuracy(plan)
    assert accuracy >= 0.9, accuracy  # the spec's gate
    undisturbed = undisturbed_accuracy(digits_root) if FIGURES else None
    if undisturbed is not None:
        assert accuracy >= undisturbed - 0.03, (accuracy, undisturbed)
    rejoin_started = max(t for t in timeline.reforming if t < back_at)
    fault_figures(
        "elastic: a rank killed",
        "horovod",
        killed_at_step=killer.beaten,
        seconds_to_recover=round(timeline.first_step_after(lost_at) - killer.at, 2),
        steps_lost=steps_lost,
        seconds_stalled_by_rejoin=round(timeline.first_step_after(back_at) - rejoin_started, 2),
        accuracy=round(accuracy, 4),
        accuracy_undisturbed=None if undisturbed is None else round(undisturbed, 4),
    )
