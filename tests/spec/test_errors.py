"""An invalid spec as one line per problem, each naming its field path and what is allowed
(tfdist.spec.errors)."""

from __future__ import annotations

import pytest

from tests.support.specs import make_spec
from tfdist.spec import SpecError, load_spec
from tfdist.spec.errors import validated
from tfdist.spec.export import ExportSpec


def problems(spec: dict) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    return err.value.problems


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


def test_the_message_names_the_origin_and_each_problem_on_a_line_of_its_own():
    error = SpecError(["a.b: wrong", "c: missing"], "spec file /x.yaml")
    assert str(error) == "Invalid pipeline spec file /x.yaml:\n  a.b: wrong\n  c: missing"
    assert error.problems == ["a.b: wrong", "c: missing"] and isinstance(error, ValueError)


def test_a_spec_that_is_no_mapping_is_refused_as_a_whole():
    with pytest.raises(SpecError) as err:
        validated(ExportSpec, ["model_name", "m"], "spec")
    assert err.value.problems == ["<spec>: must be a mapping of fields, got list"]


def test_a_problem_in_a_list_item_and_behind_a_union_tag_is_named_by_the_input_s_own_keys(tmp_path):
    features = [{"name": "pixel", "shape": [64]}, {"name": "colour", "kind": "categorical", "hash_buckets": 1}]
    assert problems(make_spec(str(tmp_path), data={"features": features})) == [
        "data.features[1].hash_buckets: Input should be greater than or equal to 2 (got 1)"
    ]
    spec = make_spec(str(tmp_path))
    del spec["model"]["family"]
    assert problems(spec) == ["model.family: required field is missing"]


def test_an_unknown_feature_kind_is_named_by_its_kind_field(tmp_path):
    assert problems(make_spec(str(tmp_path), data={"features": [{"name": "x", "kind": "text"}]})) == [
        "data.features[0].kind: Input should be 'numeric', 'categorical' or 'categorical_list' (got 'text')"
    ]
