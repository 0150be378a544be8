"""trainer/syncs/mirrored.py: MultiWorkerMirroredStrategy without a TF_CONFIG, one worker in this process: its name,
its place, and the sums of its steps."""

from __future__ import annotations

import numpy as np

from tests.support.specs import make_spec
from tfdist.spec import load_spec
from tfdist.trainer.syncs.mirrored import Mirrored


def test_a_lone_worker_is_the_chief_and_its_runner_sums_the_step_vectors_of_the_steps_asked(tf, tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    training = load_spec(make_spec(str(tmp_path), training={"global_batch_size": 4})).training
    sync = Mirrored(tf, training)
    assert (sync.name, sync.workers, sync.is_chief, sync.step_batch(4)) == ("worker-0", 1, True, 4)

    def dataset(reader, readers, per_replica_batch):
        assert (reader, readers) == (0, 1)
        return tf.data.Dataset.range(100).map(lambda i: tf.cast(i, tf.float32)).batch(per_replica_batch(4))

    with sync.scope():
        run = sync.step_runner(lambda batch: tf.stack([tf.reduce_sum(batch), 1.0]), 2, dataset)
    np.testing.assert_array_equal(run(2), [0 + 1 + 2 + 3 + 4 + 5 + 6 + 7, 2])
    np.testing.assert_array_equal(run(1), [8 + 9 + 10 + 11, 1])  # the iterator goes on where it stopped
    with sync.scope():
        assert sync.summed([]) == []
