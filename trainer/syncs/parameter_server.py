"""``parameter_server`` (backend tf): the chief coordinates (ClusterCoordinator.schedule), variables live on the ps
tasks, workers run the scheduled steps; ps and worker processes only serve (``serve``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.trainer.runtime import say
from tfdist.trainer.syncs.mirrored import Mirrored

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec


class ParameterServer(Mirrored):
    """ParameterServerStrategy: this process is the chief; steps are scheduled onto the workers. Each variable lives
    on a ps and is updated there: a sparse gradient pushes only the looked-up rows, and lookups read only them."""

    every_worker_saves = False
    io_device = "/job:chief/replica:0/task:0/device:CPU:0"
    """With an object store the chief reads and writes every checkpoint file: the ps hold the variables, but on
    Kubernetes they do not see the chief's scratch, where its checkpoints are written before upload. Its memory
    then holds the tables while it saves."""
    readers_take_turns = True

    def __init__(self, tf, training: TrainingSpec, resolver):
        from tfdist.trainer.embeddings import TablePartitioner

        self.tf = tf
        self.partitioner = TablePartitioner(training.parameter_server_settings, training.num_ps)
        self.strategy = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=self.partitioner
        )
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.name, self.is_chief = "chief-0", True
        self.workers = len(resolver.cluster_spec().as_dict()["worker"])
        self.chunks_per_call = self.workers  # each worker's closure runs one chunk of steps

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The strategy's scope, in which tables over ``training.parameter_server.shard_min_bytes`` are split."""
        with self.strategy.scope(), self.partitioner.building():
            yield

    def sync_gradients(self, gradients: list, variables: list) -> list:
        return gradients

    def summed(self, gradients: list) -> list:
        return gradients

    def _from_context(self, dataset_fn):
        """Each worker reads its own shards: TF's input context makes every worker's pipeline 0 of 1."""
        worker_index = self.tf.distribute.coordinator.experimental_get_current_worker_index
        return lambda ctx: dataset_fn(worker_index(), self.workers, ctx.get_per_replica_batch_size)

    def step_runner(
        self, replica_step: Callable[[Any], Any], size: int, dataset_fn: Callable[..., Any]
    ) -> Callable[[int], np.ndarray]:
        iterator = iter(
            self.coordinator.create_per_worker_dataset(
                lambda: self.strategy.distribute_datasets_from_function(self._from_context(dataset_fn))
            )
        )
        chunk = self._chunk(replica_step, size)

        def run(steps):
            shares = [steps // self.workers + (i < steps % self.workers) for i in range(self.workers)]
            results = [self.coordinator.schedule(chunk, args=(iterator, self.tf.constant(n))) for n in shares if n]
            self.coordinator.join()
            return sum(r.fetch().astype(float) for r in results)

        return run


def serve(tf, resolver) -> None:
    """A parameter-server cluster's ps or worker task: serve until the launcher stops this process."""
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True
    )
    say(f"{resolver.task_type}-{resolver.task_id}: serving at {server.target}")
    server.join()
