"""operators/params.py: the spec's overridable fields as the trigger form's typed Params."""

from __future__ import annotations

from tests.support.specs import make_spec
from tfdist.operators.params import _properties, dag_params, param_schema, warm_up
from tfdist.spec import load_spec, section_models


def test_trigger_form_params_carry_the_spec_models_types_bounds_and_docs():
    from tfdist.operators.dag import build_dag
    from tfdist.spec import load_spec
    from tfdist.spec.training import MAX_EPOCHS

    spec = load_spec(make_spec("/tmp/tfdist-unused", overridable=["training.epochs", "training.backend"]))
    params = build_dag(spec).params
    epochs, backend = params.get_param("training.epochs"), params.get_param("training.backend")
    assert (epochs.value, epochs.schema["type"], epochs.schema["minimum"], epochs.schema["maximum"]) == (
        4,
        "integer",
        1,
        MAX_EPOCHS,
    )
    assert epochs.description.startswith("Passes over the training shards, at most 1,000; ``timeout_minutes``")
    assert backend.schema["enum"] == ["tf", "mpi"]
    assert backend.description == "'tf': a TF cluster from TF_CONFIG; 'mpi': Horovod ranks."


def test_an_optional_field_allows_null_and_only_the_json_schema_keys_a_param_reads_are_kept():
    prop = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None, "title": "Pool slots"}
    assert param_schema(prop) == {"minimum": 1, "type": ["integer", "null"]}
    assert param_schema({"type": "string", "pattern": "^a", "examples": ["a"]}, "Its doc.") == {
        "pattern": "^a",
        "type": "string",
        "description": "Its doc.",
    }


def test_each_overridable_field_is_one_param_holding_the_specs_value():
    spec = load_spec(make_spec("/tmp/tfdist-unused", overridable=["training.epochs", "model.learning_rate"]))
    params = dag_params(spec)
    assert sorted(params) == ["model.learning_rate", "training.epochs"]
    assert (params["model.learning_rate"].value, params["model.learning_rate"].schema["type"]) == (0.003, "number")


def test_warming_up_builds_every_sections_schema_once():
    warm_up()
    before = _properties.cache_info()
    warm_up()
    after = _properties.cache_info()
    assert after.currsize == before.currsize >= len(section_models()) and after.misses == before.misses
