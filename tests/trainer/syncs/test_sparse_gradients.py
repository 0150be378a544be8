"""Which tables' gradients the all-reduce modes make dense (``training.sparse_gradients``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.test_embeddings import WIDTH, lookup_gradient


@pytest.mark.parametrize(
    ("choice", "dense_tables"),
    [("gather", []), ("dense", [20, 1000]), ("auto", [20])],  # auto: tables of at most half the global batch's rows
)
def test_sparse_gradients_chooses_which_tables_gradients_are_made_dense(tmp_path, choice, dense_tables):
    import tensorflow as tf

    from tests.support.specs import make_spec
    from tfdist.spec import load_spec
    from tfdist.trainer.syncs.sparse_gradients import dense_rows, densified

    training = load_spec(make_spec(str(tmp_path), training={"sparse_gradients": choice, "global_batch_size": 64}))
    tables = [tf.Variable(tf.zeros([rows, WIDTH])) for rows in (20, 1000)]
    gradients = [lookup_gradient(tf, table, [1, 2, 2]) for table in tables]
    synced = densified(tf, gradients, tables, dense_rows(training.training))
    assert [
        t.shape[0] for t, g in zip(tables, synced, strict=True) if not isinstance(g, tf.IndexedSlices)
    ] == dense_tables
    for table, gradient in zip(tables, synced, strict=True):
        np.testing.assert_array_equal(
            tf.convert_to_tensor(gradient), tf.convert_to_tensor(lookup_gradient(tf, table, [1, 2, 2]))
        )
