"""The exported serving signature: raw features by name (strings as strings, NaN for a missing number, lists padded
with ""), the task's outputs, and in a fresh process the training-time path's predictions, unseen categories and
missing values included."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

FEATURES = [
    {"name": "age", "kind": "numeric", "shape": []},
    {"name": "size", "kind": "numeric", "shape": [2]},
    {"name": "sex", "kind": "categorical", "dtype": "string"},
    {"name": "pclass", "kind": "categorical", "dtype": "int64"},
    {"name": "tags", "kind": "categorical_list", "dtype": "string"},
]
LABELS = {
    "multiclass": {"task": "multiclass", "classes": ["Adelie", "Chinstrap", "Gentoo"], "std": None},
    "binary": {"task": "binary", "classes": ["no", "yes"], "std": None},
    "regression": {"task": "regression", "classes": None, "mean": 3900.0, "std": 3100.0},
}
ROWS = {  # unseen values ('unseen', 7, 'zzz'), missing ones (NaN, '', an empty list), and a list padded with ''
    "age": np.array([22.0, np.nan, 80.0, np.nan], np.float32),
    "size": np.array([[1.0, 2.0], [np.nan, 0.5], [3.0, np.nan], [0.0, 0.0]], np.float32),
    "sex": np.array([b"male", b"", b"unseen", b"female"]),
    "pclass": np.array([1, 3, 7, 2], np.int64),
    "tags": np.array([[b"a", b"b"], [b"", b""], [b"zzz", b""], [b"c", b"a"]]),
}
ONE_ROW_NO_TAGS = {k: v[1:2] for k, v in ROWS.items()} | {"tags": np.zeros((1, 0), "S1")}

SERVE_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
import tensorflow as tf

path, out, *batches = sys.argv[1:]
signature = tf.saved_model.load(path).signatures["serving_default"]
results = {}
for i, batch in enumerate(batches):
    for name, value in signature(**{k: tf.constant(v) for k, v in np.load(batch).items()}).items():
        results[f"{i}.{name}"] = value.numpy().astype(bytes) if value.dtype == tf.string else value.numpy()
np.savez(out, **results)
"""


def contract_model(label: dict):
    """A model as docs/tabular.md's contract has it, written here until trainer.models lands: raw inputs by
    feature name, lookups and embeddings inside, the task's output (regression in target units)."""
    import keras
    import tensorflow as tf

    class RawInputModel(keras.Model):
        def __init__(self):
            super().__init__()
            self.sex = keras.layers.StringLookup(vocabulary=["male", "female", ""], num_oov_indices=1)
            self.pclass = keras.layers.IntegerLookup(vocabulary=[1, 2, 3], num_oov_indices=1)
            self.tags = keras.layers.StringLookup(vocabulary=["a", "b", "c"], num_oov_indices=1, mask_token="")
            self.sex_embedding, self.pclass_embedding = keras.layers.Embedding(4, 3), keras.layers.Embedding(4, 2)
            self.tags_embedding = keras.layers.Embedding(5, 3)
            self.out = keras.layers.Dense(len(label["classes"]) if label["task"] == "multiclass" else 1)

        def call(self, f):
            numeric = tf.concat([f["age"][:, None] / 50, f["size"]], axis=1)
            present = tf.cast(self.tags(f["tags"]) > 0, tf.float32)[..., None]
            tags = tf.reduce_sum(self.tags_embedding(self.tags(f["tags"])) * present, 1)
            x = tf.concat(
                [
                    tf.where(tf.math.is_nan(numeric), tf.zeros_like(numeric), numeric),
                    self.sex_embedding(self.sex(f["sex"])),
                    self.pclass_embedding(self.pclass(f["pclass"])),
                    tags / tf.maximum(tf.reduce_sum(present, 1), 1.0),
                ],
                axis=1,
            )
            logits = self.out(x)
            if label["task"] == "multiclass":
                return tf.nn.softmax(logits)
            return tf.sigmoid(logits) if label["task"] == "binary" else logits * label["std"] + label["mean"]

    model = RawInputModel()
    model({k: tf.constant(v) for k, v in ROWS.items()})
    return model


@pytest.mark.parametrize("task", ["multiclass", "binary", "regression"])
def test_raw_rows_through_the_loaded_signature_in_a_fresh_process_give_the_training_time_predictions(tmp_path, task):
    import tensorflow as tf

    from tfdist.trainer.export import serving_inputs, serving_module, serving_outputs

    manifest = {"features": FEATURES, "label": LABELS[task]}
    model = contract_model(manifest["label"])
    module = serving_module(tf, model, manifest)
    tf.saved_model.save(module, str(tmp_path / "model"), signatures={"serving_default": module.serve})
    batches = []
    for i, rows in enumerate((ROWS, ONE_ROW_NO_TAGS)):
        batches.append(str(tmp_path / f"rows-{i}.npz"))
        np.savez(batches[-1], **rows)
    out = str(tmp_path / "served.npz")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run(
        [sys.executable, "-c", SERVE_IN_A_FRESH_PROCESS, str(tmp_path / "model"), out, *batches], check=True, env=env
    )
    served = dict(np.load(out))

    outputs = serving_outputs(manifest["label"])
    assert {k.split(".", 1)[1] for k in served} == set(outputs)
    for i, rows in enumerate((ROWS, ONE_ROW_NO_TAGS)):
        trained = model({k: tf.constant(v) for k, v in rows.items()}).numpy()
        main = {"multiclass": "probabilities", "binary": "probability", "regression": "prediction"}[task]
        expected = trained if task == "multiclass" else trained.reshape(-1)
        assert served[f"{i}.{main}"].shape == expected.shape
        np.testing.assert_allclose(served[f"{i}.{main}"], expected, rtol=1e-6, atol=1e-6)
        if task == "multiclass":
            names = np.array(manifest["label"]["classes"], dtype=bytes)
            assert (served[f"{i}.classes"] == names[expected.argmax(axis=1)]).all()

    signature = tf.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
    declared = {
        name: (spec.dtype.name, spec.shape.as_list()) for name, spec in signature.structured_input_signature[1].items()
    }
    assert declared == {i["name"]: (i["dtype"], i["shape"]) for i in serving_inputs(manifest)}
    assert declared["tags"] == ("string", [None, None]) and declared["pclass"] == ("int64", [None])
    assert declared["size"] == ("float32", [None, 2]) and declared["age"] == ("float32", [None])
