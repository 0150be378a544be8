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


@pytest.mark.parametrize("by_token", [False, True])
def test_a_split_tables_rows_are_restored_shard_by_shard_as_they_would_be_whole(tmp_path, by_token):
    import tensorflow as tf

    from tfdist.trainer.warm_start import TokenRows, restore_shards

    rng = np.random.default_rng(1)
    parent_tokens, tokens = [f"t{i}" for i in range(30)], [f"t{i}" for i in range(10, 45)]
    parent = rng.normal(size=(2 + len(parent_tokens), WIDTH)).astype("float32")
    ours = rng.normal(size=(2 + len(tokens) if by_token else len(parent), WIDTH)).astype("float32")
    prefix = tf.train.Checkpoint(table=tf.Variable(parent)).write(str(tmp_path / "parent"))
    split = tf.__internal__.distribute.ShardedVariable(
        [tf.Variable(ours[:13]), tf.Variable(ours[13:26]), tf.Variable(ours[26:])]
    )
    match = TokenRows.between(tokens, 2, parent_tokens, 2) if by_token else None
    restore_shards(tf, split, prefix, "table/.ATTRIBUTES/VARIABLE_VALUE", len(parent), match)
    expected = match.carried(ours, parent) if match else parent
    np.testing.assert_array_equal(np.concatenate([piece.numpy() for piece in split.variables]), expected)


@pytest.mark.e2e
@pytest.mark.parametrize(("combiner", "name"), [(None, "lazy_adam"), ("mean", "adagrad")])
def test_a_replicated_table_and_its_slots_are_read_only_at_the_rows_a_step_looks_up(combiner, name):
    """Under a mirrored strategy (MultiWorkerMirrored's variables), a lookup reads this replica's copy at the ids and
    the sparse optimizer reads its slots' copies at those rows, never a whole table or slot; the gradient stays an
    IndexedSlices of those rows, and the update leaves every other row as it was."""
    import tensorflow as tf

    from tfdist.trainer.embeddings import SPARSE_OPTIMIZERS, EmbeddingTable

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        layer = EmbeddingTable(ROWS, WIDTH, combiner)
        layer.build(None)
        optimizer = SPARSE_OPTIMIZERS[name](0.05)
        optimizer.build({"table": layer.table})
    ids = tf.constant([[3, 7], [900, -1]] if combiner else [3, 7, 900])
    start = layer.table.numpy()

    @tf.function
    def step(ids):
        def replica_step(ids):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(ids))
            gradient = tape.gradient(loss, layer.table)
            optimizer.apply([gradient], [layer.table])
            return gradient

        return strategy.run(replica_step, args=(ids,))

    graph = step.get_concrete_function(ids).graph
    reads = [op for op in graph.get_operations() if op.type == "ReadVariableOp"]
    assert not [op.name for op in reads if op.outputs[0].shape.as_list() == [ROWS, WIDTH]], "a whole table was read"
    assert "ResourceGather" in {op.type for op in graph.get_operations()}
    gradient = step(ids)
    assert isinstance(gradient, tf.IndexedSlices) and sorted(set(gradient.indices.numpy())) == [3, 7, 900]
    changed = np.flatnonzero((layer.table.numpy() != start).any(axis=1))
    assert changed.tolist() == [3, 7, 900], changed
