"""The data section (tfdist.spec.data): features and their encodings, the label and its task, and the rules
between them; each refusal names its field."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import (
    CategoricalFeature,
    CategoricalListFeature,
    DataSpec,
    Label,
    NumericFeature,
    Vocabulary,
    label_value,
)

PIXELS = {"name": "pixel", "shape": [64]}


def data(tmp_path, **fields) -> dict:
    return make_spec(str(tmp_path), data=fields)


def test_a_label_value_is_its_canonical_string():
    assert [label_value(v) for v in (True, False, 1, "Yes", 0)] == ["true", "false", "1", "Yes", "0"]


def test_the_features_by_kind_and_the_numeric_input_size():
    spec = DataSpec.model_validate(
        {
            "source": "/raw/{date}.csv",
            "format": "csv",
            "features": [
                {"name": "pixel", "shape": [8, 8]},
                {"name": "age"},
                {"name": "city", "kind": "categorical", "hash_buckets": 100},
                {"name": "seen", "kind": "categorical_list"},
            ],
            "label": {"name": "label", "num_classes": 3},
        }
    )
    assert [f.name for f in spec.numeric_features] == ["pixel", "age"] and spec.input_size == 65
    city, seen = spec.categorical_features
    assert isinstance(city, CategoricalFeature) and isinstance(seen, CategoricalListFeature)
    assert (city.encoding, city.max_ids) == (None, 100)
    assert (seen.encoding, seen.max_ids) == (Vocabulary(), 10001)
    assert NumericFeature(name="x").size == 1


def test_a_labels_class_names_are_its_own_or_its_numbers():
    assert Label(classes=["cat", "dog"]).class_names == ["cat", "dog"]
    assert Label(num_classes=3).class_names == ["0", "1", "2"]
    assert Label().class_names is None and Label(task="regression").class_names is None


@pytest.mark.parametrize(
    "fields, problem",
    [
        (
            {"label": {"name": "label", "task": "regression", "num_classes": 3}},
            "data.label.num_classes: not a field of task 'regression' (it takes neither num_classes, classes nor "
            "positive)",
        ),
        (
            {"label": {"name": "label", "task": "binary", "num_classes": 2}},
            "data.label.num_classes: not a field of task 'binary' (it takes positive)",
        ),
        (
            {"label": {"name": "label", "classes": ["a", "b", "a"]}},
            "data.label.classes: each class once, got ['a', 'b', 'a']",
        ),
        (
            {"label": {"name": "label", "classes": ["a", "b"], "num_classes": 3}},
            "data.label.num_classes: 3, but classes names 2; drop one",
        ),
        (
            {"features": [PIXELS, {"name": "label"}]},
            "data: features and label must have distinct names, repeated: label",
        ),
        (
            {"features": [{"name": "c", "kind": "categorical", "hash_buckets": 8, "vocabulary": {}}]},
            "data.features 'c': give 'vocabulary' or 'hash_buckets', not both",
        ),
        (
            {"format": "npz", "features": [PIXELS, {"name": "c", "kind": "categorical"}]},
            "data.features 'c': categorical features need a format with strings and lists (csv, jsonl, parquet, "
            "tfrecord), not npz",
        ),
        (
            {"features": [{"name": "c", "kind": "categorical_list", "separator": ","}]},
            "data.features[0].separator: ',' cannot separate values inside a CSV cell; use e.g. '|' or ';'",
        ),
        (
            {"checks": {"bounds": {"features": {"age": {"lower": 0}}}}},
            "checks.bounds.features: age is not a numeric feature; numeric features: pixel",
        ),
        ({"source": "/raw/{date}/{minute}.csv"}, "data.source: unknown placeholder {minute}; allowed: {date}, {year}"),
    ],
)
def test_a_data_section_breaking_a_rule_is_refused_naming_the_field(tmp_path, fields, problem):
    found = problems(data(tmp_path, **fields))
    assert any(p.startswith(problem) or problem in p for p in found), found
