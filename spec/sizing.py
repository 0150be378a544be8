"""The memory model of the tables of weights by id: how wide a categorical feature's embedding is, and how many bytes
each table takes in training. The spec bounds them before any data is prepared (``max_table_bytes``); the trainer
counts the prepared data's ids (``tfdist.trainer.models.table_bytes``), by the same formulas."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfdist.spec.data import MAX_CLASSES, Categorical
from tfdist.spec.families import ModelSpec, WideDeepModel
from tfdist.spec.training import TrainingSpec

if TYPE_CHECKING:
    from tfdist.spec.model import Spec

FLOAT32_BYTES = 4
COPIES_IN_TRAINING = 3
"""Copies of a table in training: its weights and an optimizer's two slots (Adam)."""
EMBEDDING_BYTES_PER_VALUE = COPIES_IN_TRAINING * FLOAT32_BYTES
"""Bytes an embedding value costs in training."""
ONE_HOT_MAX_IDS = 10


def embedding_dim(feature: Categorical, ids: int) -> int:
    """The feature's embedding width for ``ids`` ids: its own, else 0 (a one-hot) up to ONE_HOT_MAX_IDS ids, else
    round(1.6 × ids^0.56), at most 64."""
    if feature.embedding_dim:
        return feature.embedding_dim
    return 0 if ids <= ONE_HOT_MAX_IDS else min(64, round(1.6 * ids**0.56))


def training_bytes(rows: int, width: int) -> int:
    """The bytes a table of ``rows`` × ``width`` weights takes in training, with the optimizer's slots."""
    return rows * width * EMBEDDING_BYTES_PER_VALUE


def embedding_bytes(ids: int, dim: int) -> int:
    """The bytes of a categorical feature's embedding of ``ids`` rows and width ``dim`` (a one-hot, 0: one column)."""
    return training_bytes(ids, max(1, dim))


def cross_bytes(model: ModelSpec, width: int) -> dict[str, int]:
    """The bytes of each cross's table ('a × b'), of ``width`` outputs per bucket (wide_deep; other families have
    no crosses)."""
    crosses = model.crosses if isinstance(model, WideDeepModel) else []
    return {" × ".join(cross.features): training_bytes(cross.hash_buckets, width) for cross in crosses}


def max_table_bytes(spec: Spec) -> dict[str, int]:
    """The most bytes each table of weights by id can take in training (with the optimizer's slots): each
    categorical feature's embedding ('user') and, with wide_deep, its weight per id and output ('user (wide)'),
    each cross's ('a × b'). An upper bound: trainer/models.py ``table_bytes`` counts the prepared data's ids."""
    label = spec.data.label
    width = len(label.class_names or range(MAX_CLASSES)) if label.task == "multiclass" else 1
    found = {}
    for f in spec.data.categorical_features:
        found[f.name] = embedding_bytes(f.max_ids, embedding_dim(f, f.max_ids))
        if isinstance(spec.model, WideDeepModel):
            found[f"{f.name} (wide)"] = training_bytes(f.max_ids, width)
    return found | cross_bytes(spec.model, width)


def shards(training: TrainingSpec, size: int) -> int:
    """How many shards over the parameter servers a table taking ``size`` bytes in training is split into."""
    return training.parameter_server_settings.shards(size // COPIES_IN_TRAINING, training.num_ps)


def tables_per_pod(spec: Spec) -> int:
    """The most bytes of tables one training pod holds: every table on a worker (all-reduce); on a parameter
    server its even share of them, at least the largest piece (a table, or a shard of a split one) placed whole."""
    tables, t = max_table_bytes(spec), spec.training
    if t.strategy != "parameter_server" or not tables:
        return sum(tables.values())
    pieces = [-(-size // shards(t, size)) for size in tables.values()]
    return max(-(-sum(tables.values()) // t.num_ps), *pieces)
