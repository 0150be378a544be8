"""The training section (``tfdist.spec.training``): its distribution modes, Horovod's settings, elasticity and the
warm start."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import Spec, load_spec


def test_warm_start_is_a_word_or_a_section_with_from_and_is_the_authors(tmp_path):
    for given, expected in (
        ("baseline", ("baseline", "cold")),
        ({"from": "baseline", "on_mismatch": "fail"}, ("baseline", "fail")),
        ("none", ("none", "cold")),
    ):
        spec = Spec.model_validate(make_spec(str(tmp_path), training={"warm_start": given}))
        assert (spec.training.warm_start.source, spec.training.warm_start.on_mismatch) == expected
        assert Spec.model_validate(spec.to_json_dict()) == spec  # spec.json reads back
    assert problems(make_spec(str(tmp_path), training={"warm_start": {"form": "baseline"}})) == [
        "training.warm_start: unknown key 'form' (did you mean 'from'?); allowed keys: from, on_mismatch"
    ]
    assert problems(make_spec(str(tmp_path), overridable=["training.warm_start.from"]))[0].startswith(
        "overridable: 'training.warm_start.from' cannot be overridden by whoever triggers a run: which model a run "
        "continues from is the author's"
    )


@pytest.mark.parametrize(
    "training, expected",
    [
        (
            {"backend": "mpi", "strategy": "parameter_server"},
            "training.strategy: 'parameter_server' needs backend 'tf'",
        ),
        ({"backend": "mpi", "num_ps": 1}, "training.num_ps: parameter servers need backend 'tf'"),
        ({"num_ps": 1}, "training.num_ps: parameter servers need strategy 'parameter_server'"),
        ({"strategy": "parameter_server"}, "training.num_ps: strategy 'parameter_server' needs at least 1"),
        ({"mpi": {"controller": "gloo"}}, "training.mpi: Horovod settings need backend 'mpi'"),
        ({"backend": "mpi", "mpi": {"controller": "tcp"}}, "training.mpi.controller: Input should be 'mpi' or 'gloo'"),
        (
            {"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": ["-np", "4"]}},
            "training.mpi.extra_args: '-np' is set by the launcher",
        ),
        (
            {"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": ["--mca btl\nx"]}},
            "training.mpi.extra_args[0]: String should match pattern",
        ),
        (
            {"backend": "mpi", "mpi": {"controller": "gloo", "extra_args": ["--bind-to", "core"]}},
            "training.mpi.extra_args: mpirun arguments need controller 'mpi'",
        ),
        (
            {"backend": "mpi", "min_workers": 1, "mpi": {"controller": "mpi", "extra_args": ["--bind-to", "core"]}},
            "training.mpi.extra_args: mpirun arguments need controller 'mpi' without elastic training",
        ),
        (
            {"backend": "mpi", "gpus_per_worker": 2, "mpi": {"slots_per_worker": 1}},
            "training.mpi.slots_per_worker: must equal gpus_per_worker (2)",
        ),
        (
            {"backend": "mpi", "num_workers": 2, "global_batch_size": 60, "mpi": {"slots_per_worker": 3}},
            "data.num_shards: must be ≥ the 6 training processes",
        ),
    ],
)
def test_distribution_mode_combinations(tmp_path, training, expected):
    found = problems(make_spec(str(tmp_path), training=training))
    assert any(p.startswith(expected) for p in found), found


def test_valid_distribution_modes(tmp_path):
    ps = load_spec(make_spec(str(tmp_path), training={"strategy": "parameter_server", "num_ps": 1})).training
    assert ps.replicas == 1 and ps.data_readers == 2
    mpi = load_spec(make_spec(str(tmp_path), training={"backend": "mpi", "mpi": {"slots_per_worker": 2}})).training
    assert mpi.replicas == 4 and mpi.mpi_settings.scale_learning_rate


def test_a_spec_reads_the_same_whether_or_not_the_validating_machine_has_mpirun(tmp_path, monkeypatch):
    """The dag-processor and a worker read one YAML alike: the Horovod controller's default is left to the
    launcher (tests/operators/plan/test_plan.py)."""
    spec = make_spec(str(tmp_path), training={"backend": "mpi"})
    with_mpirun = load_spec(spec)
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun here
    assert load_spec(spec) == with_mpirun and with_mpirun.training.mpi_settings.controller is None


def test_elastic_training_continues_only_at_sizes_that_keep_the_global_batch(tmp_path):
    def training(**fields):
        return load_spec(make_spec(str(tmp_path), training=fields)).training

    assert not training().elastic and training().elastic_sizes == (2,)
    assert training(num_workers=4, min_workers=1, global_batch_size=64).elastic_sizes == (4, 2, 1)  # not 3
    assert training(
        num_workers=3, min_workers=1, global_batch_size=96, strategy="parameter_server", num_ps=1
    ).elastic_sizes == (3, 2, 1)  # each step runs on one worker: any count keeps it
    assert problems(make_spec(str(tmp_path), training={"num_workers": 2, "min_workers": 3})) == [
        "training.min_workers: at most num_workers (2), got 3"
    ]
    uneven = {"num_workers": 4, "min_workers": 3, "global_batch_size": 64}
    assert problems(make_spec(str(tmp_path), training=uneven)) == [
        "training.min_workers: no worker count from 3 to 3 splits global_batch_size 64 evenly across its "
        "replicas; lower min_workers or pick a global batch size they divide"
    ]
