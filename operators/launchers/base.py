"""The launcher interface."""

from __future__ import annotations

import abc
import logging
from typing import Any

from operators.plan import Stage


class StageFailed(RuntimeError):
    """A process of the stage failed. ``tails`` holds the last output lines of every source that printed
    (each process, or each rank of an mpirun/horovodrun process), the failed one first; ``how`` replaces
    the account given by the return code, ``detail`` follows it. ``lost`` names the processes that did not fail
    by their own decision (killed by a signal, stopped, hung): an elastic stage may continue without them."""

    def __init__(self, process: str, returncode: int | None, tails: dict[str, list[str]], *, how: str | None = None,
                 detail: str | None = None, lost: tuple[str, ...] = ()):
        self.process, self.returncode, self.tails, self.lost = process, returncode, tails, lost
        if how is None and returncode is None:
            how = "stopped serving before the stage was done"
        elif how is None:
            how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
        blocks = [f"[{name}] last lines:\n" + "\n".join(f"  {line}" for line in lines) for name, lines in tails.items()]
        self.summary = f"{process} {how}" + (f"; {detail}" if detail else "")
        super().__init__(self.summary + "\n" + "\n".join(blocks))


class StageStopped(RuntimeError):
    """The launcher was asked to stop (e.g. the task's on_kill) before the stage was done."""


class Launcher(abc.ABC):
    def start_deferred(self, stage: Stage, log: logging.Logger, store: Any) -> Any | None:
        """Start the stage (or find the one an earlier try of the task started, by the identity kept in the
        task's state ``store``) and return the trigger that follows it to its end; None when the stage's
        processes live and die with the task process (then call ``run``)."""
        return None

    @abc.abstractmethod
    def run(self, stage: Stage, log: logging.Logger) -> dict[str, Any]:
        """Start every process of the stage, relay their output to ``log`` prefixed ``[name]``, return the
        stage's result record when all succeeded (and stop serving processes then). Raise StageFailed as
        soon as one fails, after stopping the others."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every process this launcher started and their descendants (idempotent; any thread)."""
