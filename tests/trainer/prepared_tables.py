"""Tabular rows for the trainer's tests: a planted signal (numeric features with missing values, string, int64,
hashed and list categorical features; a binary, regression or multiclass label), written as a day's JSON lines and
prepared by the prepare_data stage."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from tests.support.plans import prepare_once
from tfdist.contract.data_records import Manifest
from tfdist.contract.records import read_record

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


def data_section(task: str, features: list[dict] | None = None, table: str | None = None) -> dict:
    """The spec's data section for these rows, read from ``raw/<table>/<date>/`` (``prepare`` writes them; the
    table is the task's unless named)."""
    return {
        "source": "{artifact_root}/raw/" + (table or task) + "/{date}/*.jsonl",
        "format": "jsonl",
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


def prepare(plan, n: int = 3000, seed: int = 0, **row_options) -> Manifest:
    """Write ``n`` rows of the plan's task as the JSON lines file of the day its source names, then prepare them
    with the prepare_data stage once per rows and data section (``prepare_once``); the manifest. A day's file is
    written once: other rows there are refused."""
    task, label = plan.spec.data.label.task, plan.spec.data.label.name
    data = rows(n, seed, **row_options)
    data["label"] = labels(task, data)
    columns = [f["name"] for f in FEATURES]
    content = "".join(
        json.dumps({**{name: data[name][i] for name in columns}, label: data["label"][i]}) + "\n" for i in range(n)
    )
    (pattern,) = plan.stage("prepare_data").args.source
    path = os.path.join(os.path.dirname(pattern), "rows.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            assert f.read() == content, f"{path} holds other rows: give these another table (data_section)"
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content)
    prepare_once(plan, hashlib.sha256(content.encode()).hexdigest())
    return read_record(plan.layout.manifest_file, Manifest)
