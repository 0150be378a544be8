"""The launcher interface."""

from __future__ import annotations

import abc
import logging

from operators.plan import Stage


class StageFailed(RuntimeError):
    """A process of the stage failed; carries its name, exit code and last output lines."""

    def __init__(self, process: str, returncode: int, tail: list[str]):
        self.process, self.returncode, self.tail = process, returncode, tail
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
        super().__init__(f"{process} {how}; its last lines:\n" + "\n".join(f"  {line}" for line in tail))


class Launcher(abc.ABC):
    @abc.abstractmethod
    def run(self, stage: Stage, log: logging.Logger) -> None:
        """Start every process of the stage, relay their output to ``log``, return when all succeeded.

        Raise StageFailed as soon as one fails, after stopping the others."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every process this launcher started (idempotent; safe from another thread)."""
