"""Horovod elastic (``training.min_workers`` < ``num_workers``, under ``horovodrun --gloo`` in elastic mode): the
training loop runs inside Horovod's elastic ``run_fn``; the ranks keep their state (model and optimizer variables,
step, epoch sums) in host memory after every step call, and commit it (asking whether hosts came back) at every
checkpoint boundary. A lost rank makes the others' collective fail: they restore the state of the last step call,
re-form the world with whoever is left and go on; a returning rank joins at the survivors' next commit and receives
rank 0's state. Each (re)start re-shards the data by the new rank/size and keeps the global batch (global // size
per rank); the learning rate stays scaled by the planned ranks (num_workers × slots_per_worker), so a change of size
changes neither. Rank 0 logs ``rank-0: world size 2 -> 1 at step 120 (restored commit at step 120)``.
Horovod's own elastic state classes and ``hvd.elastic.run`` do not work with Keras 3 (why: docs/operations.md,
"Elastic training, per mode"), so ``KerasVariablesState`` below saves, restores and broadcasts the Keras variables
itself, under Horovod's ``run_fn`` with our own error mapping."""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract.launch import CORES_ENV, HOSTS_ENV
from tfdist.trainer.runtime import say
from tfdist.trainer.syncs.horovod import Horovod

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec

HOROVOD_FAILED = re.compile(r"Horovod has been shut down|gloo/transport|\{\{node [^}]*Horovod|\[Op:Horovod")
"""A TensorFlow error of a Horovod collective (a peer lost: Gloo's read error, or Horovod shut down after it)."""


class ElasticHorovod(Horovod):
    """Horovod elastic (module docstring): ``run(train, state)`` trains in Horovod's elastic loop."""

    @staticmethod
    def local_index(hvd) -> int:
        return elastic_slot()

    def start(self, variables: list) -> None:
        """Nothing: a collective outside the elastic loop would meet a joining rank's state sync; the state's
        first sync broadcasts rank 0's variables."""

    def step_runner(
        self, replica_step: Callable[[Any], Any], size: int, dataset_fn: Callable[..., Any]
    ) -> Callable[[int], np.ndarray]:
        """Horovod's, on a dataset without tf.data's autotune: each world has its own dataset iterator, and with
        autotune on, destroying the ended worlds' ones made a rank's exit wait 3-60 s for their autotune threads
        (Model::OptimizeLoop); parallelism is fixed."""
        without_autotune = self.tf.data.Options()
        without_autotune.autotune.enabled = False
        return super().step_runner(
            replica_step, size, lambda r, n, b: dataset_fn(r, n, b).with_options(without_autotune)
        )

    def lost_peer(self, error: Exception):
        """Horovod's HorovodInternalError (reset and go on from the last commit) for an error of a Horovod
        collective, whose peer was lost; None for any other error."""
        from horovod.common.exceptions import HorovodInternalError

        message = str(error)
        if not isinstance(error, self.tf.errors.OpError) or not HOROVOD_FAILED.search(message):
            return None
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        cause = next((line for line in lines if HOROVOD_FAILED.search(line) and not line.startswith("File ")), lines[0])
        return HorovodInternalError(f"{type(error).__name__}: {cause[:300]}")

    def state(self, variables: list, **progress: Any) -> Any:
        """Horovod elastic state over Keras 3 variables and the plain values in ``progress``."""
        from horovod.common.elastic import ObjectState

        sync = self

        class KerasVariablesState(ObjectState):
            """``hvd.elastic.TensorFlowKerasState`` for Keras 3: commit copies the variables to host memory,
            restore assigns them back, sync broadcasts rank 0's (then its progress values)."""

            def __init__(self):
                self.variables = variables
                self._committed = [v.numpy() for v in variables]
                super().__init__(bcast_object=sync.hvd.broadcast_object, get_rank=sync.hvd.rank, **progress)

            def save(self):
                self._committed = [v.numpy() for v in self.variables]
                super().save()

            def restore(self):
                for variable, value in zip(self.variables, self._committed, strict=True):
                    variable.assign(value)
                super().restore()

            def sync(self):
                try:
                    for i, variable in enumerate(self.variables):
                        variable.assign(
                            sync.hvd.broadcast(sync.tf.convert_to_tensor(variable), root_rank=0, name=f"state_{i}")
                        )
                    self._committed = [v.numpy() for v in self.variables]
                    super().sync()
                except Exception as error:  # a rank lost while syncing: reset again
                    lost = sync.lost_peer(error)
                    if lost is None:
                        raise
                    raise lost from error

        return KerasVariablesState()

    def run(self, train: Callable[[Any], None], state: Any) -> None:
        """``train(state)`` in Horovod's elastic loop: a lost peer restores the last commit, a change of hosts
        (a worker back) keeps it; either way the world is re-formed (shutdown, init) and ``train`` called again."""
        from horovod.common.elastic import run_fn
        from horovod.common.exceptions import HostsUpdatedInterrupt

        def attempt(state):
            name = self.name
            try:
                return train(state)
            except HostsUpdatedInterrupt:
                say(f"{name}: hosts changed at step {state.step}; re-forming the world")
                raise
            except Exception as error:
                lost = self.lost_peer(error)
                if lost is None:
                    raise
                say(f"{name}: lost a peer at step {state.step}: {lost}")
                raise lost from error

        def reset():
            gc.collect()  # the ended world's dataset iterator and step function (in cycles through the error's frames)
            self.hvd.shutdown()
            self.hvd.init()

        run_fn(attempt, reset)(state)


def elastic_run(training: TrainingSpec) -> bool:
    """Horovod elastic: the spec asks for it and horovodrun started this rank in elastic mode (another
    launcher starting the ranks itself gets the fixed-size loop)."""
    return training.backend == "mpi" and training.elastic and os.environ.get("HOROVOD_ELASTIC") == "1"


def elastic_slot() -> int:
    """This rank's place among the ranks on this machine under elastic horovodrun: each worker is a host of its
    own (TFDIST_HOROVOD_HOSTS, operators/launchers/processes.py), so local ranks repeat across workers; the place is
    the host's position × its slots + the local rank (stable: a returning worker gets its host name back)."""
    hosts = [entry.rpartition(":") for entry in os.environ.get(HOSTS_ENV, "").split(",") if entry]
    names = [host for host, _, _ in hosts]
    local_rank = int(os.environ.get("HOROVOD_LOCAL_RANK", 0))
    if os.environ.get("HOROVOD_HOSTNAME") not in names:
        return local_rank
    return names.index(os.environ["HOROVOD_HOSTNAME"]) * int(hosts[0][2]) + local_rank


def pin_elastic_rank() -> None:
    """Pin this rank to its block of TFDIST_CORES by its ``elastic_slot`` (not its local rank), before TensorFlow
    starts its threads; runtime's own pinning (by local rank) is left nothing to do."""
    blocks = os.environ.pop(CORES_ENV, "").split(";")
    index = elastic_slot()
    if index < len(blocks) and blocks[index]:
        os.sched_setaffinity(0, [int(core) for core in blocks[index].split(",")])
