"""Tabular data for the trainer's tests: rows with a planted signal (numeric features with missing values, string,
int64, hashed and list categorical features; a binary, regression or multiclass label), written as the run's
prepared data exactly as docs/tabular.md ("Formats") says prepare_data writes it: tf.train.Example shards,
vocabularies and a version-4 manifest. It stands in for prepare_data until that writes categorical data."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter

import numpy as np

from tfdist.contract import MANIFEST, read_json, registry, write_json_atomic
from tfdist.spec import load_spec
from tfdist.spec.model import embedding_dim

COUNTRIES = ["de", "fr", "us", "uk", "jp", "br", "in", "es", "it", "nl", "se", "pl"]
DEVICES = ["ios", "android", "web", "tv", "car"]
STORES = [101, 102, 103, 104, 105]
ITEMS = [f"item{i}" for i in range(30)]
FEATURES = [
    {"name": "age", "missing_indicator": True},
    {"name": "scores", "shape": [2]},
    {"name": "country", "kind": "categorical", "vocabulary": {"max_tokens": 10, "oov_buckets": 2}},
    {"name": "device", "kind": "categorical", "hash_buckets": 1000},
    {"name": "store", "kind": "categorical", "dtype": "int64"},
    {"name": "recent", "kind": "categorical_list", "combiner": "mean", "max_values": 4},
]
LABELS = {
    "binary": {"name": "y", "task": "binary"},
    "regression": {"name": "y", "task": "regression"},
    "multiclass": {"name": "y", "classes": ["low", "mid", "high"]},
}
VALIDATION = {
    "binary": {"thresholds": {"auc": {"lower": 0.5}}},
    "regression": {"thresholds": {"rmse": {"upper": 1000}}},
    "multiclass": {"thresholds": {"accuracy": {"lower": 0.3}}},
}


def data_section(task: str, features: list[dict] | None = None) -> dict:
    """The spec's data section for these rows (shards written by ``write_prepared``, not read from the source)."""
    return {
        "source": "{artifact_root}/raw/tabular/{date}/*.tfrecord",
        "format": "tfrecord",
        "features": features or FEATURES,
        "label": LABELS[task],
        "num_shards": 4,
    }


def rows(n: int, seed: int, countries: list[str] = COUNTRIES) -> dict[str, list]:
    """``n`` rows: each feature's raw values (None: missing) and the signal the labels are drawn from."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, len(countries) + 1)
    country = rng.choice(countries, n, p=weights / weights.sum()).tolist()
    country = [c if rng.random() > 0.05 else None for c in country]
    device = rng.choice(DEVICES, n).tolist()
    store = [s if rng.random() > 0.03 else None for s in rng.choice(STORES, n).tolist()]
    recent = [rng.choice(ITEMS, rng.integers(0, 5), replace=False).tolist() for _ in range(n)]
    age = rng.normal(40, 12, n)
    scores = rng.normal(0, 1, (n, 2))
    effect = dict(zip(countries, np.linspace(-2, 2, len(countries)), strict=True))
    signal = (
        (age - 40) / 12
        + scores[:, 0]
        + np.array([effect.get(c, 0.0) if c else 1.0 for c in country])
        + np.array([{"ios": 1.0, "android": -1.0}.get(d, 0.0) for d in device])
        + np.array([(s - 103) * 0.5 if s else 0.0 for s in store])
        + np.array([np.mean([int(i[4:]) / 15 - 1 for i in r]) if r else 0.0 for r in recent])
    )
    return {
        "age": [None if rng.random() < 0.1 else float(a) for a in age],
        "scores": scores.tolist(),
        "country": country,
        "device": device,
        "store": store,
        "recent": recent,
        "signal": signal.tolist(),
        "noise": rng.random(n).tolist(),
    }


def labels(task: str, data: dict) -> list:
    signal, noise = np.array(data["signal"]), np.array(data["noise"])
    if task == "binary":
        return (noise < 1 / (1 + np.exp(-2 * signal))).astype(int).tolist()
    if task == "regression":
        return (50 + 10 * signal + 2 * (noise - 0.5)).tolist()
    return [["low", "mid", "high"][k] for k in np.digitize(signal, [-1, 1])]


def vocabulary(values: list[str], max_tokens: int, min_count: int) -> list[str]:
    """The most frequent values (ties in UTF-8 byte order) seen at least ``min_count`` times, at most
    ``max_tokens``."""
    counts = Counter(values)
    ranked = sorted((v for v in counts if counts[v] >= min_count), key=lambda v: (-counts[v], v.encode()))
    return ranked[:max_tokens]


def token(value) -> str:
    return "" if value is None else str(value)


def write_prepared(data_dir: str, spec_dict: dict, n: int = 3000, seed: int = 0, **row_options) -> dict:
    """Write ``n`` rows as the run's prepared data in ``data_dir``; the manifest."""
    import tensorflow as tf

    from tfdist.trainer.data import MANIFEST_VERSION, shard_name

    spec = load_spec(spec_dict)
    d, task = spec.data, spec.data.label.task
    data = rows(n, seed, **row_options)
    data["label"] = labels(task, data)
    os.makedirs(os.path.join(data_dir, "vocabularies"))
    rng = np.random.default_rng(seed + 1)
    is_eval, shard = rng.random(n) < d.eval_fraction, rng.integers(0, d.num_shards, n)
    features = [entry(data_dir, f, data) for f in d.features]
    label = label_entry(d.label, data["label"], ~is_eval)
    manifest = {
        "version": MANIFEST_VERSION,
        "input_fingerprint": hashlib.sha256(json.dumps([spec_dict["data"], n, seed]).encode()).hexdigest(),
        "features": features,
        "label": label,
        "eval_fraction": d.eval_fraction,
        "stats": {
            f.name: {
                "mean": np.nanmean(values(data, f.name)[~is_eval], axis=0).tolist(),
                "variance": np.nanvar(values(data, f.name)[~is_eval], axis=0).tolist(),
            }
            for f in d.numeric_features
        },
    }
    if task != "regression":
        index = {c: i for i, c in enumerate(label["classes"])}
        manifest["class_counts"] = np.bincount([index[str(y)] for y in data["label"]], minlength=len(index)).tolist()
    for split, rows_of in (("train", ~is_eval), ("eval", is_eval)):
        shards = []
        for k in range(d.num_shards):
            name = shard_name(split, k, d.num_shards)
            chosen = np.flatnonzero(rows_of & (shard == k))
            with tf.io.TFRecordWriter(os.path.join(data_dir, name)) as writer:
                for i in chosen:
                    writer.write(example(tf, d, label, data, i).SerializeToString(deterministic=True))
            content = open(os.path.join(data_dir, name), "rb").read()
            shards.append(
                {
                    "file": name,
                    "bytes": len(content),
                    "sha256": hashlib.sha256(content).hexdigest(),
                    "examples": len(chosen),
                }
            )
        manifest[split] = {"examples": sum(s["examples"] for s in shards), "shards": shards}
    write_json_atomic(os.path.join(data_dir, MANIFEST), manifest)
    return manifest


def values(data: dict, name: str) -> np.ndarray:
    """A numeric feature's values as [rows, size], NaN where missing."""
    return np.array([[np.nan] if v is None else np.atleast_1d(v) for v in data[name]], dtype=np.float64)


def entry(data_dir: str, f, data: dict) -> dict:
    """The feature's manifest entry (a vocabulary written beside it)."""
    if f.kind == "numeric":
        return {"name": f.name, "kind": "numeric", "shape": f.shape, "missing_indicator": f.missing_indicator}
    found = None
    ids = f.hash_buckets
    if f.encoding:
        seen = [token(v) for row in data[f.name] for v in (row if f.kind == "categorical_list" else [row])]
        tokens = vocabulary(seen, f.encoding.max_tokens, f.encoding.min_count)
        path = os.path.join("vocabularies", f"{f.name}.json")
        content = json.dumps(tokens).encode()
        with open(os.path.join(data_dir, path), "wb") as out:
            out.write(content)
        found = {"file": path, "size": len(tokens), "sha256": hashlib.sha256(content).hexdigest()}
        ids = f.encoding.oov_buckets + len(tokens)
    out = {
        "name": f.name,
        "kind": f.kind,
        "dtype": f.dtype,
        "ids": ids,
        "embedding_dim": embedding_dim(f, ids),
        "vocabulary": found,
        "oov_buckets": f.encoding.oov_buckets if f.encoding else None,
        "hash_buckets": f.hash_buckets,
    }
    if f.kind == "categorical_list":
        out |= {"combiner": f.combiner, "max_values": f.max_values}
    return out


def label_entry(label, targets: list, train: np.ndarray) -> dict:
    out = {"name": label.name, "task": label.task, "classes": None, "num_classes": None, "positive": None}
    if label.task == "regression":
        y = np.array(targets)[train]
        mean, std = (float(y.mean()), float(y.std())) if label.standardize else (0.0, 1.0)
        return out | {"stored": "value", "mean": mean, "std": std}
    if label.task == "binary":
        return out | {"stored": "binary", "classes": ["0", "1"], "num_classes": 2, "positive": "1"}
    return out | {"stored": "name", "classes": label.classes, "num_classes": len(label.classes)}


def example(tf, d, label: dict, data: dict, i: int):
    """Row ``i`` as a tf.train.Example, as the contract says."""
    ex = tf.train.Example()
    for f in d.features:
        value = data[f.name][i]
        feature = ex.features.feature[f.name]
        if f.kind == "numeric":
            feature.float_list.value[:] = [np.nan] * f.size if value is None else np.atleast_1d(value).tolist()
        elif f.kind == "categorical":
            feature.bytes_list.value[:] = [token(value).encode()]
        else:
            feature.bytes_list.value[:] = [token(v).encode() for v in value]
    y = data["label"][i]
    target = ex.features.feature[label["name"]]
    if label["stored"] == "value":
        target.float_list.value[:] = [y]
    elif label["stored"] == "name":
        target.bytes_list.value[:] = [y.encode()]
    else:
        target.int64_list.value[:] = [int(y)]
    return ex


def publish(plan, version: int) -> str:
    """What a warm start reads of a published version, as export leaves it: the training checkpoint, the
    vocabularies and metadata.json (a stand-in for the export stage until it serves categorical features)."""
    from tfdist.trainer.export import keep_checkpoint

    result, run = read_json(plan.layout.result("train")), read_json(plan.layout.run_file)
    path = os.path.join(plan.model_dir, str(version))
    keep_checkpoint(result["checkpoint"], registry.warm_start_checkpoint(path))
    shutil.copytree(os.path.join(plan.layout.data_dir, "vocabularies"), os.path.join(path, registry.VOCABULARIES))
    write_json_atomic(
        registry.metadata_file(path),
        {
            "version": version,
            "run_id": run["run_id"],
            "data_interval_end": run["data_interval_end"],
            "train_metrics": result["metrics"],
            "parent": None,
        },
    )
    return path
