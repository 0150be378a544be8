"""Distribution backends: each turns the spec's training section into the train stage's processes."""

from __future__ import annotations

from operators.backends import tf
from operators.plan import RunLayout, Stage
from operators.spec import Spec

BACKENDS = {"tf": tf.train_stage}


def train_stage(spec: Spec, layout: RunLayout, module: list[str], threads: int) -> Stage:
    return BACKENDS[spec.training.backend](spec, layout, module, threads)
