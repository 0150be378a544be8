"""Distribution backends: each turns the spec's training section into the train stage's processes."""

from __future__ import annotations

from tfdist.operators.backends import mpi, tf
from tfdist.operators.plan import Stage
from tfdist.trainer.spec import Spec

BACKENDS = {"tf": tf.train_stage, "mpi": mpi.train_stage}


def train_stage(spec: Spec, command: tuple[str, ...]) -> Stage:
    """``command`` is one training process's argv (``python -m tfdist.trainer.train ...``)."""
    return BACKENDS[spec.training.backend](spec, command)
