"""The gradient syncs, one module per mode, behind the one interface the training loop has of them (``Sync``):

- ``mirrored``: ``multi_worker_mirrored`` (backend tf), the optimizer all-reducing across workers;
- ``parameter_server``: ``parameter_server`` (backend tf), the chief scheduling steps onto the workers;
- ``horovod``: backend mpi, a rank per process, gradients summed by Horovod;
- ``elastic``: backend mpi with ``training.min_workers`` below ``num_workers``, one world after another.

A sync of fixed size trains in one world (``one_world``); Horovod elastic in one per world, each entered with the
last committed ``State``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tfdist.trainer.syncs.elastic import ElasticHorovod
from tfdist.trainer.syncs.horovod import Horovod
from tfdist.trainer.syncs.mirrored import Mirrored
from tfdist.trainer.syncs.parameter_server import ParameterServer, serve

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec


class State(Protocol):
    """A world's training progress: the step, the current epoch's sums of the step vectors, steps and examples, the
    finished epochs' metrics (``train.new_progress``), and the world's size."""

    step: int
    epoch_sums: np.ndarray
    epoch_steps: int
    epoch_examples: int
    history: list[dict[str, Any]]
    world_size: int
    reached: int
    """Where this process's last step call ends (not part of what is kept)."""

    def save(self) -> None:
        """Keep this step call's state (host memory, no collective), for a world re-formed after a lost peer."""

    def commit(self) -> None:
        """Keep it, at a checkpoint boundary, and ask whether hosts came back (a collective)."""


class Sync(Protocol):
    """What the training loop needs of a gradient sync: this process in the current world, where the model is
    built, how gradients are synced and steps run, and the worlds the training runs in."""

    @property
    def name(self) -> str:
        """This process in logs and heartbeats ('worker-0', 'chief-0', 'rank-1')."""

    @property
    def workers(self) -> int:
        """The current world's size: its workers or ranks."""

    @property
    def is_chief(self) -> bool:
        """This process writes the checkpoints, summaries and records."""

    @property
    def every_worker_saves(self) -> bool:
        """Every worker takes part in saving (each but the chief into a directory of its own)."""

    @property
    def io_device(self) -> str | None:
        """The device that reads and writes checkpoint files in an object store's scratch (None: each
        variable's own)."""

    @property
    def chunks_per_call(self) -> int:
        """The chunks of ``train.STEPS_PER_CALL`` steps one call of a step runner runs (a parameter server's
        workers each run one)."""

    @property
    def readers_take_turns(self) -> bool:
        """Each step takes a batch of one reader's, the readers sharing the steps (a parameter server's workers);
        else each step takes one of each reader's."""

    @property
    def learning_rate_scale(self) -> float:
        """What the spec's learning rates are multiplied by."""

    def scope(self) -> AbstractContextManager[Any]:
        """Where the model, its optimizers and checkpoint are built."""

    def start(self, variables: list) -> None:
        """Called once the checkpoint, if any, is restored, with every variable of the model and its optimizers."""

    def sync_gradients(self, gradients: list, variables: list) -> list:
        """One replica's gradients of ``variables``, as its optimizers take them."""

    def summed(self, gradients: list) -> list:
        """Synced gradients summed over the replicas, for a sparse optimizer (a Keras optimizer sums them itself)."""

    def step_batch(self, global_batch: int) -> int:
        """The examples of one step in the current world."""

    def step_runner(
        self, replica_step: Callable[[Any], Any], size: int, dataset_fn: Callable[..., Any]
    ) -> Callable[[int], np.ndarray]:
        """``run(steps)`` → the sum of the step vectors (``size`` values) of ``replica_step`` over all replicas and
        ``steps`` steps, each replica's batches from ``dataset_fn(reader, readers, per_replica_batch)``."""

    def state(self, variables: list, **progress: Any) -> State:
        """The training's state from ``progress`` (``train.new_progress`` and the world's size), over
        ``variables`` (every variable of the model and its optimizers)."""

    def run(self, train: Callable[[State], None], state: State) -> None:
        """``train(state)`` in each of the training's worlds."""


def gradient_sync(tf, training: TrainingSpec, elastic: bool) -> Sync | None:
    """This process's gradient sync, by the spec's mode (``elastic``: ``elastic.elastic_run``); None for a
    parameter-server cluster's ps or worker task, which serves instead."""
    if elastic:
        return ElasticHorovod(tf, training)
    if training.backend == "mpi":
        return Horovod(tf, training)
    if training.strategy == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type in ("ps", "worker"):
            serve(tf, resolver)
            return None
        return ParameterServer(tf, training, resolver)
    return Mirrored(tf, training)
