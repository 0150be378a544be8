"""The model's preprocessing and families, in process, on rows prepared by prepare_data
(tests/trainer/prepared_tables.py): what each raw value becomes, the outputs by task, the names of the variables,
a custom factory's inputs, the parser's labels, and the train metrics' sums."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.plans import plan_for
from tests.support.specs import make_spec
from tests.trainer import prepared_tables as tabular
from tfdist.contract.data_records import Manifest
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.spec import load_spec

WIDE_DEEP = {"family": "wide_deep", "hidden_units": [8], "crosses": [{"features": ["country", "recent"]}]}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """``prepared(task, model)``: (spec, manifest, data dir) of 400 rows of ``task`` prepared once per task and
    features."""
    root = str(tmp_path_factory.mktemp("models"))
    done: dict[str, str] = {}

    def prepare(task: str, model: dict | None = None, features: list[dict] | None = None):
        sections = {"data": tabular.data_section(task, features), "validation": tabular.VALIDATION[task]}
        spec = make_spec(root, **sections, **({"model": model} if model else {}))
        key = f"{task}-{len(features or [])}"
        if key not in done:
            plan = plan_for(root, key, **sections)
            tabular.prepare(plan, 400)
            done[key] = plan.layout.data_dir
        return load_spec(spec), read_record(f"{done[key]}/manifest.json", Manifest), done[key]

    return prepare


def raw(**columns) -> dict:
    """A batch of raw inputs as the model takes them (docs/tabular.md): two rows unless given."""
    import tensorflow as tf

    batch = {
        "age": [30.0, float("nan")],
        "scores": [[0.0, 1.0], [1.0, float("nan")]],
        "country": ["de", "atlantis"],
        "device": ["ios", ""],
        "store": ["101", ""],
        "recent": [["item1", "item2"], ["", ""]],
        **columns,
    }
    dtypes = {"store": tf.string, "country": tf.string, "device": tf.string, "recent": tf.string}
    return {k: tf.constant(v, dtypes.get(k, tf.float32)) for k, v in batch.items()}


def output_of(model, layer: str, inputs: dict):
    import keras

    return np.asarray(keras.Model(model.inputs, model.get_layer(layer).output)(inputs))


@pytest.mark.e2e
def test_each_raw_value_becomes_what_the_manifest_says(prepared):
    from tfdist.trainer.models import build_model
    from tfdist.trainer.preprocessing import OOV_TOKEN

    spec, manifest, data_dir = prepared("binary")
    model = build_model(spec, manifest, data_dir)
    inputs = raw()
    age_stats = manifest.stats["age"]
    age = output_of(model, "age_normalized", inputs)
    expected = (30.0 - age_stats.mean[0]) / np.sqrt(age_stats.variance[0])
    np.testing.assert_allclose(age[:, 0], [expected, 0.0], rtol=1e-5)  # missing: the mean, normalized
    np.testing.assert_array_equal(output_of(model, "age_missing", inputs), [[0.0], [1.0]])
    assert output_of(model, "scores_normalized", inputs)[1, 1] == 0.0

    vocabulary = {f.name: tabular_vocabulary(data_dir, f.name) for f in manifest.with_vocabulary}
    country = output_of(model, "country_ids", inputs)
    assert country[0] == 2 + vocabulary["country"].index("de") and 0 <= country[1] < 2  # 2 OOV buckets by a hash
    assert OOV_TOKEN not in vocabulary["country"]
    store = output_of(model, "store_ids", inputs)  # int64 values as the shards hold them: decimal strings
    assert list(store) == [1 + vocabulary["store"].index("101"), 1 + vocabulary["store"].index("")]
    device = output_of(model, "device_ids", inputs)
    assert device.dtype == np.int32 and all(0 <= d < 1000 for d in device)
    recent = output_of(model, "recent_ids", inputs)  # a list's padding: -1
    assert recent.tolist() == [
        [1 + vocabulary["recent"].index("item1"), 1 + vocabulary["recent"].index("item2")],
        [-1, -1],
    ]
    # a list's embeddings averaged (an empty list: zeros), a tiny vocabulary one-hot
    table = model.get_layer("recent_embedding").embeddings.numpy()
    combined = output_of(model, "recent_embedding", inputs)
    np.testing.assert_allclose(combined[0], table[recent[0]].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(combined[1], 0.0)
    store_entry = next(f for f in manifest.with_vocabulary if f.name == "store")
    assert store_entry.embedding_dim == 0 and output_of(model, "store_onehot", inputs).shape == (2, store_entry.ids)

    probability = np.asarray(model(inputs))
    assert probability.shape == (2, 1) and ((probability > 0) & (probability < 1)).all()


def tabular_vocabulary(data_dir: str, name: str) -> list[str]:
    return read_json(f"{data_dir}/vocabularies/{name}.json")


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_a_list_summed_and_the_outputs_by_task(prepared):
    from tfdist.trainer.models import build_model

    features = [dict(f, combiner="sum") if f["name"] == "recent" else f for f in tabular.FEATURES]
    spec, manifest, data_dir = prepared("binary", features=features)
    model = build_model(spec, manifest, data_dir)
    inputs = raw(recent=[["item1", "item2", "item3"], ["item4", "", ""]])
    table = model.get_layer("recent_embedding").embeddings.numpy()
    ids = output_of(model, "recent_ids", inputs)
    np.testing.assert_allclose(output_of(model, "recent_embedding", inputs)[1], table[ids[1][0]], rtol=1e-6)
    np.testing.assert_allclose(output_of(model, "recent_embedding", inputs)[0], table[ids[0]].sum(axis=0), rtol=1e-5)

    spec, manifest, data_dir = prepared("regression", WIDE_DEEP)
    model = build_model(spec, manifest, data_dir)
    for layer in ("deep_logits", "numeric_linear"):
        model.get_layer(layer).kernel.assign(np.zeros(model.get_layer(layer).kernel.shape))
    predicted = np.asarray(model(raw()))  # every weight of the logits 0: the train rows' mean, in target units
    np.testing.assert_allclose(predicted, [[manifest.label.mean]] * 2, rtol=1e-5)
    assert model.output.name.startswith("prediction") or model.layers[-1].name == "prediction"

    spec, manifest, data_dir = prepared("multiclass", WIDE_DEEP)
    probabilities = np.asarray(build_model(spec, manifest, data_dir)(raw()))
    assert probabilities.shape == (2, 3) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-6)


@pytest.mark.e2e
def test_two_builds_name_every_variable_alike_and_restore_each_other(prepared, tmp_path):
    import tensorflow as tf

    from tfdist.trainer.models import build_model, restore_model

    spec, manifest, data_dir = prepared("binary", WIDE_DEEP)
    first, second = build_model(spec, manifest, data_dir), build_model(spec, manifest, data_dir)
    assert [v.path for v in first.weights] == [v.path for v in second.weights]
    assert {
        "country_embedding/embeddings",
        "country_linear/embeddings",
        "cross_country_x_recent_linear/embeddings",
    } <= {v.path for v in first.weights}
    saved = tf.train.Checkpoint(model=first, step=tf.Variable(7, dtype=tf.int64)).write(str(tmp_path / "ckpt"))
    restored, step = restore_model(tf, spec, manifest, data_dir, saved)
    assert step == 7
    np.testing.assert_array_equal(restored(raw()), first(raw()))


def factory_with_task(features, num_classes, task, feature_info, units=4):
    """A custom factory that takes ``task`` and ``feature_info``: records what it was given."""
    import keras

    factory_with_task.given = {"features": features, "num_classes": num_classes, "task": task, "info": feature_info}
    inputs = {n: keras.Input(shape=s, name=n, dtype=feature_info[n]["dtype"]) for n, s in features.items()}
    numeric = [inputs[n] for n, i in feature_info.items() if i["kind"] in ("numeric", "missing_indicator")]
    country = keras.layers.Embedding(feature_info["country"]["ids"], 3)(inputs["country"])
    x = keras.layers.Concatenate()([*numeric, country])
    return keras.Model(inputs, keras.layers.Dense(units)(keras.layers.Dense(num_classes)(x)))


@pytest.mark.e2e
def test_a_custom_factory_gets_the_preprocessed_inputs_and_their_metadata(prepared):
    from tfdist.trainer.models import build_model

    custom = {"family": "custom", "factory": "tests.trainer.test_models:factory_with_task", "kwargs": {"units": 1}}
    spec, manifest, data_dir = prepared("regression", custom)
    model = build_model(spec, manifest, data_dir)
    given = factory_with_task.given
    assert given["task"] == "regression" and given["num_classes"] == 1
    assert given["features"] == {
        "age": (1,),
        "age_missing": (1,),
        "scores": (2,),
        "country": (),
        "device": (),
        "store": (),
        "recent": (None,),
    }
    assert given["info"]["country"] == {
        "kind": "categorical",
        "dtype": "int32",
        "shape": (),
        "ids": 12,
        "embedding_dim": 6,
        "vocabulary_size": 10,
        "hash_buckets": None,
        "combiner": None,
    }
    assert given["info"]["recent"]["combiner"] == "mean" and given["info"]["device"]["hash_buckets"] == 1000
    assert model.layers[-1].name == "prediction"  # the factory's standardized output, de-standardized

    spec, manifest, data_dir = prepared("binary", {**custom, "kwargs": {"units": 2}})
    with pytest.raises(ValueError, match=r"returns outputs of shape \[None, 2\]; task 'binary' needs \[batch, 1\]"):
        build_model(spec, manifest, data_dir)


@pytest.mark.e2e
def test_the_parser_gives_labels_by_task_and_raw_inputs_by_kind(prepared):
    import tensorflow as tf

    from tfdist.trainer.data import parse_fn, shard_paths

    for task, dtype in (("multiclass", tf.int64), ("binary", tf.int64), ("regression", tf.float32)):
        _spec, manifest, data_dir = prepared(task)
        files = shard_paths(data_dir, manifest, "train") + shard_paths(data_dir, manifest, "eval")
        features, labels = parse_fn(tf, manifest)(tf.data.TFRecordDataset(files).batch(400).get_single_element())
        assert labels.dtype == dtype and labels.shape == (400,)
        data = tabular.rows(400, 0)
        expected = sorted(tabular.labels(task, data))
        if task == "multiclass":  # class names by the manifest's classes
            expected = sorted(manifest.label.class_names.index(y) for y in expected)
        np.testing.assert_allclose(sorted(labels.numpy()), expected, rtol=1e-6)
    assert features["recent"].dtype == tf.string and features["recent"].shape[1] == 4
    stored = [b"" if s is None else str(s).encode() for s in data["store"]]  # int64 ids as their decimal strings
    assert features["store"].dtype == tf.string and sorted(features["store"].numpy()) == sorted(stored)
    assert int(np.isnan(features["age"].numpy()).sum()) == sum(a is None for a in data["age"])


def test_auc_from_bucket_counts_summed_over_parts_is_the_whole_datas(prepared):
    """Counts summed over workers give the AUC of every example: that of the scores rounded to the buckets."""
    import tensorflow as tf
    from sklearn.metrics import roc_auc_score

    from tfdist.trainer.train_metrics import AUC_BUCKETS, TaskSums

    _spec, manifest, _ = prepared("binary")
    task = TaskSums(manifest.label, "binary_crossentropy")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 1000)
    probability = np.clip(rng.normal(0.3 + 0.4 * labels, 0.2), 0, 1).astype(np.float32)[:, None]
    parts = [task.sums(tf, tf.constant(labels[k::3]), tf.constant(probability[k::3])).numpy() for k in range(3)]
    metrics = task.metrics(np.sum(parts, axis=0), 1000)
    bucketed = np.minimum((probability[:, 0] * AUC_BUCKETS).astype(int), AUC_BUCKETS - 1)
    assert metrics["auc"] == pytest.approx(roc_auc_score(labels, bucketed), abs=1e-12)
    assert metrics["accuracy"] == pytest.approx(((probability[:, 0] >= 0.5) == labels).mean())
    assert task.metrics(parts[0], 334)["auc"] != pytest.approx(metrics["auc"], abs=1e-6)  # one worker's share: not it
