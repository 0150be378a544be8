"""What every section is (``tfdist.spec.section.Section``): unknown keys refused with the closest allowed one, and
its rules checked in order, the first broken one the error."""

from __future__ import annotations

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec.training import TrainingSpec


def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path):
    spec = make_spec(str(tmp_path), training={"num_worker": 2})
    assert problems(spec) == [
        "training: unknown key 'num_worker' (did you mean 'num_workers'?); allowed keys: backend, strategy, launcher, "
        "num_workers, num_ps, mpi, parameter_server, sparse_gradients, gpus_per_worker, cpus_per_worker, epochs, "
        "global_batch_size, checkpoint_every_steps, keep_checkpoints, upload_every_seconds, seed, timeout_minutes, "
        "hang_timeout_seconds, min_workers, max_restarts, warm_start, summary_every_steps, tensorboard_url, pool, "
        "pool_slots"
    ]
    spec = make_spec(str(tmp_path), colour="blue")
    assert problems(spec)[0].startswith("<spec>: unknown key 'colour'")


def test_a_sections_rules_are_checked_in_order_and_the_first_broken_one_is_the_error(tmp_path):
    both = {"num_workers": 2, "min_workers": 3, "mpi": {"slots_per_worker": 1}}  # breaks the first and the second
    first, second = (rule.check.__name__ for rule in TrainingSpec.rules[:2])
    assert (first, second) == ("_elastic_sizes", "_horovod_or_parameter_servers")
    assert problems(make_spec(str(tmp_path), training=both)) == ["training.min_workers: at most num_workers (2), got 3"]
    assert problems(make_spec(str(tmp_path), training={"mpi": {"slots_per_worker": 1}})) == [
        "training.mpi: Horovod settings need backend 'mpi'"
    ]
