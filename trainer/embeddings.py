"""Tables of weights by id (embeddings, wide_deep's linear weights, crosses): how they are split over parameter
servers, the layers that hold them (``EmbeddingTable``, ``HashedCross``; ``OneHot``, a categorical feature's ids
without one), and the optimizers that update only the rows a step looked up.

- Splitting: under ParameterServerStrategy with a ``TablePartitioner`` (``training.parameter_server``), a table of
  at least twice ``shard_min_bytes`` is a ``ShardedVariable`` split by rows over the ps tasks, each shard created on
  its ps by a shard-aware initializer (the whole table never exists on the chief). Every other variable is one piece
  (Keras 3 weights cannot be sharded: its variables then fail with "'ShardedVariable' object has no attribute
  'handle'"), so a split table is a plain ``tf.Variable`` held by its layer, outside Keras's weights
  (``split_tables``).
- Sparse optimizers (``model.embedding_optimizer``): LazyAdam, Adagrad and SGD written with gathers and scatter
  updates of the rows a step touched, their slots included; every other row and its slots stay byte for byte. Each
  update runs where its variable lives (``strategy.extended.update``: on a ps, the shard's own task). A split table's
  slots are split alike, each slot shard beside its table shard, and saved as one variable (a ShardedVariable, the
  class TensorFlow exports for its optimizers' split slots), so a checkpoint restores into any number of shards.

Imports TensorFlow: import this module only once TensorFlow may start (``runtime.import_tensorflow``)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator
from typing import ClassVar

import keras
import tensorflow as tf

from tfdist.spec import ParameterServerSpec
from tfdist.spec.sizing import FLOAT32_BYTES

_partitioner: contextvars.ContextVar[TablePartitioner | None] = contextvars.ContextVar("partitioner", default=None)


class TablePartitioner:
    """ParameterServerStrategy's ``variable_partitioner``: splits a table made by ``table_weight`` into the spec's
    number of shards; every other variable is one piece."""

    def __init__(self, settings: ParameterServerSpec, num_ps: int) -> None:
        self.settings, self.num_ps = settings, num_ps
        self.splitting = False

    def shards(self, shape: tuple[int, ...]) -> int:
        return self.settings.shards(shape[0] * shape[1] * FLOAT32_BYTES, self.num_ps)

    def __call__(self, shape, dtype) -> list[int]:
        return [self.shards(tuple(shape)) if self.splitting else 1] + [1] * (len(shape) - 1)

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Tables made meanwhile (``table_weight``) are split by this partitioner."""
        token = _partitioner.set(self)
        try:
            yield
        finally:
            _partitioner.reset(token)


def table_weight(layer: keras.layers.Layer, rows: int, width: int, initializer: str):
    """A table layer's ``rows`` × ``width`` weights: a Keras weight, or, split over parameter servers, a
    ShardedVariable whose shards are made on their ps tasks."""
    partitioner = _partitioner.get()
    if partitioner is None or partitioner.shards((rows, width)) == 1:
        return layer.add_weight(shape=(rows, width), initializer=initializer, name="embeddings")
    initialize = keras.initializers.get(initializer)

    def shard(shard_info):
        return initialize(tuple(shard_info.shape), dtype="float32")

    partitioner.splitting = True
    try:
        return tf.Variable(shard, shape=(rows, width), dtype=tf.float32, name=f"{layer.name}/embeddings")
    finally:
        partitioner.splitting = False


def variable_of(weights):
    """A table's TensorFlow variable: a split table's ShardedVariable, or a Keras weight's variable."""
    return weights.value if isinstance(weights, keras.Variable) else weights


def tables(model) -> dict[str, tf.Variable]:
    """The model's tables (``variable_of``) by layer name."""
    return {layer.name: variable_of(layer.embeddings) for layer in model.layers if isinstance(layer, TableLayer)}


class TableLayer(keras.layers.Layer):
    """A layer holding a table (``table_weight``) as ``embeddings``."""

    def make_table(self, rows: int, width: int, initializer: str) -> None:
        self.embeddings = table_weight(self, rows, width, initializer)

    @property
    def table(self):
        """The table's variable: split (a ``ShardedVariable``), replicated (one copy per replica), or plain."""
        return variable_of(self.embeddings)

    def lookup(self, ids):
        """The rows of ``ids``, reading only those (from each shard of a split table)."""
        return tf.nn.embedding_lookup(local_copy(self.table), ids)


class EmbeddingTable(TableLayer):
    """A table of ``rows`` × ``width`` weights looked up by id (``TableLayer.lookup``: only the rows looked up are
    read, and the gradient is an IndexedSlices of them); a list's rows combined."""

    def __init__(self, rows: int, width: int, combiner: str | None = None, initializer: str = "uniform", **kwargs):
        super().__init__(**kwargs)
        self.rows, self.width, self.combiner, self.initializer = rows, width, combiner, initializer

    def build(self, input_shape):
        self.make_table(self.rows, self.width, self.initializer)

    def call(self, ids):
        if self.combiner is None:
            return self.lookup(ids)
        present = ids >= 0  # gather the ids present only: padding adds no rows to the sparse gradient
        rows = self.lookup(tf.boolean_mask(ids, present))
        sums = tf.math.unsorted_segment_sum(rows, tf.where(present)[:, 0], tf.shape(ids)[0])
        if self.combiner == "sum":
            return sums
        counts = tf.reduce_sum(tf.cast(present, sums.dtype), axis=1, keepdims=True)
        return sums / tf.maximum(counts, 1.0)


class HashedCross(TableLayer):
    """A cross of categorical features in the linear part: every combination of the features' values in a row
    (a list contributes each of its values) hashed into ``buckets``, a weight row per bucket, summed."""

    def __init__(self, buckets: int, width: int, **kwargs):
        super().__init__(**kwargs)
        self.buckets, self.width = buckets, width

    def build(self, input_shape):
        self.make_table(self.buckets, self.width, "zeros")

    def call(self, values):
        columns = [tf.sparse.from_dense(v) if v.shape.rank == 2 else v[:, None] for v in values]  # a list's "": none
        crossed = tf.sparse.cross_hashed(columns, num_buckets=self.buckets)
        rows = self.lookup(crossed.values)  # one gather: one plain sparse gradient
        return tf.math.unsorted_segment_sum(rows, crossed.indices[:, 0], tf.shape(values[0])[0])


class OneHot(keras.layers.Layer):
    """Ids as one-hot vectors of ``rows`` (a list's combined)."""

    def __init__(self, rows: int, combiner: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.combiner = rows, combiner

    def call(self, ids):
        hot = tf.one_hot(ids, self.rows)  # -1: zeros
        if self.combiner is None:
            return hot
        total = tf.reduce_sum(hot, axis=1)
        if self.combiner == "sum":
            return total
        return total / tf.maximum(tf.reduce_sum(tf.cast(ids >= 0, hot.dtype), axis=1, keepdims=True), 1.0)


def local_copy(variable, device: str | None = None):
    """A replicated variable's copy on ``device`` (by default this replica's), else the variable itself. Reading the
    copy reads only the rows asked for: TensorFlow 2.21's ``tf.gather`` and ``embedding_lookup`` read a
    ``MirroredVariable`` whole first (it is no resource variable), which made each step copy every table and its
    slots (docs/performance.md)."""
    if not isinstance(variable, tf.distribute.DistributedValues):
        return variable
    copies = tf.distribute.get_strategy().experimental_local_results(variable)
    device = device or variable.device
    return next((copy for copy in copies if copy.device == device), copies[0])


def split_tables(model) -> list:
    """The shards of the model's split tables: trainable, but not Keras weights (not in model.trainable_variables)."""
    return [shard for table in tables(model).values() for shard in getattr(table, "variables", ())]


def trained_weights(model, sparse: bool) -> tuple[list, list]:
    """(the weights the model's optimizer trains, the table pieces a sparse optimizer trains: none unless
    ``sparse``)."""
    if not sparse:
        return [*model.trainable_variables, *split_tables(model)], []
    layers = [layer for layer in model.layers if isinstance(layer, TableLayer)]
    own = {id(layer.embeddings) for layer in layers}
    dense = [v for v in model.trainable_variables if id(v) not in own]
    return dense, [piece for table in tables(model).values() for piece in pieces(table)]


def pieces(variable) -> list:
    """A table's variables: a split table's shards, else the table itself."""
    return list(getattr(variable, "variables", [variable]))


def touched(gradient) -> tf.IndexedSlices:
    """A table's gradient as the rows it touches: an IndexedSlices with each row once (duplicates summed); a dense
    gradient (a table all-reduced whole) as its non-zero rows."""
    if not isinstance(gradient, tf.IndexedSlices):
        rows = tf.where(tf.reduce_any(gradient != 0, axis=1))[:, 0]
        return tf.IndexedSlices(tf.gather(gradient, rows), rows)
    rows, position = tf.unique(tf.cast(gradient.indices, tf.int64))
    return tf.IndexedSlices(tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(rows)[0]), rows)


class SparseOptimizer(tf.Module):
    """An optimizer of tables that updates only the rows a step touched (and those rows of its slots)."""

    slots_start: ClassVar[dict[str, float]] = {}
    """Its slots by name, and the value each starts from."""

    def __init__(self, learning_rate: float, name: str = "embedding_optimizer") -> None:
        super().__init__(name=name)
        self.learning_rate = learning_rate
        self.iterations = tf.Variable(0, trainable=False, dtype=tf.int64, name="iterations")
        self.slots: dict[str, dict[str, tf.Variable]] = {}
        self._slots_of = types.SimpleNamespace(by_piece={})  # not a dict attribute: checkpoints would track it

    def build(self, named_tables: dict[str, tf.Variable]) -> None:
        """Slots for each table (by its name), split as the table is, each piece beside its table's piece."""
        strategy = tf.distribute.get_strategy()
        for name, table in named_tables.items():
            self.slots[name] = {}
            for slot, start in self.slots_start.items():
                shards = []
                for piece in pieces(table):
                    with strategy.extended.colocate_vars_with(piece):  # made there, by a callable
                        shards.append(
                            tf.Variable(
                                functools.partial(tf.fill, piece.shape, start),
                                shape=piece.shape,
                                dtype=tf.float32,
                                trainable=False,
                                name=f"{name}_{slot}",
                            )
                        )
                split = hasattr(table, "variables")
                self.slots[name][slot] = tf.__internal__.distribute.ShardedVariable(shards) if split else shards[0]
            for i, piece in enumerate(pieces(table)):
                self._slots_of.by_piece[piece.ref()] = [pieces(self.slots[name][slot])[i] for slot in self.slots_start]

    @property
    def variables(self) -> list[tf.Variable]:
        """Its own variables, the slots' pieces included (what Horovod broadcasts and its elastic state keeps)."""
        slots = [piece for named in self.slots.values() for slot in named.values() for piece in pieces(slot)]
        return [self.iterations, *slots]

    def apply(self, gradients: list, variables: list) -> None:
        """Apply each table piece's gradient; in a replica context, once for all replicas (gradients summed over
        them before, by the gradient sync)."""

        def update_all(strategy, gradients):
            strategy.extended.update(self.iterations, lambda i: i.assign_add(1), args=())
            rate = self.step_rate()
            for gradient, piece in zip(gradients, variables, strict=True):
                strategy.extended.update(
                    piece, self._update_copy, args=(gradient, rate, *self._slots_of.by_piece[piece.ref()])
                )

        tf.distribute.get_replica_context().merge_call(update_all, args=(gradients,))

    def step_rate(self):
        """This step's learning rate: computed once for every piece (on parameter servers, each piece's task would
        otherwise read the step count from the task holding it and compute the rate again); here a constant."""
        return self.learning_rate

    def _update_copy(self, variable, gradient, rate, *slots):
        """``update`` of one copy of a piece (each replica's, when replicated), with the slots' copies beside it."""
        return self.update(variable, gradient, rate, *(local_copy(slot, variable.device) for slot in slots))

    def update(self, variable, gradient, rate, *slots):
        """Update the rows of ``variable`` (and of its ``slots``) that ``gradient`` touches, at learning rate
        ``rate``."""
        raise NotImplementedError


class LazyAdam(SparseOptimizer):
    """Adam (Keras's formula) on the touched rows only: a row's moments move when the row is looked up."""

    slots_start: ClassVar[dict[str, float]] = {"m": 0.0, "v": 0.0}
    beta_1, beta_2, epsilon = 0.9, 0.999, 1e-7

    def step_rate(self):
        """The learning rate with Adam's bias corrections at this step."""
        step = tf.cast(self.iterations, tf.float32)
        return self.learning_rate * tf.sqrt(1 - self.beta_2**step) / (1 - self.beta_1**step)

    def update(self, variable, gradient, rate, m, v):
        g = touched(gradient)
        m_rows = self.beta_1 * tf.gather(m, g.indices) + (1 - self.beta_1) * g.values
        v_rows = self.beta_2 * tf.gather(v, g.indices) + (1 - self.beta_2) * tf.square(g.values)
        return tf.group(
            m.scatter_update(tf.IndexedSlices(m_rows, g.indices)),
            v.scatter_update(tf.IndexedSlices(v_rows, g.indices)),
            variable.scatter_sub(tf.IndexedSlices(rate * m_rows / (tf.sqrt(v_rows) + self.epsilon), g.indices)),
        )


class Adagrad(SparseOptimizer):
    """Adagrad (Keras's formula and starting accumulator) on the touched rows only."""

    slots_start: ClassVar[dict[str, float]] = {"accumulator": 0.1}
    epsilon = 1e-7

    def update(self, variable, gradient, rate, accumulator):
        g = touched(gradient)
        sums = tf.gather(accumulator, g.indices) + tf.square(g.values)
        return tf.group(
            accumulator.scatter_update(tf.IndexedSlices(sums, g.indices)),
            variable.scatter_sub(tf.IndexedSlices(rate * g.values / tf.sqrt(sums + self.epsilon), g.indices)),
        )


class SGD(SparseOptimizer):
    """Plain gradient descent on the touched rows."""

    def update(self, variable, gradient, rate):
        g = touched(gradient)
        return variable.scatter_sub(tf.IndexedSlices(rate * g.values, g.indices))


SPARSE_OPTIMIZERS = {"lazy_adam": LazyAdam, "adagrad": Adagrad, "sgd": SGD}
