"""The spec model: field-named errors, unknown keys rejected, defaults resolved, round trip."""

from __future__ import annotations

import pytest
import yaml

from operators.spec import Spec, SpecError, load_spec
from tests.conftest import make_spec


def problems(spec: dict) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    return err.value.problems


def test_valid_spec_round_trips(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    again = load_spec(spec.to_json_dict())
    assert again == spec
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_json_dict()))
    assert load_spec(path) == spec


def test_defaults_are_filled(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    assert spec.training.backend == "tf" and spec.training.launcher == "local"
    assert spec.export_root == str(tmp_path / "models")
    assert spec.start_date.tzinfo is not None


@pytest.mark.parametrize(
    "sections, expected",
    [
        ({"training": {"num_workers": 0}}, "training.num_workers: Input should be greater than or equal to 1 (got 0)"),
        ({"training": {"backend": "spark"}}, "training.backend: Input should be 'tf' or 'mpi' (got 'spark')"),
        ({"data": {"format": "parquet"}}, "data.format: Input should be 'csv' or 'npz' (got 'parquet')"),
        ({"data": {"eval_fraction": 1.5}}, "data.eval_fraction: Input should be less than 1 (got 1.5)"),
        ({"model": {"hidden_units": [64, 0]}},
         "model.hidden_units[1]: Input should be greater than or equal to 1 (got 0)"),
        ({"model": {"family": "transformer"}}, "model: Input tag 'transformer' found using 'family' does not match"),
        ({"model": {"family": "custom", "factory": "not a path"}}, "model.factory: String should match pattern"),
        ({"schedule": "every night"}, "schedule: not a valid cron expression"),
        ({"artifact_root": "relative/dir"}, "artifact_root: must be an absolute path"),
        ({"data": {"source": "/raw/{day}/*.csv"}}, "data.source: unknown placeholder {day}"),
        ({"validation": {"thresholds": {"accuracy": {}}}}, "validation.thresholds.accuracy: give 'lower', 'upper'"),
        ({"validation": {"change_thresholds": {"loss": {"direction": "down"}}}},
         "validation.change_thresholds.loss.direction: Input should be 'higher_is_better' or 'lower_is_better'"),
        ({"validation": {"on_failure": "ignore"}}, "validation.on_failure: Input should be 'fail' or 'skip'"),
        ({"export": {"model_name": "m", "keep_versions": 0}}, "export.keep_versions: Input should be greater"),
    ],
)
def test_invalid_field_is_named(tmp_path, sections, expected):
    found = problems(make_spec(str(tmp_path), **sections))
    assert any(p.startswith(expected) for p in found), found


@pytest.mark.parametrize(
    "sections, expected",
    [
        ({"training": {"global_batch_size": 63}}, "training.global_batch_size: must be a multiple of the 2 replicas"),
        ({"training": {"num_workers": 8}}, "data.num_shards: must be ≥ the 8 training processes"),
        ({"validation": {"thresholds": {"auc": {"lower": 0.5}}}}, "validation.thresholds.auc: unknown metric"),
        ({"validation": {"change_thresholds": {"top_5_accuracy": {"direction": "higher_is_better"}}}},
         "validation.change_thresholds.top_5_accuracy: unknown metric"),
        ({"validation": {"checkpoint": {"mode": "best", "metric": "f1"}}},
         "validation.checkpoint.metric: unknown metric 'f1'"),
        ({"model": {"family": "cnn", "image_shape": [8, 8, 2]}}, "model.image_shape: [8, 8, 2] holds 128 values"),
    ],
)
def test_inconsistent_fields_are_named(tmp_path, sections, expected):
    found = problems(make_spec(str(tmp_path), **sections))
    assert any(p.startswith(expected) for p in found), found


def test_unknown_keys_are_rejected_with_a_suggestion(tmp_path):
    spec = make_spec(str(tmp_path), training={"num_worker": 2})
    assert problems(spec) == [
        "training: unknown key 'num_worker' (did you mean 'num_workers'?); allowed keys: backend, strategy, launcher, "
        "num_workers, num_ps, mpi, gpus_per_worker, cpus_per_worker, epochs, global_batch_size, "
        "checkpoint_every_steps, keep_checkpoints, seed, timeout_minutes, pool, pool_slots"
    ]
    spec = make_spec(str(tmp_path), colour="blue")
    assert problems(spec)[0].startswith("<spec>: unknown key 'colour'")


def test_missing_required_fields(tmp_path):
    spec = make_spec(str(tmp_path))
    del spec["export"], spec["data"]["format"]
    assert sorted(problems(spec)) == ["data.format: required field is missing", "export: required field is missing"]


def test_error_message_names_the_origin(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    with pytest.raises(SpecError, match=f"Invalid pipeline spec file {path}"):
        load_spec(path)


def test_json_schema_is_available():
    assert "training" in Spec.model_json_schema()["properties"]


@pytest.mark.parametrize(
    "training, expected",
    [
        ({"backend": "mpi", "strategy": "parameter_server"}, "training.strategy: 'parameter_server' needs backend 'tf'"),
        ({"backend": "mpi", "num_ps": 1}, "training.num_ps: parameter servers need backend 'tf'"),
        ({"num_ps": 1}, "training.num_ps: parameter servers need strategy 'parameter_server'"),
        ({"strategy": "parameter_server"}, "training.num_ps: strategy 'parameter_server' needs at least 1"),
        ({"mpi": {"controller": "gloo"}}, "training.mpi: Horovod settings need backend 'mpi'"),
        ({"backend": "mpi", "mpi": {"controller": "tcp"}}, "training.mpi.controller: Input should be 'mpi' or 'gloo'"),
        ({"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": ["-np", "4"]}},
         "training.mpi.extra_args: '-np' is set by the launcher"),
        ({"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": ["--mca btl\nx"]}},
         "training.mpi.extra_args[0]: String should match pattern"),
        ({"backend": "mpi", "mpi": {"controller": "gloo", "extra_args": ["--bind-to", "core"]}},
         "training.mpi.extra_args: mpirun arguments need controller 'mpi'"),
        ({"backend": "mpi", "gpus_per_worker": 2, "mpi": {"slots_per_worker": 1}},
         "training.mpi.slots_per_worker: must equal gpus_per_worker (2)"),
        ({"backend": "mpi", "num_workers": 2, "global_batch_size": 60, "mpi": {"slots_per_worker": 3}},
         "data.num_shards: must be ≥ the 6 training processes"),
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
    default = load_spec(make_spec(str(tmp_path), training={"backend": "mpi"})).training
    assert default.mpi_settings.controller in ("mpi", "gloo")


def test_overrides_are_validated_against_the_same_model(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), overridable=["training.epochs", "model.learning_rate",
                                                           "training.backend"]))
    changed = spec.with_overrides({"training.epochs": 2, "model.learning_rate": 0.01, "training.backend": "mpi"})
    assert (changed.training.epochs, changed.model.learning_rate, changed.training.backend) == (2, 0.01, "mpi")
    assert spec.training.epochs == 4  # the DAG's own spec is untouched
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.epochs": 0})
    assert err.value.problems == ["training.epochs: Input should be greater than or equal to 1 (got 0)"]
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.num_workers": 3})
    assert err.value.problems[0].startswith("training.num_workers: not overridable in this pipeline; overridable: "
                                            "training.epochs, model.learning_rate, training.backend")


def test_overridable_must_name_single_fields(tmp_path):
    assert problems(make_spec(str(tmp_path), overridable=["training"]))[0].startswith(
        "overridable: 'training' is not a field")
    assert problems(make_spec(str(tmp_path), overridable=["training.epoch"]))[0].startswith(
        "overridable: 'training.epoch' is not a field")
