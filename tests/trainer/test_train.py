"""trainer/train.py's pieces, in this process: the records a reader reads, the examples/s once warm, the weights'
digest, a fresh progress and a summary window's means (whole trainings in every mode: test_tabular_training.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.trainer.labels import label_entry
from tfdist.trainer.train import Window, new_progress, shard_records, steady_rate, weights_digest
from tfdist.trainer.train_metrics import TaskSums


def test_a_reader_reads_every_readers_th_shard_from_its_own_endlessly(tf, tmp_path):
    files = []
    for shard in range(4):
        files.append(str(tmp_path / f"train-{shard}.tfrecord"))
        with tf.io.TFRecordWriter(files[-1]) as writer:
            for row in range(3):
                writer.write(f"{shard}:{row}".encode())
    records = shard_records(tf, files, 1, 2, seed=7)
    read = [r.numpy().decode() for r in itertools.islice(iter(records), 18)]
    assert set(read[:6]) == {f"{s}:{r}" for s in (1, 3) for r in range(3)}  # shards 1 and 3, each record once
    assert sorted(read[6:12]) == sorted(read[:6]) and sorted(read[12:]) == sorted(read[:6])  # then again


def test_the_rate_counts_from_the_first_step_call_and_is_none_before_a_second():
    assert steady_rate(5, 10.0, None, 32) is None
    assert steady_rate(5, 10.0, (8.0, 5), 32) is None  # no step since
    assert steady_rate(9, 8.0, (8.0, 5), 32) is None  # no time since
    assert steady_rate(9, 10.0, (8.0, 5), 32) == 64.0  # 4 steps of 32 in 2 s


def test_the_weights_digest_changes_with_any_weight(tf):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    before = weights_digest(model)
    assert len(before) == 16 and weights_digest(model) == before
    model.weights[1].assign([0.0, 1e-6])
    assert weights_digest(model) != before


def test_a_new_progress_starts_its_epoch_at_the_step_with_nothing_summed():
    progress = new_progress(40, 3)
    assert progress["step"] == 40 and progress["history"] == []
    assert (progress["epoch_steps"], progress["epoch_examples"]) == (0, 0)
    np.testing.assert_array_equal(progress["epoch_sums"], np.zeros(3))


def test_a_window_means_the_loss_over_its_steps_and_the_metrics_over_its_examples(tf):
    window = Window(TaskSums(label_entry("multiclass", ["a", "b"]), "sparse_categorical_crossentropy"))
    window.add(np.array([1.0, 3.0]), steps=2, examples=4)  # loss sum, correct predictions
    window.add(np.array([0.5, 1.0]), steps=1, examples=4)
    means = window.means()
    assert means["loss"] == pytest.approx(0.5) and means["accuracy"] == 0.5
    assert means["examples_per_sec"] is None or means["examples_per_sec"] > 0
