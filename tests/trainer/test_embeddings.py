"""The sparse optimizers of tables (``model.embedding_optimizer``): a step changes only the rows it looked up and
their slots, and those rows as Keras's own optimizer changes them."""

from __future__ import annotations

import numpy as np
import pytest

ROWS, WIDTH = 1000, 4
KERAS = {"lazy_adam": "Adam", "adagrad": "Adagrad", "sgd": "SGD"}


def lookup_gradient(tf, table, ids: list[int]):
    """The gradient of a loss over the rows ``ids`` of ``table`` (an IndexedSlices, duplicates kept)."""
    with tf.GradientTape() as tape:
        rows = tf.nn.embedding_lookup(table, tf.constant(ids))
        loss = tf.reduce_sum(rows * tf.range(1.0, WIDTH + 1.0)) + tf.reduce_sum(tf.square(rows))
    return tape.gradient(loss, table)


@pytest.mark.parametrize("name", ["lazy_adam", "adagrad", "sgd"])
def test_a_step_changes_only_the_rows_it_looked_up_as_the_keras_optimizer_changes_them(name):
    import keras
    import tensorflow as tf

    from tfdist.trainer.embeddings import SPARSE_OPTIMIZERS

    start = np.random.default_rng(0).normal(size=(ROWS, WIDTH)).astype("float32")
    ours, theirs = tf.Variable(start), tf.Variable(start)
    optimizer = SPARSE_OPTIMIZERS[name](0.05)
    optimizer.build({"table": ours})
    reference = getattr(keras.optimizers, KERAS[name])(learning_rate=0.05)
    reference.build([theirs])

    def step(ids: list[int]) -> None:
        optimizer.apply([lookup_gradient(tf, ours, ids)], [ours])
        reference.apply_gradients([(tf.convert_to_tensor(lookup_gradient(tf, theirs, ids)), theirs)])

    looked_up, later = [3, 3, 7, 900], [5, 6]
    for _ in range(2):  # the same rows: Keras's dense update leaves every other row as it is, too
        step(looked_up)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    untouched = np.setdiff1d(np.arange(ROWS), looked_up + later)
    np.testing.assert_array_equal(ours.numpy()[untouched], start[untouched])

    before = {"table": ours.numpy(), **{k: v.numpy() for k, v in optimizer.slots["table"].items()}}
    step(later)
    after = {"table": ours.numpy(), **{k: v.numpy() for k, v in optimizer.slots["table"].items()}}
    others = np.setdiff1d(np.arange(ROWS), later)
    for kind in before:  # every row but those looked up, and its slots, byte for byte
        assert after[kind][others].tobytes() == before[kind][others].tobytes(), kind
    np.testing.assert_allclose(after["table"][later], theirs.numpy()[later], rtol=1e-6, atol=1e-7)
    if name == "lazy_adam":  # where Keras's Adam moved rows not looked up, by their moments
        assert not np.allclose(theirs.numpy()[looked_up], before["table"][looked_up])


@pytest.mark.parametrize(
    ("choice", "dense_tables"),
    [("gather", []), ("dense", [20, 1000]), ("auto", [20])],  # auto: tables of at most half the global batch's rows
)
def test_sparse_gradients_chooses_which_tables_gradients_are_made_dense(tmp_path, choice, dense_tables):
    import tensorflow as tf

    from tests.conftest import make_spec
    from tfdist.spec import load_spec
    from tfdist.trainer.train import dense_rows, densified

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
