"""Sparse gradients in the all-reduce modes (``training.sparse_gradients``, docs/training.md): which tables'
gradients (IndexedSlices, from embedding lookups) MultiWorkerMirrored and Horovod make dense before syncing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfdist.spec import TrainingSpec


def dense_rows(training: TrainingSpec) -> float:
    """The most rows of a table whose gradient an all-reduce mode makes dense (``training.sparse_gradients``): every
    table ('dense'), none ('gather'), or ('auto') those of at most half the global batch's rows, where all-gathering
    the rows looked up (at least the global batch of them) moves more than a ring all-reduce of the whole table (twice
    its rows)."""
    return {"dense": float("inf"), "gather": 0, "auto": training.global_batch_size // 2}[training.sparse_gradients]


def densified(tf, gradients: list, variables: list, max_rows: float, static_only: bool = False) -> list:
    """The gradients with those of tables of at most ``max_rows`` rows (IndexedSlices, from embedding lookups) made
    dense (``dense_rows``). With ``static_only``, also those whose number of rows is known only at run time (lists,
    crosses)."""
    return [
        tf.convert_to_tensor(g)
        if isinstance(g, tf.IndexedSlices) and (v.shape[0] <= max_rows or (static_only and g.values.shape[0] is None))
        else g
        for g, v in zip(gradients, variables, strict=True)
    ]
