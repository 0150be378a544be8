"""The root of the spec (tfdist.spec.model): defaults resolved, what ``Spec`` derives from its fields, its JSON
schema, a run's overrides validated again, and spec.json read back by a worker as the same spec."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.spec.test_kubernetes import KUBERNETES
from tests.support.specs import make_spec
from tfdist.spec import Spec, SpecError, load_spec


def test_defaults_are_filled(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    assert spec.training.backend == "tf" and spec.training.launcher == "local"
    assert spec.export_root == str(tmp_path / "models")
    assert spec.start_date.tzinfo is not None


@pytest.mark.e2e
def test_json_schema_checks_what_the_model_checks(tmp_path):
    """The published JSON schema (for editors and the trigger form) refuses what the model refuses."""
    import jsonschema

    schema = Spec.model_json_schema()
    valid = load_spec(make_spec(str(tmp_path))).to_json_dict()
    jsonschema.validate(valid, schema)
    for bad in (
        make_spec(str(tmp_path), colour="blue"),
        make_spec(str(tmp_path), training={"num_workers": 0}),
        make_spec(str(tmp_path), training={"backend": "spark"}),
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**valid, **{k: v for k, v in bad.items() if k in ("colour", "training")}}, schema)


def test_overrides_are_validated_against_the_same_model(tmp_path):
    spec = load_spec(
        make_spec(str(tmp_path), overridable=["training.epochs", "model.learning_rate", "training.backend"])
    )
    changed = spec.with_overrides({"training.epochs": 2, "model.learning_rate": 0.01, "training.backend": "mpi"})
    assert (changed.training.epochs, changed.model.learning_rate, changed.training.backend) == (2, 0.01, "mpi")
    assert spec.training.epochs == 4  # the DAG's own spec is untouched
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.epochs": 0})
    assert err.value.problems == ["training.epochs: Input should be greater than or equal to 1 (got 0)"]
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.epochs": 10**9})  # the trigger's: timeout_minutes is not overridable
    assert err.value.problems == ["training.epochs: Input should be less than or equal to 1000 (got 1000000000)"]
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.num_workers": 3})
    assert err.value.problems[0].startswith(
        "training.num_workers: not overridable in this pipeline; overridable: "
        "training.epochs, model.learning_rate, training.backend"
    )


def test_a_run_may_not_start_more_processes_than_its_pool_slots(tmp_path):
    spec = load_spec(
        make_spec(
            str(tmp_path),
            overridable=["training.num_workers"],
            training={"pool": "training", "pool_slots": 2, "global_batch_size": 48},
        )
    )
    with pytest.raises(SpecError) as err:
        spec.with_overrides({"training.num_workers": 3})
    assert err.value.problems == [
        "training: this run would start 3 training processes but its train task holds 2 slot(s) of pool 'training' "
        "(training.pool_slots, fixed when the DAG file is parsed)"
    ]
    assert spec.with_overrides({"training.num_workers": 1}).training.num_workers == 1


WRITTEN_SPECS = {
    "defaults": {},
    "parameter server": {"training": {"strategy": "parameter_server", "num_ps": 1}},
    "horovod without its section": {"training": {"backend": "mpi"}},
    "horovod": {"training": {"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": ["--bind-to", "core"]}}},
    "custom model": {
        "model": {
            "family": "custom",
            "factory": "no_such_package.models:build",
            "kwargs": {"decay": 1e-05, "layers": [8, 4]},
        }
    },
    "cnn": {"model": {"family": "cnn", "image_shape": [8, 8, 1]}},
    "kubernetes": {"kubernetes": KUBERNETES},
    "zoned start, overridable": {"start_date": "2026-11-01T02:00:00+02:00", "overridable": ["training.epochs"]},
}


@pytest.mark.parametrize("sections", WRITTEN_SPECS.values(), ids=WRITTEN_SPECS)
def test_a_worker_reads_spec_json_as_the_same_spec(tmp_path, monkeypatch, sections):
    """Validated again where the stages run (another machine or a pod: no mpirun, another environment, the
    custom model's package not importable), spec.json is the same spec, and it and its data section dump to
    the bytes spec.json holds (what the version's spec digest and the input fingerprint hash)."""
    from tfdist.infra.jsonfiles import digest_json, read_json, write_json_atomic
    from tfdist.trainer.runtime import load_spec as worker_spec

    spec = load_spec(make_spec(str(tmp_path), **sections))
    write_json_atomic(path := str(tmp_path / "spec.json"), spec.to_json_dict())
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", "/elsewhere")
    monkeypatch.setenv("HOME", "/nonexistent")
    again, written = worker_spec(path), read_json(path)
    assert again == spec and digest_json(again.to_json_dict()) == digest_json(written)
    assert digest_json(again.data.model_dump(mode="json")) == digest_json(written["data"])


def test_the_loss_metrics_and_directions_come_from_the_task_unless_the_model_gives_them(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    assert (spec.loss, spec.metrics, spec.checkpoint_selection) == (
        "sparse_categorical_crossentropy",
        ("accuracy",),
        ("accuracy", "higher_is_better"),
    )
    binary = load_spec(
        make_spec(
            str(tmp_path),
            data={"label": {"name": "label", "task": "binary"}},
            model={"family": "mlp", "metrics": ["log_loss", "auc"]},
            validation={
                "thresholds": {},
                "change_thresholds": {"auc": {}, "log_loss": {"direction": "higher_is_better"}},
            },
        )
    )
    assert (binary.loss, binary.metrics, binary.checkpoint_selection) == (
        "binary_crossentropy",
        ("log_loss", "auc"),
        ("log_loss", "lower_is_better"),
    )
    assert (binary.change_direction("auc"), binary.change_direction("log_loss")) == (
        "higher_is_better",
        "higher_is_better",
    )
    assert binary.direction("loss") == "lower_is_better" and binary.direction("calibration") is None


def test_the_schedule_a_cron_or_assets_gives_the_cron_and_the_partitions(tmp_path):
    assert load_spec(make_spec(str(tmp_path), schedule="0 2 * * *")).cron == "0 2 * * *"
    assets = {"assets": ["s3://lake/raw/digits"], "cron": "@hourly"}
    spec = load_spec(make_spec(str(tmp_path), schedule=assets))
    assert (spec.cron, spec.partitioned) == ("@hourly", None)
    partitioned = load_spec(
        make_spec(str(tmp_path), schedule={"assets": ["s3://lake/raw/digits"], "partitions": "day"})
    )
    assert (partitioned.cron, partitioned.partitioned) == (None, "day")
    assert load_spec(make_spec(str(tmp_path), schedule=None)).cron is None


def test_a_naive_start_date_is_read_in_the_dags_zone_and_an_unknown_zone_is_refused(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), timezone="Asia/Tokyo"))
    assert spec.start_date == dt.datetime(2026, 10, 31, 15, tzinfo=dt.UTC) and str(spec.zone) == "Asia/Tokyo"
    with pytest.raises(SpecError) as err:
        load_spec(make_spec(str(tmp_path), timezone="Mars/Olympus"))
    assert err.value.problems == [
        "timezone: not an IANA time zone name (e.g. 'Asia/Tokyo', 'America/New_York', 'UTC'), got 'Mars/Olympus'"
    ]


def test_the_export_root_is_its_own_else_the_artifact_roots_models(tmp_path):
    own = load_spec(make_spec(str(tmp_path), export={"model_name": "m", "root": "s3://bucket/models/"}))
    assert own.export_root == "s3://bucket/models"
    assert load_spec(make_spec("s3://bucket/art")).export_root == "s3://bucket/art/models"
