"""trainer/syncs/one_world.py: a fixed world's progress, held in this process, and its one run."""

from __future__ import annotations

import numpy as np

from tfdist.trainer.syncs.one_world import OneWorld, Progress


def test_the_state_is_the_progress_given_and_the_world_trains_once_on_it():
    world = OneWorld()
    state = world.state([], step=3, epoch_sums=np.zeros(2), epoch_steps=1, epoch_examples=8, history=[], world_size=2)
    assert isinstance(state, Progress) and (state.step, state.world_size, state.reached) == (3, 2, 0)
    state.save()
    state.commit()  # nothing kept elsewhere: the progress stays as it is
    assert state.step == 3 and state.epoch_examples == 8
    trained: list[Progress] = []
    world.run(trained.append, state)
    assert trained == [state]
