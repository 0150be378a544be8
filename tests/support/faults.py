"""The fault-injection suite's trials and modes, and the random kill of a training process."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

from tfdist.contract.progress import last_beats
from tfdist.operators.launchers.local import LocalLauncher

FAULT_TRIALS = int(os.environ.get("TFDIST_FAULT_TRIALS", "1"))
"""Trials (seeds) of each fault-injection case: 1 in ``make test``, more in ``make faults``."""


def fault_modes(modes, run_once: str) -> list[str]:
    """The modes a fault case runs in: every one under make faults, ``run_once`` alone when the suite runs
    each case once (make test-extended, within CI's time budget)."""
    return list(modes) if FAULT_TRIALS > 1 else [run_once]


class RandomKill(threading.Thread):
    """SIGKILLs one training process at a random point of training: inside the step call after the furthest
    heartbeat passes a step drawn from ``after`` to ``before``. The victim is a Horovod rank or TF cluster
    member by its heartbeat (``rank-1``), else a stage process by name (``worker-1`` of a parameter-server
    cluster, whose workers do not beat)."""

    def __init__(self, plan, launcher: LocalLauncher, victim: str, seed: int, after: int, before: int):
        super().__init__(daemon=True)
        self.plan, self.launcher, self.victim = plan, launcher, victim
        draw = random.Random(seed)
        self.target, self.delay = draw.randint(after + 1, before), draw.uniform(0, 0.05)
        self.at: float | None = None
        self.step = 0
        """The furthest step any training process had reached when the victim was killed (a step call that
        ended as it died included), read 0.5 s later."""
        self.beaten = 0
        """The furthest step beaten as the victim was killed: what survivors that go on within 0.5 s (Horovod's
        elastic ranks) must keep."""

    def furthest(self) -> int:
        return max((b.step for b in last_beats(self.plan.layout.heartbeat_dir).values()), default=0)

    def run(self) -> None:
        while self.furthest() < self.target:
            time.sleep(0.01)
        time.sleep(self.delay)
        beats = last_beats(self.plan.layout.heartbeat_dir)
        pid = beats[self.victim].pid if self.victim in beats else self.launcher.processes[self.victim].pid
        self.beaten = max((b.step for b in beats.values()), default=0)
        os.kill(pid, signal.SIGKILL)
        self.at = time.time()
        # the others' last step call may have ended as the victim died (and its checkpoint been saved): their
        # beats follow within moments, long before a restarted cluster steps again
        time.sleep(0.5)
        self.step = self.furthest()
