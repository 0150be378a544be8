"""prepare_data on tables with categorical features, missing values and each label task, run as the launcher
runs it: the same bytes (shards, manifest, statistics, vocabularies) whatever the format and the number of writer
processes or pods; the shards, vocabularies and manifest as docs/tabular.md says; bad input refused with nothing
published."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter

import numpy as np
import pytest

from tests.trainer import tabular
from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.publishing import registry
from tfdist.spec import CategoricalFeature
from tfdist.spec.sizing import embedding_dim
from tfdist.trainer import data

pytestmark = pytest.mark.e2e


def published(out: str) -> tuple[dict, dict[str, bytes]]:
    """(the manifest without the fingerprint, which covers the spec's prepare_processes; the vocabulary files)."""
    manifest = read_json(os.path.join(out, MANIFEST))
    manifest.pop("input_fingerprint")
    folder = os.path.join(out, registry.VOCABULARIES)
    return manifest, {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


def examples(out: str, split: str) -> list:
    import tensorflow as tf

    manifest = read_record(os.path.join(out, MANIFEST), Manifest)
    return [
        tf.train.Example.FromString(record).features.feature
        for path in data.shard_paths(out, manifest, split)
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator()
    ]


WRITERS = {"one": (1, 1), "two": (2, 1), "three": (3, 1), "pods": (None, 2)}
"""By name: (writer processes, pods)."""


@pytest.mark.extended
@pytest.mark.parametrize(
    ("task", "against_one"),
    [("multiclass", ["two", "three", "pods"]), ("binary", ["three"]), ("regression", ["pods"])],
    ids=["multiclass", "binary", "regression"],
)
def test_one_two_or_three_writer_processes_and_two_pods_publish_the_same_bytes(tmp_path, task, against_one):
    """Each way of splitting the work once (multiclass), and each label task split once: a writer process or pod
    handles each task's label as one process does (the merge itself does not depend on the task)."""
    root = str(tmp_path)
    source = tabular.partitions(root, "csv", tabular.table(1800))
    reference = None
    for name in ["one", *against_one]:
        processes, pods = WRITERS[name]
        spec = tabular.data_spec("csv", task, num_shards=3, prepare_processes=processes)
        done, out = tabular.prepare(root, name, spec, source, pods=pods)
        assert done.returncode == 0, done.stderr
        assert f"by {processes or pods} writer(s) ({'pods' if pods > 1 else 'processes'})" in done.stdout
        reference = reference or published(out)
        assert published(out) == reference, name


@pytest.mark.extended
def test_every_format_publishes_the_same_bytes(tmp_path):
    """The table as CSV (one writer), JSON lines (two), Parquet (three) and TFRecord (two): missing values as each
    format writes them (empty cells, null or absent keys, NaN), a dictionary-encoded Parquet column, int64_list
    ids. (Each file is one chunk in every format here: the moments are merged chunk by chunk, so another cut
    into chunks may move their last digits.)"""
    root, columns = str(tmp_path), tabular.table(1200)
    reference = None
    for fmt, processes in (("csv", 1), ("jsonl", 2), ("parquet", 3), ("tfrecord", 2)):
        source = tabular.partitions(root, fmt, columns)
        done, out = tabular.prepare(root, fmt, tabular.data_spec(fmt, prepare_processes=processes), source)
        assert done.returncode == 0, done.stderr
        manifest, vocabularies = published(out)
        manifest.pop("inputs")
        reference = reference or (manifest, vocabularies)
        assert (manifest, vocabularies) == reference, fmt


def counted(values: list[str]) -> list[tuple[str, int]]:
    """Plain Python: (value, count), most frequent first, ties in UTF-8 byte order."""
    return sorted(Counter(values).items(), key=lambda vc: (-vc[1], vc[0].encode()))


@pytest.mark.parametrize("task", ["binary", "regression", "multiclass"])
def test_the_shards_vocabularies_and_manifest_are_as_the_docs_say(tmp_path, task):
    root, columns = str(tmp_path), tabular.table(1500)
    columns["city"][:3] = ["Bern", "Bern", "Bergen"]  # Bern and Basel tie, Basel first in byte order
    columns["city"][3:5] = ["Basel", "Basel"]
    source = tabular.partitions(root, "jsonl", columns)
    done, out = tabular.prepare(root, "run", tabular.data_spec("jsonl", task), source)
    assert done.returncode == 0, done.stderr
    manifest = read_json(os.path.join(out, MANIFEST))
    assert manifest["version"] == 4 and manifest["schema_version"] == 1 == manifest["statistics"]["schema_version"]
    assert Manifest.parse(manifest, out).payload() == manifest  # the model holds every key the stage writes
    features = {f["name"]: f for f in manifest["features"]}
    assert features["age"] == {"name": "age", "kind": "numeric", "shape": [], "missing_indicator": True}

    # vocabularies: every value (the missing "" too) most frequent first, ties in byte order; items: min_count 2
    city = counted(columns["city"])
    assert city.index(("Basel", 2)) + 1 == city.index(("Bern", 2))  # a tie, in byte order
    assert json.loads(open(os.path.join(out, "vocabularies", "city.json"), encoding="utf-8").read()) == [
        v for v, _ in city
    ]
    items = counted([v for row in columns["items"] for v in row or []])
    assert json.loads(open(os.path.join(out, "vocabularies", "items.json")).read()) == [v for v, c in items if c >= 2]
    for name, tokens in (("city", city), ("items", [i for i in items if i[1] >= 2])):
        path = os.path.join(out, "vocabularies", f"{name}.json")
        ids = 1 + len(tokens)
        assert features[name]["vocabulary"] == {
            "file": f"vocabularies/{name}.json",
            "size": len(tokens),
            "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        }
        assert (features[name]["ids"], features[name]["oov_buckets"], features[name]["hash_buckets"]) == (ids, 1, None)
    assert features["items"]["combiner"] == "mean" and features["items"]["max_values"] == 64
    assert features["zip"] == {
        "name": "zip",
        "kind": "categorical",
        "dtype": "int64",
        "ids": 64,
        "embedding_dim": round(1.6 * 64**0.56),
        "vocabulary": None,
        "oov_buckets": 0,
        "hash_buckets": 64,
    }
    city_feature = CategoricalFeature(name="city", kind="categorical")
    assert features["city"]["embedding_dim"] == embedding_dim(city_feature, features["city"]["ids"])

    # the statistics of categorical features
    stats = manifest["statistics"]["categorical"]
    assert stats["city"] == {
        "rows": 1500,
        "values": 1500,
        "missing": columns["city"].count(""),
        "distinct": len(city),
        "distinct_exact": True,
        "top": [[v, c] for v, c in city],
    }
    lists = [row or [] for row in columns["items"]]
    assert stats["items"]["values"] == sum(map(len, lists)) and stats["items"]["missing"] == lists.count([])
    zips = [str(z) if z is not None else "" for z in columns["zip"]]
    assert stats["zip"]["top"] == [[v, c] for v, c in counted(zips)]
    numbers = manifest["statistics"]["features"]
    assert numbers["age"]["missing"] == [columns["age"].count(None)]
    assert numbers["pos"]["missing"] == [sum(p[k] is None for p in columns["pos"]) for k in range(2)]

    # each row in the shards as docs/tabular.md says
    rows = examples(out, "train") + examples(out, "eval")
    assert len(rows) == 1500
    got = Counter(
        (
            tuple(r["age"].float_list.value),
            tuple(r["city"].bytes_list.value),
            tuple(r["zip"].bytes_list.value),
            tuple(r["items"].bytes_list.value),
        )
        for r in rows
    )
    want = Counter(
        (
            (math.nan if a is None else float(np.float32(a)),),
            (c.encode(),),
            (b"" if z is None else str(z).encode(),),
            tuple(v.encode() for v in i or []),
        )
        for a, c, z, i in zip(columns["age"], columns["city"], columns["zip"], columns["items"], strict=True)
    )
    assert shown(got) == shown(want)
    label = manifest["label"]
    if task == "binary":
        assert Counter(r["churn"].int64_list.value[0] for r in rows) == {
            1: columns["churn"].count("yes"),
            0: columns["churn"].count("no"),
        }
        assert (label["stored"], label["classes"], label["positive"], label["num_classes"]) == (
            "binary",
            ["no", "yes"],
            "yes",
            2,
        )
        assert manifest["class_counts"] == [columns["churn"].count("no"), columns["churn"].count("yes")]
    elif task == "regression":
        train = np.array([r["price"].float_list.value[0] for r in examples(out, "train")], np.float64)
        assert (label["stored"], label["classes"], label["positive"]) == ("value", None, None)
        np.testing.assert_allclose([label["mean"], label["std"]], [train.mean(), train.std()], rtol=1e-9)
        target = manifest["statistics"]["label"]
        assert target["task"] == "regression" and target["count"] == 1500
        assert "class_counts" not in manifest and "class_counts" not in manifest["statistics"]["train"]
    else:
        assert Counter(r["species"].bytes_list.value[0] for r in rows) == Counter(
            s.encode() for s in columns["species"]
        )
        assert (label["stored"], label["classes"], label["num_classes"]) == ("name", sorted(tabular.SPECIES), 3)
        assert manifest["statistics"]["label"]["class_counts"] == [
            columns["species"].count(s) for s in sorted(tabular.SPECIES)
        ]


def shown(rows: Counter) -> Counter:
    """The rows with 'nan' for NaN (which equals nothing, itself included)."""
    out: Counter = Counter()
    for key, n in rows.items():
        out[(tuple("nan" if math.isnan(x) else x for x in key[0]), *key[1:])] += n
    return out


def refused(root: str, name: str, spec: dict, source: str) -> str:
    """Run prepare on bad input; its error, once it is seen to be refused with nothing published."""
    done, out = tabular.prepare(root, name, spec, source)
    assert done.returncode == EXIT_REFUSED, done.stdout + done.stderr
    assert not os.path.exists(out) and not [d for d in os.listdir(os.path.dirname(out)) if d.startswith(".tmp")]
    return done.stderr


@pytest.mark.extended
def test_bad_input_found_only_when_the_writers_results_are_merged_is_refused_with_nothing_published(tmp_path):
    root = str(tmp_path)
    columns = tabular.table(900)
    columns["churn"][700] = "nope"  # the third partition's only negative besides 'no' (rows 600-899)
    columns["churn"][600:700] = ["yes"] * 100
    columns["churn"][701:] = ["yes"] * 199
    source = tabular.partitions(root, "csv", columns)
    message = refused(root, "negatives", tabular.data_spec("csv", prepare_processes=3), source)
    first = next(i for i, y in enumerate(columns["churn"]) if y == "no")
    assert re.search(
        rf"part-2.csv, line 102, field 'churn': a binary label with a third value: 'nope' here and 'no' first at "
        rf".*part-0.csv, line {first + 2}, besides the positive one. Fix the rows, or map them to one negative "
        r"value. Nothing was published",
        message,
    ), message

    spec = tabular.data_spec(
        "csv", features=[*tabular.FEATURES[:4], {**tabular.FEATURES[4], "vocabulary": {"min_count": 10**6}}]
    )
    message = refused(root, "empty_vocabulary", spec, tabular.partitions(root, "csv", tabular.table(600)))
    assert (
        "data.features 'items': its vocabulary would have no token: no value was seen min_count (1000000) times "
        "(the most frequent, " in message
    )
    assert "lower data.features[].vocabulary.min_count, or use hash_buckets. Nothing was published" in message

    columns = tabular.table(600)
    columns["age"] = [None] * 600
    message = refused(root, "no_age", tabular.data_spec("jsonl"), tabular.partitions(root, "jsonl", columns))
    assert "data.features 'age': no train row has a value, so it has no mean to stand for its missing values" in message

    columns = tabular.table(600)
    columns["species"] = ["Adelie"] * 600
    message = refused(
        root, "one_class", tabular.data_spec("jsonl", "multiclass"), tabular.partitions(root, "jsonl", columns)
    )
    assert "data.label 'species': the input holds 1 class (Adelie); a multiclass task needs at least 2" in message

    columns = tabular.table(10_050)
    columns["species"] = [f"s{k}" for k in range(10_050)]  # an id, or a price, taken for a class
    message = refused(root, "ids", tabular.data_spec("jsonl", "multiclass"), tabular.partitions(root, "jsonl", columns))
    assert "data.label 'species': more than 10000 classes in the input; is it a regression target" in message


def test_a_vocabulary_file_changed_after_prepare_is_refused_before_use(tmp_path, capsys):
    root = str(tmp_path)
    done, out = tabular.prepare(
        root, "run", tabular.data_spec("csv"), tabular.partitions(root, "csv", tabular.table(600))
    )
    assert done.returncode == 0, done.stderr
    assert data.verified_manifest(out, "train", "eval")[0].version == 4
    path = os.path.join(out, "vocabularies", "city.json")
    open(path, "a").write(" ")
    with pytest.raises(SystemExit) as refused_exit:
        data.verified_manifest(out, "train")
    assert refused_exit.value.code == EXIT_REFUSED
    assert f"data check 'sha256' failed for {path}" in capsys.readouterr().err
    os.remove(path)
    with pytest.raises(SystemExit):
        data.verified_manifest(out)
    assert f"data check 'missing' failed for {path}" in capsys.readouterr().err


@pytest.mark.extended
def test_value_counts_past_their_capacity_publish_the_same_bytes_whatever_the_writers(tmp_path):
    """252,050 distinct user ids in four files: the counts are pruned as the pieces' are merged (by the first writer
    itself for its own pieces, by the stage for the pieces other writers hand on in files), in input order; the
    vocabulary, the top values and the estimated distinct count come out alike."""
    import csv

    root, rows = str(tmp_path), 280_000
    rng = np.random.default_rng(3)
    folder = os.path.join(root, "raw")
    os.makedirs(folder)
    for k, part in enumerate(np.array_split(np.arange(rows), 4)):
        with open(os.path.join(folder, f"part-{k}.csv"), "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["x", "user", "clicked"])
            hot = rng.integers(0, 50, len(part))  # a few frequent users among the one-time ones
            users = [f"user-{i}" if i % 10 else f"hot-{h}" for i, h in zip(part, hot, strict=True)]
            if k in (0, 3):  # in the first file and the last, pruned in between: counted once, whatever the writers
                users[1:101] = [f"zz-{j}" for j in range(100)]
            out.writerows([i % 97, user, int(i % 5 == 0)] for i, user in zip(part, users, strict=True))
    spec = {
        "format": "csv",
        "features": [{"name": "x"}, {"name": "user", "kind": "categorical", "vocabulary": {"max_tokens": 100}}],
        "label": {"name": "clicked", "task": "binary"},
    }
    reference = None
    for name, processes, pods in (("one", 1, 1), ("two", 2, 1), ("pods", None, 3)):
        done, out = tabular.prepare(root, name, {**spec, "prepare_processes": processes}, f"{folder}/*.csv", pods=pods)
        assert done.returncode == 0, done.stderr
        reference = reference or published(out)
        assert published(out) == reference, name
    users = reference[0]["statistics"]["categorical"]["user"]
    assert users["distinct_exact"] is False and abs(users["distinct"] / (252_000 + 50) - 1) < 0.03
    vocabulary = json.loads(reference[1]["user.json"])
    assert sorted(vocabulary[:50]) == sorted(f"hot-{h}" for h in range(50)) and "zz-0" not in vocabulary
