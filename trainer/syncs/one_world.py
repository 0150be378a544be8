"""The worlds of a gradient sync of fixed size: one, the world its processes started in, whose progress each
process holds for itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass
class Progress:
    """A world's training progress (``syncs.State``), held in this process only: nothing to keep or commit."""

    step: int
    epoch_sums: np.ndarray
    epoch_steps: int
    epoch_examples: int
    history: list[dict[str, Any]]
    world_size: int
    reached: int = 0

    def save(self) -> None:
        pass

    def commit(self) -> None:
        pass


class OneWorld:
    """``Sync.state`` and ``Sync.run`` for a sync of fixed size."""

    def state(self, variables: list, **progress: Any) -> Progress:
        return Progress(**progress)

    def run(self, train: Callable[[Any], None], state: Any) -> None:
        """``train(state)``, once."""
        train(state)
