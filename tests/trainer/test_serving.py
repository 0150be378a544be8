"""The exported serving signature, on the spec's real model (``build_model``) over data the prepare stage prepared
(tests/trainer/tabular.py: numbers with missing values, a vector, strings, hashed int64 ids, lists): raw features by
name (strings as strings, int64 ids as int64, NaN for a missing number, lists padded with ""), the task's outputs,
in a fresh process the training-time path's predictions (the Keras model given int64 ids as their stored strings;
unseen categories and missing values included), and the skew check export runs on every eval example."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.trainer import tabular
from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import read_record
from tfdist.trainer.data import MISSING_INT64

pytestmark = pytest.mark.e2e
TASKS = ("multiclass", "binary", "regression")
NAN = float("nan")
ROWS = {  # unseen values ('Atlantis', 99999, 'durian'), missing ones (NaN, '', MISSING_INT64, an empty list)
    "age": np.array([31.5, NAN, 80.0, NAN], np.float32),
    "pos": np.array([[0.1, -1.0], [NAN, 0.5], [2.0, NAN], [0.0, 0.0]], np.float32),
    "city": np.array([v.encode() for v in ["Zürich", "", "Atlantis", "東京"]]),
    "zip": np.array([1003, MISSING_INT64, 99999, 1010], np.int64),
    "items": np.array(
        [[v.encode() for v in row] for row in [["tea", "milk"], ["", ""], ["durian", ""], ["café", "jam"]]]
    ),
}
ONE_ROW_EMPTY_LIST = {k: v[1:2] for k, v in ROWS.items()} | {"items": np.zeros((1, 0), "S1")}
BATCHES = (ROWS, ONE_ROW_EMPTY_LIST)
STORED_ZIPS = np.array([b"1003", b"", b"99999", b"1010"])
"""ROWS' zip as the shards hold it, and the Keras model takes it (its decimal string; missing: "")."""


def as_trained(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch of BATCHES as the training-time path gives it to the Keras model."""
    return rows | {"zip": STORED_ZIPS[[list(ROWS["zip"]).index(z) for z in rows["zip"]]]}


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


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(task)``: (spec, manifest, data dir, the spec's model built untrained, its SavedModel as export
    writes it), the table prepared once per task by the prepare stage."""
    import tensorflow as tf

    from tfdist.trainer.export import serving_module
    from tfdist.trainer.models import build_model
    from tfdist.trainer.runtime import load_spec

    root = str(tmp_path_factory.mktemp("serving"))
    source = tabular.partitions(root, "csv", tabular.table(600))
    done = {}

    def export(task: str):
        if task not in done:
            data = tabular.data_spec("csv", task)
            prepared, data_dir = tabular.prepare(root, task, data, source)
            assert prepared.returncode == 0, prepared.stderr[-3000:]
            spec = load_spec(os.path.join(root, task, "spec.json"))
            manifest = read_record(os.path.join(data_dir, "manifest.json"), Manifest)
            model = build_model(spec, manifest, data_dir)
            module, path = serving_module(tf, model, manifest), os.path.join(root, task, "model")
            tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
            done[task] = (spec, manifest, data_dir, model, path)
        return done[task]

    return export


def serve(path: str, tmp_path) -> dict[str, np.ndarray]:
    """The SavedModel's signature on each of BATCHES, in a fresh process: {"<batch>.<output>": values}."""
    files = []
    for i, rows in enumerate(BATCHES):
        files.append(str(tmp_path / f"rows-{i}.npz"))
        np.savez(files[-1], **rows)
    out = str(tmp_path / "served.npz")
    argv = [sys.executable, "-c", SERVE_IN_A_FRESH_PROCESS, path, out, *files]
    subprocess.run(argv, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return dict(np.load(out))


@pytest.mark.parametrize("task", TASKS)
def test_raw_rows_through_the_loaded_signature_in_a_fresh_process_give_the_training_time_predictions(
    exported, tmp_path, task
):
    import tensorflow as tf

    from tfdist.trainer.export import serving_inputs, serving_outputs
    from tfdist.trainer.models import OUTPUT

    _spec, manifest, _data_dir, model, path = exported(task)
    served = serve(path, tmp_path)
    assert {k.split(".", 1)[1] for k in served} == set(serving_outputs(manifest.label))
    for i, rows in enumerate(BATCHES):
        trained = model({k: tf.constant(v) for k, v in as_trained(rows).items()}, training=False).numpy()
        expected = trained if task == "multiclass" else trained.reshape(-1)
        assert served[f"{i}.{OUTPUT[task]}"].shape == expected.shape
        np.testing.assert_allclose(served[f"{i}.{OUTPUT[task]}"], expected, rtol=1e-6, atol=1e-6)
        if task == "multiclass":
            names = np.array(manifest.label.classes, dtype=bytes)
            assert (served[f"{i}.classes"] == names[expected.argmax(axis=1)]).all()
    assert len(np.unique(served[f"0.{OUTPUT[task]}"], axis=0)) == len(ROWS["age"])  # each row its own prediction

    signature = tf.saved_model.load(path).signatures["serving_default"]
    declared = {n: (s.dtype.name, s.shape.as_list()) for n, s in signature.structured_input_signature[1].items()}
    assert declared == {i.name: (i.dtype, i.shape) for i in serving_inputs(manifest)}
    assert declared == {
        "age": ("float32", [None]),
        "pos": ("float32", [None, 2]),
        "city": ("string", [None]),
        "zip": ("int64", [None]),
        "items": ("string", [None, None]),
    }


def test_export_refuses_a_saved_model_whose_outputs_are_not_the_trained_models(exported, capsys):
    import tensorflow as tf

    from tfdist.trainer.export import serving_check
    from tfdist.trainer.models import build_model

    spec, manifest, data_dir, model, path = exported("binary")
    checked = serving_check(tf, spec, model, path, data_dir, manifest)
    assert checked.skew.examples == manifest.eval.examples
    assert checked.skew.max_abs_difference <= 1e-6 and sorted(checked.metrics) == ["accuracy", "auc", "loss"]

    other = build_model(spec, manifest, data_dir)  # another draw of the initial weights
    with pytest.raises(SystemExit) as refused:
        serving_check(tf, spec, other, path, data_dir, manifest)
    assert refused.value.code == EXIT_REFUSED
    assert "training/serving skew: the reloaded SavedModel's probability differ from the trained model's" in (
        capsys.readouterr().err
    )
