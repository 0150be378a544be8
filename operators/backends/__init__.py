"""Distribution backends: each turns the spec's training section into the train stage's processes."""

from __future__ import annotations

from operators.backends import mpi, tf
from operators.plan import Stage
from operators.spec import Spec

BACKENDS = {"tf": tf.train_stage, "mpi": mpi.train_stage}


def train_stage(spec: Spec, command: tuple[str, ...]) -> Stage:
    """``command`` is one training process's argv (``python -m trainer.train ...``)."""
    return BACKENDS[spec.training.backend](spec, command)
