"""A table with every kind of field (numbers with missing values, a vector, strings with a missing one, integer
ids, lists, labels of each task), written in each input format as its users write them, and the data spec that
reads it."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.stages import worker_command
from tfdist.infra import storage
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.spec import load_spec

CITIES = ["Zürich", "Lyon", "東京", "Washington, D.C.", "Oslo", "Lima", 'a "quoted" one', ""]
ITEMS = ["tea", "milk", "café", "bread", "jam"]
SPECIES = ["Adelie", "Chinstrap", "Gentoo"]
FORMATS = ("csv", "jsonl", "parquet", "tfrecord")


def table(rows: int, seed: int = 7) -> dict[str, list]:
    """Columns of Python values, None where missing; skewed categories so that vocabularies have ties and a tail."""
    rng = np.random.default_rng(seed)
    city = rng.choice(len(CITIES), rows, p=[0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05])
    age = np.round(rng.normal(40, 12, rows), 1)
    pos = np.round(rng.normal(0, 1, (rows, 2)), 3)
    items = [
        None if rng.random() < 0.05 else [ITEMS[k] for k in rng.choice(len(ITEMS), rng.integers(0, 4))]
        for _ in range(rows)
    ]
    zip_code = rng.integers(1000, 1030, rows)
    return {
        "age": [None if rng.random() < 0.1 else float(a) for a in age],
        "pos": [[None if rng.random() < 0.05 else float(v) for v in p] for p in pos],
        "city": [CITIES[c] for c in city],
        "zip": [None if rng.random() < 0.05 else int(z) for z in zip_code],
        "items": items,
        "churn": ["yes" if rng.random() < 0.3 + 0.1 * (c == 0) else "no" for c in city],
        "price": [
            float(np.float32(round(100 + 3 * (a or 40) + 20 * (c == 1), 2))) for a, c in zip(age, city, strict=True)
        ],
        "species": [SPECIES[(c + int(a > 40)) % 3] for a, c in zip(age, city, strict=True)],
    }


FEATURES = [
    {"name": "age", "missing_indicator": True},
    {"name": "pos", "shape": [2]},
    {"name": "city", "kind": "categorical"},
    {"name": "zip", "kind": "categorical", "dtype": "int64", "hash_buckets": 64},
    {"name": "items", "kind": "categorical_list", "vocabulary": {"min_count": 2}},
]
LABELS = {
    "binary": {"name": "churn", "task": "binary", "positive": "yes"},
    "regression": {"name": "price", "task": "regression"},
    "multiclass": {"name": "species"},
}


def data_spec(fmt: str, task: str = "binary", **fields) -> dict:
    return {"format": fmt, "features": FEATURES, "label": LABELS[task], **fields}


def rows_of(columns: dict[str, list], rows: range | None = None) -> list[dict]:
    names = list(columns)
    return [{n: columns[n][i] for n in names} for i in rows or range(len(columns[names[0]]))]


def write_csv(path: str, columns: dict[str, list]) -> None:
    """Missing: an empty cell; the vector as pos_0, pos_1; the list joined by '|'."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["age", "pos_0", "pos_1", "city", "zip", "items", "churn", "price", "species"])
        for r in rows_of(columns):
            out.writerow(
                [
                    "" if r["age"] is None else r["age"],
                    *("" if v is None else v for v in r["pos"]),
                    r["city"],
                    "" if r["zip"] is None else r["zip"],
                    "|".join(r["items"] or []),
                    r["churn"],
                    r["price"],
                    r["species"],
                ]
            )


def write_jsonl(path: str, columns: dict[str, list]) -> None:
    """Missing: null, or the key left out (a missing zip)."""
    with open(path, "w") as f:
        for r in rows_of(columns):
            if r["zip"] is None:
                del r["zip"]
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_parquet(path: str, columns: dict[str, list], row_group_size: int | None = None) -> None:
    """Missing: null; the city column dictionary-encoded (as pandas writes a categorical)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)  # nulls where None; pos and items list columns
    city = table.schema.get_field_index("city")
    pq.write_table(table.set_column(city, "city", table["city"].dictionary_encode()), path, row_group_size)


def write_tfrecord(path: str, columns: dict[str, list]) -> None:
    """Missing numbers: NaN (age: the key left out); zip an int64_list; the binary label a bytes_list."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for r in rows_of(columns):
            example = tf.train.Example()
            feature = example.features.feature
            if r["age"] is not None:
                feature["age"].float_list.value[:] = [r["age"]]
            feature["pos"].float_list.value[:] = [math.nan if v is None else v for v in r["pos"]]
            feature["city"].bytes_list.value[:] = [r["city"].encode()]
            if r["zip"] is not None:
                feature["zip"].int64_list.value[:] = [r["zip"]]
            feature["items"].bytes_list.value[:] = [v.encode() for v in r["items"] or []]
            feature["churn"].bytes_list.value[:] = [r["churn"].encode()]
            feature["price"].float_list.value[:] = [r["price"]]
            feature["species"].bytes_list.value[:] = [r["species"].encode()]
            writer.write(example.SerializeToString())


WRITERS = {"csv": write_csv, "jsonl": write_jsonl, "parquet": write_parquet, "tfrecord": write_tfrecord}


def partitions(root: str, fmt: str, columns: dict[str, list], parts: int = 3) -> str:
    """The table as ``parts`` files of format ``fmt`` under ``root``; their glob."""
    folder = os.path.join(root, "raw", fmt)
    os.makedirs(folder, exist_ok=True)
    n = len(columns["city"])
    for k, rows in enumerate(np.array_split(np.arange(n), parts)):
        WRITERS[fmt](os.path.join(folder, f"part-{k}.{fmt}"), {c: [v[i] for i in rows] for c, v in columns.items()})
    return os.path.join(folder, f"*.{fmt}")


def prepare(
    root: str, name: str, data: dict, source: str, pods: int = 1, run_root: str | None = None, env: dict | None = None
):
    """Run the prepare stage in its own process (``pods``: as that many pods meeting in a directory of the run),
    its run directory under ``run_root`` (a path or a bucket's URL; default: ``root``); (the process (pod 0's),
    its output directory)."""
    validation = {"thresholds": {}, "allow_unvalidated": True}  # any task: only prepare runs
    spec = load_spec(make_spec(root, data={"source": "unused", **data}, validation=validation))
    run_dir = storage.join(run_root or root, name)
    out = storage.join(run_dir, "data")
    write_json_atomic(spec_file := storage.join(run_dir, "spec.json"), spec.to_json_dict())
    argv = [*worker_command(sys.executable, "prepare"), "--spec", spec_file, "--out", out, "--source", source]
    argv += ["--result", storage.join(run_dir, "result.json")]
    env = {**os.environ, **(env or {})}
    if pods == 1:
        return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300, env=env), out
    argv += ["--pods", str(pods), "--coordination", storage.join(run_dir, "pods-try-1")]
    procs = [
        subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "JOB_COMPLETION_INDEX": str(k)},
        )
        for k in range(pods)
    ]
    done = [subprocess.CompletedProcess(p.args, p.wait(300), *p.communicate()) for p in procs]
    assert all(d.returncode == 0 for d in done[1:]), [d.stderr[-2000:] for d in done[1:]]
    return done[0], out
