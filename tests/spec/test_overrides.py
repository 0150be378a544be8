"""Which spec fields whoever triggers a run may override, read from each field's type and ``AuthorOnly`` marker;
the value at a dotted path; and the field docs the trigger form shows (tfdist.spec.overrides)."""

from __future__ import annotations

import re

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import Spec, field_doc, field_value, load_spec, override_policy, override_refusal
from tfdist.spec.overrides import FREE_FORM, with_values

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


def test_a_refusal_of_a_section_covers_every_path_below_it():
    assert override_refusal(Spec, "training.epochs") is None
    assert override_refusal(Spec, "validation.thresholds.accuracy.lower") == (
        "the gate that decides what is published is the author's"
    )
    assert override_refusal(Spec, "export") == override_refusal(Spec, "export.model_name")
    assert override_refusal(Spec, "no.such.field") is None
    assert override_policy(Spec)["training.epochs"] is None and override_policy(Spec)["artifact_root"] == FREE_FORM


def test_the_value_at_a_dotted_path(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), validation={"thresholds": {"accuracy": {"lower": 0.9}}}))
    assert field_value(spec, "training.epochs") == 4
    assert field_value(spec, "validation.thresholds.accuracy.lower") == 0.9
    with pytest.raises(AttributeError):
        field_value(spec, "training.no_such_field")


def test_values_are_set_at_their_paths_and_missing_sections_added():
    data = {"training": {"epochs": 4}}
    assert with_values(data, {"training.epochs": 2, "model.learning_rate": 0.1, "kubernetes.namespace": "ml"}) == {
        "training": {"epochs": 2},
        "model": {"learning_rate": 0.1},
        "kubernetes": {"namespace": "ml"},
    }


def test_a_fields_doc_is_the_docstring_below_it_in_the_class_declaring_it():
    from tfdist.spec.data import CategoricalFeature
    from tfdist.spec.training import TrainingSpec

    assert field_doc(Spec, "name") == "Becomes the dag_id."
    assert field_doc(CategoricalFeature, "dtype").startswith("The values' type, and the serving signature's")
    assert field_doc(CategoricalFeature, "kind") == "'categorical'."
    assert field_doc(TrainingSpec, "no_such_field") is None
