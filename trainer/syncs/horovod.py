"""Horovod (backend mpi): one rank per process; initial weights broadcast from rank 0, gradients summed with
``hvd.grouped_allreduce`` (``DistributedGradientTape`` breaks on Keras 3 variables)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.trainer.syncs.one_world import OneWorld
from tfdist.trainer.syncs.sparse_gradients import dense_rows, densified

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec


class Horovod(OneWorld):
    """Horovod ranks (mpirun or horovodrun); rank 0 alone writes checkpoints. ``grouped_allreduce`` all-gathers a
    sparse gradient (IndexedSlices: Horovod 0.28.1 does two grouped all-gathers), unless its table is small
    (``densified``)."""

    every_worker_saves = False
    io_device = None
    chunks_per_call = 1
    readers_take_turns = False

    def __init__(self, tf, training: TrainingSpec):
        import horovod.tensorflow as hvd

        hvd.init()
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            tf.config.set_visible_devices(gpus[self.local_index(hvd) % len(gpus)], "GPU")
        self.tf, self.hvd = tf, hvd
        self.dense_rows = dense_rows(training)
        # autograph would convert Horovod's Python wrappers at every trace: 1.2 s instead of 0.2 s
        self.grouped_allreduce = tf.autograph.experimental.do_not_convert(hvd.grouped_allreduce)
        mpi = training.mpi_settings
        # by the planned ranks: a world restarted (or continuing) with fewer keeps the global batch, and so the rate
        self.learning_rate_scale = training.num_workers * mpi.slots_per_worker if mpi.scale_learning_rate else 1

    # the current world: an elastic world changes while the process runs
    @property
    def name(self) -> str:
        return f"rank-{self.hvd.rank()}"

    @property
    def workers(self) -> int:
        return self.hvd.size()

    @property
    def is_chief(self) -> bool:
        return self.hvd.rank() == 0

    @staticmethod
    def local_index(hvd) -> int:
        """This rank's place among the ranks on its machine (its GPU)."""
        return hvd.local_rank()

    def scope(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def start(self, variables: list) -> None:
        for i, variable in enumerate(variables):
            variable.assign(self.hvd.broadcast(self.tf.convert_to_tensor(variable), root_rank=0, name=f"init_{i}"))

    def sync_gradients(self, gradients: list, variables: list) -> list:
        """The gradients summed over the ranks: the dense ones in one grouped all-reduce, the sparse ones in another
        (Horovod 0.28.1 pairs the gathered slices with the wrong tensors when both kinds are in one call), their
        indices as int64 (one all-gather takes one dtype; a cross's ids are int64, a lookup's int32)."""
        tf, hvd = self.tf, self.hvd
        gradients = densified(tf, gradients, variables, self.dense_rows)
        sparse = [i for i, g in enumerate(gradients) if isinstance(g, tf.IndexedSlices)]
        dense = [i for i, g in enumerate(gradients) if i not in sparse]
        slices = [gradients[i] for i in sparse]
        as_int64 = [tf.IndexedSlices(g.values, tf.cast(g.indices, tf.int64), g.dense_shape) for g in slices]
        summed = dict(zip(dense, self.grouped_allreduce([gradients[i] for i in dense], op=hvd.Sum), strict=True))
        summed.update(zip(sparse, self.grouped_allreduce(as_int64, op=hvd.Sum), strict=True))
        return [summed[i] for i in range(len(gradients))]

    def summed(self, gradients: list) -> list:
        return gradients  # by sync_gradients

    def step_batch(self, global_batch: int) -> int:
        """The examples of one step: each rank's share of the global batch (``global_batch // size``) on each."""
        return global_batch // self.workers * self.workers

    def step_runner(
        self, replica_step: Callable[[Any], Any], size: int, dataset_fn: Callable[..., Any]
    ) -> Callable[[int], np.ndarray]:
        tf, hvd = self.tf, self.hvd
        iterator = iter(dataset_fn(hvd.rank(), hvd.size(), lambda global_batch: global_batch // hvd.size()))

        @tf.function
        def chunk(steps):
            sums = tf.zeros([size])
            for _ in tf.range(steps):
                sums += replica_step(next(iterator))
            return self.grouped_allreduce([sums], op=hvd.Sum)[0]

        return lambda steps: chunk(tf.constant(steps)).numpy().astype(float)
