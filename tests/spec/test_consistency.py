"""The rules between the sections of a spec (``tfdist.spec.consistency``): each broken one is refused, naming its
field."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import load_spec

BINARY = {"checks": {}}


TOP_5 = {"thresholds": {"top_5_accuracy": {"lower": 0.5}}}


CATEGORICAL = {"features": [{"name": "pixels", "shape": [64]}, {"name": "country", "kind": "categorical"}]}


@pytest.mark.parametrize(
    "sections, expected",
    [
        ({"training": {"global_batch_size": 63}}, "training.global_batch_size: must be a multiple of the 2 replicas"),
        ({"training": {"num_workers": 8}}, "data.num_shards: must be ≥ the 8 training processes"),
        ({"validation": {"thresholds": {"auc": {"lower": 0.5}}}}, "validation.thresholds.auc: unknown metric"),
        (
            {"validation": {"change_thresholds": {"top_5_accuracy": {"direction": "higher_is_better"}}}},
            "validation.change_thresholds.top_5_accuracy: unknown metric",
        ),
        (
            {"validation": {"checkpoint": {"mode": "best", "metric": "f1"}}},
            "validation.checkpoint.metric: unknown metric 'f1'",
        ),
        ({"model": {"family": "cnn", "image_shape": [8, 8, 2]}}, "model.image_shape: [8, 8, 2] holds 128 values"),
        (
            {"data": {**BINARY, "label": {"name": "label", "task": "binary"}}, "validation": TOP_5},
            "validation.thresholds.top_5_accuracy: unknown metric 'top_5_accuracy', not one of task 'binary'",
        ),
        (
            {"validation": {"thresholds": {"rmse": {"upper": 1}}}},
            "validation.thresholds.rmse: unknown metric 'rmse', not one of task 'multiclass': loss, accuracy",
        ),
        ({"model": {"family": "mlp", "metrics": ["auc"]}}, "model.metrics: 'auc' is not a metric of task 'multiclass'"),
        ({"model": {"family": "mlp", "loss": "huber"}}, "model.loss: 'huber' is not a loss of task 'multiclass'"),
        (
            {
                "data": {"features": [{"name": "pixels", "shape": [64], "missing_indicator": True}]},
                "model": {"family": "cnn", "image_shape": [8, 8, 1]},
            },
            "model.family: 'cnn' reshapes the numeric features into its image, which has no place for missing",
        ),
        (
            {"data": {**CATEGORICAL}, "model": {"family": "cnn", "image_shape": [8, 8, 1]}},
            "model.family: 'cnn' takes numeric features only, 'country' is categorical",
        ),
        (
            {
                "data": {**CATEGORICAL},
                "model": {"family": "wide_deep", "crosses": [{"features": ["country", "pixels"]}]},
            },
            "model.crosses[0].features: 'pixels' is not a categorical feature; categorical features: country",
        ),
        (
            {
                "data": {**BINARY, "label": {"name": "label", "task": "binary"}},
                "model": {"family": "mlp", "metrics": ["calibration"]},
                "validation": {"thresholds": {}, "change_thresholds": {"calibration": {"absolute": 0.1}}},
            },
            "validation.change_thresholds.calibration: calibration has no better direction",
        ),
    ],
)
def test_inconsistent_fields_are_named(tmp_path, sections, expected):
    if "data" in sections:
        sections["data"] = {**make_spec(str(tmp_path))["data"], **sections["data"]}
    found = problems(make_spec(str(tmp_path), **sections))
    assert any(p.startswith(expected) for p in found), found


def test_overridable_must_name_single_fields(tmp_path):
    assert problems(make_spec(str(tmp_path), overridable=["training"]))[0].startswith(
        "overridable: 'training' is not a field"
    )
    assert problems(make_spec(str(tmp_path), overridable=["training.epoch"]))[0].startswith(
        "overridable: 'training.epoch' is not a field"
    )


def test_a_spec_without_any_threshold_is_refused_unless_its_author_opts_out(tmp_path):
    spec = make_spec(str(tmp_path))
    del spec["validation"]
    (problem,) = problems(spec)
    assert problem.startswith("validation: no threshold is configured") and "{allow_unvalidated: true}" in problem
    assert "validation: {thresholds: {accuracy: {lower: 0.9}}}" in problem
    assert problems(make_spec(str(tmp_path), validation={"thresholds": {}}))[0].startswith("validation: no threshold")
    assert load_spec(make_spec(str(tmp_path), validation={"thresholds": {}, "allow_unvalidated": True}))
    change_only = {"thresholds": {}, "change_thresholds": {"loss": {"direction": "lower_is_better"}}}
    assert load_spec(make_spec(str(tmp_path), validation=change_only))
    assert problems(make_spec(str(tmp_path), validation={"allow_unvalidated": True}))[0].startswith(
        "validation.allow_unvalidated: only for a pipeline without thresholds"
    )
