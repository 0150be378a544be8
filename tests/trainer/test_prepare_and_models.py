"""The worker runtime's data preparation (CSV and NPZ, reuse, refusal to overwrite) and model building."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.data_records import LabelEntry, Manifest, Normalization, NumericEntry
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record
from tfdist.contract.stages import worker_command
from tfdist.infra.jsonfiles import read_json, write_json_atomic


def prepare(spec: dict, out: str, *sources: str) -> subprocess.CompletedProcess:
    spec_file = os.path.join(os.path.dirname(out), "spec.json")
    write_json_atomic(spec_file, spec)
    argv = [
        *worker_command(sys.executable, "prepare"),
        "--spec",
        spec_file,
        "--out",
        out,
        "--result",
        os.path.join(os.path.dirname(out), "prepare_data", "result.json"),
    ]
    for source in sources:
        argv += ["--source", source]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.fixture
def npz_input(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "raw" / "part-0.npz"
    path.parent.mkdir()
    np.savez(
        path, image=rng.random((300, 4, 4)).astype(np.float32), size=rng.random(300), label=rng.integers(0, 3, 300)
    )
    return str(path)


def npz_spec(root: str) -> dict:
    from tfdist.spec import load_spec

    return load_spec(
        make_spec(
            root,
            data={
                "format": "npz",
                "source": "unused",
                "features": [{"name": "image", "shape": [4, 4]}, {"name": "size"}],
                "label": {"name": "label", "num_classes": 3},
                "num_shards": 2,
                "eval_fraction": 0.25,
            },
        )
    ).to_json_dict()


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_npz_input_is_split_sharded_and_described(tmp_path, npz_input):
    out = str(tmp_path / "run" / "data")
    result = prepare(npz_spec(str(tmp_path)), out, npz_input)
    assert result.returncode == 0, result.stderr
    manifest = read_json(os.path.join(out, MANIFEST))
    assert manifest["train"]["examples"] + manifest["eval"]["examples"] == 300
    assert 0.15 < manifest["eval"]["examples"] / 300 < 0.35
    assert [s["file"] for s in manifest["train"]["shards"]] == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert len(manifest["stats"]["image"]["mean"]) == 16 and len(manifest["stats"]["size"]["mean"]) == 1
    assert sorted(os.listdir(out)) == sorted(
        [MANIFEST] + [s["file"] for s in manifest["train"]["shards"] + manifest["eval"]["shards"]]
    )

    again = prepare(npz_spec(str(tmp_path)), out, npz_input)
    assert again.returncode == 0 and "reusing prepared data" in again.stdout
    assert read_json(os.path.join(out, MANIFEST)) == manifest

    np.savez(npz_input, image=np.zeros((10, 4, 4)), size=np.zeros(10), label=np.zeros(10, int))
    refused = prepare(npz_spec(str(tmp_path)), out, npz_input)
    assert refused.returncode == EXIT_REFUSED and "holds data prepared from other input" in refused.stderr
    assert read_json(os.path.join(out, MANIFEST)) == manifest  # nothing already produced is lost


@pytest.mark.e2e
def test_shards_hold_every_input_row_exactly_and_throughput_is_reported(tmp_path, npz_input):
    import tensorflow as tf

    from tfdist.trainer.data import parse_fn, shard_paths

    out = str(tmp_path / "run" / "data")
    result = prepare(npz_spec(str(tmp_path)), out, npz_input)
    assert result.returncode == 0, result.stderr
    line = r"^throughput: 300 records, [\d.]+ MB in [\d.]+s: \d+ records/s, [\d.]+ MB/s$"
    assert re.search(line, result.stdout, re.M)
    manifest = read_record(os.path.join(out, MANIFEST), Manifest)
    files = shard_paths(out, manifest, "train") + shard_paths(out, manifest, "eval")
    features, labels = parse_fn(tf, manifest)(tf.data.TFRecordDataset(files).batch(1000).get_single_element())
    written = np.column_stack([features["image"].numpy().reshape(-1, 16), features["size"], labels])
    with np.load(npz_input) as raw:
        given = np.column_stack([raw["image"].reshape(-1, 16), raw["size"].astype(np.float32), raw["label"]])
    assert np.array_equal(written[np.lexsort(written.T)], given[np.lexsort(given.T)])


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_missing_input_and_columns_fail_clearly(tmp_path, digits_root):
    spec = make_spec(str(tmp_path))
    from tfdist.spec import load_spec

    resolved = load_spec(spec).to_json_dict()
    missing = prepare(resolved, str(tmp_path / "a" / "data"), str(tmp_path / "nothing" / "*.csv"))
    assert missing.returncode == 1 and "no input files match" in missing.stderr
    resolved["data"]["features"] = [{"name": "pix", "shape": [64]}]
    csv = os.path.join(digits_root, "raw", "digits", "2026-11-20", "digits.csv")
    wrong = prepare(resolved, str(tmp_path / "b" / "data"), csv)
    assert wrong.returncode != 0 and "missing columns ['pix_0'" in wrong.stderr
    assert not os.path.exists(tmp_path / "b" / "data")


def test_custom_model_factory_gets_normalized_features(tmp_path):
    from tfdist.spec import load_spec
    from tfdist.trainer.models import build_model

    spec = load_spec(
        make_spec(
            str(tmp_path),
            model={
                "family": "custom",
                "factory": "tests.fixtures.custom_model:small_classifier",
                "kwargs": {"units": 8},
            },
        )
    )
    label = {"name": "label", "stored": "index", "positive": None, "mean": None, "std": None}
    manifest = Manifest.model_construct(  # what build_model reads of a manifest
        features=[NumericEntry(name="pixel", kind="numeric", shape=[64], missing_indicator=False)],
        label=LabelEntry(**label, task="multiclass", classes=[str(i) for i in range(10)], num_classes=10),
        stats={"pixel": Normalization(mean=[8.0] * 64, variance=[16.0] * 64)},
    )
    model = build_model(spec, manifest, str(tmp_path))
    probabilities = np.asarray(model({"pixel": np.full((3, 64), 8.0, np.float32)}))
    assert probabilities.shape == (3, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert any(layer.name == "pixel_norm" for layer in model.layers)
