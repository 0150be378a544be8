"""Each training process reads its input in its own order. ParameterServerStrategy runs one traced dataset function
on every worker (input pipeline 0 of 1), so a shuffle seed fixed in that function would give every worker the same
batches in the same order: each worker draws its own as its dataset starts."""

from __future__ import annotations


def first_batch_of_each_worker(tf, seed, workers: int = 2) -> list[list[int]]:
    """The first batch of the same dataset function traced once per worker, as each worker of a run traces it (the
    run's global seed set)."""
    tf.random.set_seed(7)
    batches = []
    for _ in range(workers):

        @tf.function
        def first():
            dataset = tf.data.Dataset.range(1000).shuffle(1000, seed=seed(tf), reshuffle_each_iteration=True)
            return next(iter(dataset.batch(8)))

        batches.append(first().numpy().tolist())
    return batches


def test_each_parameter_server_worker_reads_the_data_in_its_own_order():
    import tensorflow as tf

    from tfdist.trainer.train import drawn_seed

    fixed = first_batch_of_each_worker(tf, lambda tf: 42)
    assert fixed[0] == fixed[1]  # what a seed fixed in the function did
    drawn = first_batch_of_each_worker(tf, drawn_seed)
    assert drawn[0] != drawn[1], drawn
