"""``multi_worker_mirrored`` (backend tf): one process per worker, cluster from TF_CONFIG; the optimizer
all-reduces gradients across workers. Keras 3 ``model.fit`` fails across workers here, the training loop does not."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.trainer.syncs.one_world import OneWorld
from tfdist.trainer.syncs.sparse_gradients import dense_rows, densified

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec


class Mirrored(OneWorld):
    """MultiWorkerMirroredStrategy over the TF_CONFIG cluster; every worker takes part in saving. The optimizer
    all-reduces the gradients; a sparse one (IndexedSlices) is all-gathered, unless its table is small or its
    number of rows varies (a list's, a cross's): TensorFlow 2.21 pads those to the longest inside a ``tf.cond``,
    and with a few of them in one step the workers' collectives failed ("Shape mismatch in the collective
    instance"), so they are made dense (``densified``)."""

    every_worker_saves = True
    io_device: str | None = None
    """The device that reads and writes checkpoint files in an object store's scratch (None: each variable's own)."""
    chunks_per_call = 1
    readers_take_turns = False
    learning_rate_scale = 1

    def __init__(self, tf, training: TrainingSpec):
        self.tf = tf
        self.dense_rows = dense_rows(training)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = self.strategy.cluster_resolver
        self.name = f"{resolver.task_type or 'worker'}-{resolver.task_id or 0}"
        self.workers = max(1, len(resolver.cluster_spec().as_dict().get("worker", [])))
        self.is_chief = not resolver.task_id

    def scope(self) -> AbstractContextManager[Any]:
        return self.strategy.scope()

    def start(self, variables: list) -> None:
        """Called once the checkpoint, if any, is restored, with every variable of the model and its optimizers."""

    def sync_gradients(self, gradients: list, variables: list) -> list:
        return densified(self.tf, gradients, variables, self.dense_rows, static_only=True)  # the optimizer reduces

    def summed(self, gradients: list) -> list:
        """Synced gradients summed over the replicas, for a sparse optimizer (a Keras optimizer sums them itself)."""
        return self.tf.distribute.get_replica_context().all_reduce("sum", gradients) if gradients else gradients

    def step_batch(self, global_batch: int) -> int:
        """The examples of one step: the global batch, split over the replicas."""
        return global_batch

    def _chunk(self, replica_step, size: int):
        """tf.function running ``steps`` steps from ``iterator``: the sum of their step vectors (``size`` values)
        over replicas. Each replica keeps its own sums; they are reduced across workers once per call, not per
        step."""
        strategy, tf = self.strategy, self.tf

        @tf.function
        def chunk(iterator, steps):
            sums = strategy.run(lambda: tf.zeros([size]))
            for _ in tf.range(steps):
                sums = strategy.run(lambda batch, total: total + replica_step(batch), args=(next(iterator), sums))
            return strategy.reduce("SUM", sums, axis=None)

        return chunk

    def _from_context(self, dataset_fn):
        return lambda ctx: dataset_fn(ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.get_per_replica_batch_size)

    def step_runner(
        self, replica_step: Callable[[Any], Any], size: int, dataset_fn: Callable[..., Any]
    ) -> Callable[[int], np.ndarray]:
        """``run(steps)`` → the sum of the step vectors (``size`` values) over all replicas and ``steps`` steps."""
        iterator = iter(self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn)))
        chunk = self._chunk(replica_step, size)
        return lambda steps: chunk(iterator, self.tf.constant(steps)).numpy().astype(float)
