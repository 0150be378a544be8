"""Warm start across a changed vocabulary: two real training runs on data whose categorical values differ (some
countries gone, some new, the list's items in another order of frequency); the second starts from the first's
published version with each table's rows matched by token."""

from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pytest

from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tests.trainer import prepared_tables as tabular
from tfdist.contract.data_records import Manifest
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.publishing import registry

pytestmark = pytest.mark.e2e

WIDE_DEEP = {"family": "wide_deep", "hidden_units": [16], "learning_rate": 0.01}
TABLES = ("country_embedding", "country_linear")


def sections(countries: list[str], features: list[dict]) -> dict:
    """The run's sections: rows of ``countries`` (each such set a table of its own) with these features."""
    return {
        "data": tabular.data_section("binary", features, f"countries-{countries[0]}-{countries[-1]}"),
        "model": WIDE_DEEP,
        "training": {"num_workers": 1, "epochs": 2, "warm_start": "baseline"},
        "validation": tabular.VALIDATION["binary"],
    }


def prepared(root: str, run_id: str, day: dt.date, countries: list[str], features: list[dict] = tabular.FEATURES):
    plan = plan_for(root, run_id, day, **sections(countries, features))
    tabular.prepare(plan, 2000, countries=countries)
    return plan


def vocabulary(plan, name: str) -> list[str]:
    with open(os.path.join(plan.layout.data_dir, "vocabularies", f"{name}.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """Day 1 trained cold on countries 0-9 and published."""
    root = str(tmp_path_factory.mktemp("vocabulary"))
    plan = prepared(root, "vocab_day1", DAY - dt.timedelta(days=1), tabular.COUNTRIES[:10])
    for task_id in ("train", "evaluate", "export"):
        run(plan, task_id)
    return plan


def version_of(plan) -> int:
    return read_json(plan.layout.result("export"))["version"]


def restored_in_process(plan, parent_plan):
    """The run's model and optimizer restored from ``parent_plan``'s version as the train stage restores them (its
    record), with the weights they had before, and the parent's model and optimizer from its checkpoint."""
    import keras
    import tensorflow as tf

    from tfdist.trainer.models import build_model, build_optimizer
    from tfdist.trainer.warm_start import ParentRestore

    def model_and_optimizer(p, checkpoint=None):
        manifest = read_record(p.layout.manifest_file, Manifest)
        model = build_model(p.spec, manifest, p.layout.data_dir)
        optimizer = build_optimizer(p.spec)
        optimizer.build(model.trainable_variables)
        if checkpoint:
            tf.train.Checkpoint(model=model, optimizer=optimizer).read(checkpoint).expect_partial()
        return model, optimizer, manifest

    keras.utils.set_random_seed(7)
    model, optimizer, manifest = model_and_optimizer(plan)
    before = {table: rows_of(model, optimizer, table) for table in TABLES}
    record_file = os.path.join(plan.layout.run_dir, "in_process", "warm_start.json")
    with ParentRestore(plan.spec, plan.layout.run_file, plan.model_dir, record_file) as parent:
        record = parent.restore(tf, model, {"optimizer": optimizer}, manifest, plan.layout.data_dir)
    published = os.path.join(plan.model_dir, str(version_of(parent_plan)))
    theirs = model_and_optimizer(parent_plan, registry.warm_start_checkpoint(published))
    return record.model_dump(mode="json"), (model, optimizer), before, theirs[:2]


def rows_of(model, optimizer, table: str) -> dict[str, np.ndarray]:
    """The table's weights and its Adam slots, by kind."""
    weights = model.get_layer(table).embeddings
    slots = {v.path.rsplit("_", 1)[1]: v.numpy() for v in optimizer.variables if f"/{table}_embeddings_" in v.path}
    return {"weights": weights.numpy(), **slots}


def test_rows_of_values_in_both_vocabularies_are_carried_new_ones_start_fresh(parent):
    root = parent.spec.artifact_root
    plan = prepared(root, "vocab_day2", DAY, tabular.COUNTRIES[3:])  # countries 0-2 gone, 10 and 11 new
    ours, theirs = vocabulary(plan, "country"), vocabulary(parent, "country")
    common = [t for t in ours if t in theirs]
    assert len(common) < len(ours) and len(common) < len(theirs) and ours[: len(common)] != theirs[: len(common)]

    record, (model, optimizer), before, (parent_model, parent_optimizer) = restored_in_process(plan, parent)
    assert record["restored"] == "model and optimizer", record["cold_start"]
    expected = {"carried": len(common), "new": len(ours) - len(common), "dropped": len(theirs) - len(common)}
    assert record["vocabularies"]["country"] == {**expected, "oov_rows": "carried"}
    assert record["vocabularies"]["recent"]["new"] == 0  # the same items, ranked anew
    for table in TABLES:
        now, was = rows_of(model, optimizer, table), rows_of(parent_model, parent_optimizer, table)
        assert sorted(now) == ["momentum", "velocity", "weights"]
        initial = before[table]
        for kind in now:
            np.testing.assert_array_equal(now[kind][:2], was[kind][:2])  # the 2 out-of-vocabulary rows
            for i, token in enumerate(ours):
                source = was[kind][2 + theirs.index(token)] if token in theirs else initial[kind][2 + i]
                np.testing.assert_array_equal(now[kind][2 + i], source, err_msg=f"{table} {kind} {token!r}")
    # the other variables are the parent's as they were
    np.testing.assert_array_equal(model.get_layer("hidden_0").kernel.numpy(), parent_model.get_layer("hidden_0").kernel)

    # the train stage itself: its record, and training goes on from there
    run(plan, "train")
    stage_record = read_json(plan.layout.warm_start_file)
    assert stage_record["parent"]["version"] == version_of(parent)
    assert stage_record["vocabularies"] == record["vocabularies"]
    assert read_json(plan.layout.result("train"))["metrics"]["auc"] > 0.8


def test_other_out_of_vocabulary_buckets_start_those_rows_fresh_and_another_width_starts_cold(parent):
    root = parent.spec.artifact_root

    def with_country(**settings) -> list[dict]:
        return [dict(f, **settings) if f["name"] == "country" else f for f in tabular.FEATURES]

    three = {"max_tokens": 10, "oov_buckets": 3}
    plan = prepared(root, "vocab_oov", DAY, tabular.COUNTRIES[:10], with_country(vocabulary=three, embedding_dim=6))
    record, (model, _), before, (parent_model, _) = restored_in_process(plan, parent)
    assert record["vocabularies"]["country"] == {
        "carried": 10,
        "new": 0,
        "dropped": 0,
        "oov_rows": "fresh (2 buckets in the parent, 3 here)",
    }
    now = model.get_layer("country_embedding").embeddings.numpy()
    np.testing.assert_array_equal(now[:3], before["country_embedding"]["weights"][:3])
    np.testing.assert_array_equal(now[3:], parent_model.get_layer("country_embedding").embeddings.numpy()[2:])

    # by default the width follows the ids (13 now: 7 wide, 6 in the parent): rows cannot be carried
    plan = prepared(root, "vocab_wider", DAY, tabular.COUNTRIES[:10], with_country(vocabulary=three))
    record, *_ = restored_in_process(plan, parent)
    assert record["restored"] is None and "country_embedding/embeddings" in record["cold_start"]
    assert "[13, 7] here, [12, 6] in the parent" in record["cold_start"]
