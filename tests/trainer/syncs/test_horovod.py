"""trainer/syncs/horovod.py: a world of one Horovod rank in this process (Gloo, no rendezvous): its place, its
learning-rate scale by the planned ranks, gradients summed dense and sparse, and the sums of its steps (ranks of
several processes: test_tabular_training.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.specs import make_spec
from tfdist.spec import load_spec


@pytest.fixture
def horovod(tf, tmp_path):
    from tfdist.trainer.syncs.horovod import Horovod

    def sync(**mpi):
        training = {"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo", "slots_per_worker": 2, **mpi}}
        return Horovod(tf, load_spec(make_spec(str(tmp_path), training=training)).training)

    return sync


def test_a_lone_rank_is_the_chief_and_scales_its_learning_rate_by_the_planned_ranks(horovod):
    sync = horovod()
    assert (sync.name, sync.workers, sync.is_chief, sync.step_batch(10)) == ("rank-0", 1, True, 10)
    assert sync.learning_rate_scale == 4  # 2 workers × 2 slots, whatever the world now
    assert horovod(scale_learning_rate=False).learning_rate_scale == 1


def test_dense_and_sparse_gradients_are_summed_over_the_ranks_and_variables_start_as_rank_0s(tf, horovod):
    sync = horovod()
    variable = tf.Variable([1.0, 2.0])
    sync.start([variable])
    np.testing.assert_array_equal(variable.numpy(), [1.0, 2.0])
    table = tf.Variable(tf.zeros([10_000, 2]))  # too many rows to be made dense
    sparse = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([3, 7], tf.int32), tf.constant([10_000, 2]))
    dense, gathered = sync.sync_gradients([tf.constant([0.5, 0.25]), sparse], [variable, table])
    np.testing.assert_array_equal(dense.numpy(), [0.5, 0.25])
    assert isinstance(gathered, tf.IndexedSlices) and gathered.indices.dtype == tf.int64
    assert gathered.indices.numpy().tolist() == [3, 7] and sync.summed([dense]) == [dense]


def test_the_runner_sums_the_step_vectors_of_the_steps_asked(tf, horovod):
    sync = horovod()

    def dataset(rank, size, per_rank_batch):
        assert (rank, size) == (0, 1)
        return tf.data.Dataset.range(100).map(lambda i: tf.cast(i, tf.float32)).batch(per_rank_batch(4))

    run = sync.step_runner(lambda batch: tf.stack([tf.reduce_sum(batch), 1.0]), 2, dataset)
    np.testing.assert_array_equal(run(2), [28, 2])
    np.testing.assert_array_equal(run(1), [8 + 9 + 10 + 11, 1])
