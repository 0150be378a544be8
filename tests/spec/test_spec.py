"""The spec model: field-named errors, unknown keys rejected, defaults resolved, round trip."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.specs import make_spec
from tfdist.spec import Spec, SpecError, field_doc, load_spec


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
        ({"training": {"epochs": 1001}}, "training.epochs: Input should be less than or equal to 1000 (got 1001)"),
        ({"training": {"backend": "spark"}}, "training.backend: Input should be 'tf' or 'mpi' (got 'spark')"),
        (
            {"data": {"format": "avro"}},
            "data.format: Input should be 'csv', 'jsonl', 'npz', 'parquet' or 'tfrecord' (got 'avro')",
        ),
        ({"data": {"eval_fraction": 1.5}}, "data.eval_fraction: Input should be less than 1 (got 1.5)"),
        (
            {"model": {"hidden_units": [64, 0]}},
            "model.hidden_units[1]: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            {"model": {"family": "transformer"}},
            "model.family: Input should be 'mlp', 'wide_deep', 'cnn' or 'custom' (got 'transformer')",
        ),
        ({"model": {"family": None}}, "model.family: Input should be 'mlp', 'wide_deep', 'cnn' or 'custom'"),
        ({"model": {"family": "custom", "factory": "not a path"}}, "model.factory: String should match pattern"),
        ({"schedule": "every night"}, "schedule: not a valid cron expression"),
        ({"artifact_root": "relative/dir"}, "artifact_root: must be an absolute path"),
        ({"data": {"source": "/raw/{week}/*.csv"}}, "data.source: unknown placeholder {week}"),
        ({"validation": {"thresholds": {"accuracy": {}}}}, "validation.thresholds.accuracy: give 'lower', 'upper'"),
        (
            {"validation": {"change_thresholds": {"loss": {"direction": "down"}}}},
            "validation.change_thresholds.loss.direction: Input should be 'higher_is_better' or 'lower_is_better'",
        ),
        ({"validation": {"on_failure": "ignore"}}, "validation.on_failure: Input should be 'fail' or 'skip'"),
        ({"export": {"model_name": "m", "keep_versions": 0}}, "export.keep_versions: Input should be greater"),
    ],
)
def test_invalid_field_is_named(tmp_path, sections, expected):
    found = problems(make_spec(str(tmp_path), **sections))
    assert any(p.startswith(expected) for p in found), found


def test_missing_required_fields(tmp_path):
    spec = make_spec(str(tmp_path))
    del spec["export"], spec["data"]["format"]
    assert sorted(problems(spec)) == ["data.format: required field is missing", "export: required field is missing"]


def test_error_message_names_the_origin(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    with pytest.raises(SpecError, match=f"Invalid pipeline spec file {path}"):
        load_spec(path)


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


CUSTOM = {"family": "custom", "factory": "tests.fixtures.custom_model:small_classifier", "kwargs": {"units": 8}}


@pytest.mark.parametrize(
    "path, sections, reason",
    [
        ("model.factory", {"model": CUSTOM}, "could name code, a path"),
        ("model.kwargs.units", {"model": CUSTOM}, "could name code, a path"),
        ("artifact_root", {}, "could name code, a path"),
        ("data.source", {}, "could name code, a path"),
        ("training.mpi.extra_args", {}, "could name code, a path"),
        ("training.pool", {}, "could name code, a path"),
        ("training.launcher", {}, "chooses the machines"),
        ("export.root", {}, "what is published and which versions are deleted"),
        ("export.keep_versions", {}, "what is published and which versions are deleted"),
        ("validation.thresholds.accuracy.lower", {}, "the gate that decides what is published"),
        ("validation.allow_unvalidated", {}, "the gate that decides what is published"),
        ("data.eval_fraction", {}, "held-out data the gate scores"),
        ("training.timeout_minutes", {}, "when its file is parsed"),
        ("retries.train", {}, "when its file is parsed"),
        ("max_active_runs", {}, "when its file is parsed"),
    ],
)
def test_fields_naming_code_paths_or_arguments_are_never_overridable(tmp_path, path, sections, reason):
    (problem,) = problems(make_spec(str(tmp_path), overridable=[path], **sections))
    assert problem.startswith(f"overridable: {path!r} cannot be overridden by whoever triggers a run: "), problem
    assert reason in problem and problem.endswith("only the DAG file sets it")


def test_numbers_and_choices_stay_overridable(tmp_path):
    paths = [
        "training.epochs",
        "model.learning_rate",
        "training.backend",
        "training.num_workers",
        "model.optimizer",
        "training.seed",
        "model.hidden_units",
        "data.window",
    ]
    assert load_spec(make_spec(str(tmp_path), overridable=paths)).overridable == paths


def test_override_policy_is_a_property_of_each_fields_type_and_marker():
    """Whatever fields are added later: free text, lists of text, mappings and dates are never overridable;
    every overridable field is a number, a yes/no value or a fixed choice, and has a description."""
    from tfdist.spec.overrides import FREE_FORM, _policies

    seen = 0
    for path, section, reason in _policies(Spec):
        annotation = repr(section.model_fields[path.rsplit(".", 1)[-1]].annotation)
        if any(word in annotation for word in ("str", "Any", "dict", "datetime")) and "Literal" not in annotation:
            assert reason, f"{path} ({annotation}) is overridable"
        if reason is None:
            seen += 1
            assert field_doc(section, path.rsplit(".", 1)[-1]), f"{path} has no description for the trigger form"
        elif reason == FREE_FORM:
            assert "Literal" not in annotation and not re.fullmatch(r"<class '(int|float|bool)'>", annotation), path
    assert seen >= 20


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


KUBERNETES = {
    "pods": {"image": "registry.example.com/tfdist-worker:2.21", "node_selector": {"pool": "cpu"}},
    "roles": {"prepare": {"cpu": "2"}},
    "artifact_volume": {"claim_name": "artifacts"},
}
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


def test_a_runs_overrides_keep_each_roles_own_pod_settings(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), overridable=["training.epochs"], kubernetes=KUBERNETES))
    changed = spec.with_overrides({"training.epochs": 2})
    assert changed.kubernetes.for_role("prepare") == spec.kubernetes.for_role("prepare")
    assert changed.kubernetes.for_role("prepare").image == KUBERNETES["pods"]["image"]
    written = spec.to_json_dict()
    assert changed.to_json_dict() == {**written, "training": {**written["training"], "epochs": 2}}
