"""prepare_data at scale: input cut into pieces anywhere reads every row once, every format and any number
of writer processes give the same shards, bad rows are refused naming file, line (or record) and field, and
an s3:// source is read from a real S3-protocol server (moto's, as a separate process)."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import MANIFEST
from tfdist.contract.stages import worker_command
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.spec import DataSpec, load_spec
from tfdist.trainer import readers

FEATURES = [{"name": "pixel", "shape": [64]}]


def data_spec(fmt: str, **fields) -> dict:
    return {"format": fmt, "features": FEATURES, "label": {"name": "label", "num_classes": 10}, **fields}


def digits_rows(count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data[:count], digits.target[:count]


def write_csv(path: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write(",".join(["label", *(f"pixel_{i}" for i in range(64))]) + "\n")
        for x, y in zip(pixels, labels, strict=True):
            f.write(",".join([str(int(y)), *(f"{v:g}" for v in x)]) + "\n")


def write_jsonl(path: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    with open(path, "w") as f:
        for x, y in zip(pixels, labels, strict=True):
            f.write(json.dumps({"pixel": x.tolist(), "label": int(y)}) + "\n")


def write_parquet(path: str, pixels: np.ndarray, labels: np.ndarray, flat: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {f"pixel_{i}": pixels[:, i] for i in range(64)} if flat else {"pixel": list(pixels)}
    pq.write_table(pa.table({"label": labels, **columns}), path, row_group_size=500)


def write_npz(path: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    np.savez(path, pixel=pixels, label=labels)


def write_tfrecord(path: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for x, y in zip(pixels, labels, strict=True):
            writer.write(
                tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "pixel": tf.train.Feature(float_list=tf.train.FloatList(value=x.tolist())),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
                        }
                    )
                ).SerializeToString()
            )


WRITERS = {
    "csv": write_csv,
    "jsonl": write_jsonl,
    "parquet": write_parquet,
    "npz": write_npz,
    "tfrecord": write_tfrecord,
}


def read_all(pieces: list[readers.Piece], spec: dict) -> tuple[np.ndarray, np.ndarray]:
    chunks = [c for p in pieces for c in readers.chunks(p, DataSpec.model_validate({"source": "unused", **spec}))]
    return np.concatenate([c.numeric["pixel"] for c in chunks]), np.concatenate([c.labels for c in chunks])


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_file_cut_into_pieces_anywhere_reads_every_line_once_in_order(tmp_path, fmt):
    pixels, labels = digits_rows()
    path = str(tmp_path / f"digits.{fmt}")
    WRITERS[fmt](path, pixels, labels)
    size = os.path.getsize(path)
    rng = np.random.default_rng(7)
    for cuts in ([], [1], [size // 2], sorted(rng.choice(size, 9, replace=False).tolist())):
        bounds = [0, *cuts, size]
        pieces = [readers.Piece(path, a, b) for a, b in itertools.pairwise(bounds)]
        got_pixels, got_labels = read_all(pieces, data_spec(fmt))
        assert np.array_equal(got_pixels, pixels.astype(np.float32)) and np.array_equal(got_labels, labels), cuts


BAD_ROWS = {  # format, the bad line written after 5 good rows (5: header + 5 rows → line 7 for CSV), message
    "csv: a field too few": ("csv", lambda good: good.rsplit(",", 1)[0], "line 7: 64 fields, the header has 65"),
    "csv: not a number": (
        "csv",
        lambda good: ",".join([good.split(",")[0], "x7", *good.split(",")[2:]]),
        "line 7, field 'pixel_0': 'x7' is not a number",
    ),
    "csv: label out of range": (
        "csv",
        lambda good: "12" + good[good.index(",") :],
        "line 7, field 'label': 12 is not a class in [0, 10)",
    ),
    "jsonl: not a list": (
        "jsonl",
        lambda good: json.dumps({"label": 1, "pixel": "x"}),
        "line 6, field 'pixel': 'x' is not a list",
    ),
    "jsonl: a list too short": (
        "jsonl",
        lambda good: json.dumps({"label": 1, "pixel": [0.0] * 60}),
        "line 6, field 'pixel': 60 values, expected 64",
    ),
    "jsonl: not JSON": ("jsonl", lambda good: good[:-5], "line 6: not a JSON object"),
    "jsonl: not finite": (
        "jsonl",
        lambda good: good.replace("[0.0", "[Infinity", 1),
        "line 6, field 'pixel[0]': inf is not a finite number (of float32's range)",
    ),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_a_bad_row_is_refused_naming_the_file_the_line_and_the_field(tmp_path, case):
    fmt, spoil, message = BAD_ROWS[case]
    pixels, labels = digits_rows(10)
    path = str(tmp_path / f"digits.{fmt}")
    WRITERS[fmt](path, pixels, labels)
    with open(path) as f:
        lines = f.read().splitlines()
    first = 1 if fmt == "csv" else 0
    lines[first + 5] = spoil(lines[first + 5])
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.raises(readers.BadData) as refused:
        read_all(readers.pieces(readers.expand([path]), fmt), data_spec(fmt))
    assert str(refused.value).startswith(f"{path}, ") and message in str(refused.value), str(refused.value)


def test_a_bad_parquet_record_is_refused_naming_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pixels, labels = digits_rows(10)
    path = str(tmp_path / "digits.parquet")
    pq.write_table(
        pa.table({"label": pa.array([*labels[:6].tolist(), None, *labels[7:].tolist()]), "pixel": list(pixels)}), path
    )
    with pytest.raises(readers.BadData, match=r"digits.parquet, record 7, field 'label': no value \(every row needs"):
        read_all(readers.pieces(readers.expand([path]), "parquet"), data_spec("parquet"))
    pq.write_table(
        pa.table({"label": labels, "pixel": [*map(list, pixels[:3]), pixels[3][:60].tolist(), *map(list, pixels[4:])]}),
        path,
    )
    with pytest.raises(readers.BadData, match="record 4, field 'pixel': 60 values, expected 64"):
        read_all(readers.pieces(readers.expand([path]), "parquet"), data_spec("parquet"))


@pytest.mark.e2e
def test_a_damaged_tfrecord_is_refused_naming_the_record(tmp_path):
    import tensorflow as tf

    pixels, labels = digits_rows(10)
    path = str(tmp_path / "digits.tfrecord")
    write_tfrecord(path, pixels, labels)
    read = lambda: read_all(readers.pieces(readers.expand([path]), "tfrecord"), data_spec("tfrecord"))  # noqa: E731
    assert np.array_equal(read()[1], labels)
    data = open(path, "rb").read()
    for damaged, message in (
        (data[:-3], "record 10: cut short"),
        (data[:200] + b"\xff" + data[201:], "record 1: its data is damaged (CRC mismatch)"),
    ):
        open(path, "wb").write(damaged)
        with pytest.raises(readers.BadData, match=re.escape(message)):
            read()
    with tf.io.TFRecordWriter(path) as writer:
        example = tf.train.Example()
        example.features.feature["pixel"].float_list.value[:] = [0.0] * 64
        example.features.feature["label"].int64_list.value[:] = [1]
        writer.write(example.SerializeToString())
        del example.features.feature["label"]
        writer.write(example.SerializeToString())
    with pytest.raises(
        readers.BadData, match=r"record 2, field 'label': Feature: label .* is required but could not be found"
    ):
        read()


def prepare(
    root: str,
    name: str,
    fmt: str,
    sources: list[str],
    env: dict | None = None,
    run_root: str | None = None,
    **data_fields,
) -> tuple[subprocess.CompletedProcess, str]:
    """Run the prepare stage as the launcher does (its own process), its run directory under ``run_root`` (a path
    or a bucket's URL; default: ``root``); (the process, its output directory)."""
    spec = load_spec(make_spec(root, data={"source": "unused", **data_spec(fmt, num_shards=3, **data_fields)}))
    run_dir = storage.join(run_root or root, name)
    out = storage.join(run_dir, "data")
    write_json_atomic(spec_file := storage.join(run_dir, "spec.json"), spec.to_json_dict())
    argv = [
        *worker_command(sys.executable, "prepare"),
        "--spec",
        spec_file,
        "--out",
        out,
        "--result",
        storage.join(run_dir, "result.json"),
    ]
    for source in sources:
        argv += ["--source", source]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, timeout=180, env={**os.environ, **(env or {})}
    ), out


def shards_of(out: str) -> tuple[list, dict]:
    manifest = read_json(os.path.join(out, MANIFEST))
    shards = [(s["file"], s["sha256"], s["examples"]) for split in ("train", "eval") for s in manifest[split]["shards"]]
    return shards, {k: json.dumps(manifest[k], sort_keys=True) for k in ("stats", "class_counts", "statistics")}


def partitions(root: str, fmt: str, parts: int = 3) -> list[str]:
    pixels, labels = digits_rows()
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(labels)), parts)):
        paths.append(os.path.join(root, "raw", fmt, f"part-{k}.{fmt}"))
        os.makedirs(os.path.dirname(paths[-1]), exist_ok=True)
        WRITERS[fmt](paths[-1], pixels[rows], labels[rows])
    return paths


@pytest.mark.extended
@pytest.mark.e2e  # real worker processes, 15-40 s
def test_every_format_and_any_number_of_writers_give_the_same_shards(tmp_path):
    """The digits rows as three files in each format: the shards (by sha256), the train moments, class counts
    and data statistics (as bytes) are the same for CSV with 1 and 3 writer processes and for JSON lines
    (2 writers), Parquet, NPZ and TFRecord."""
    root = str(tmp_path)
    reference = None
    for name, fmt, processes in (
        ("csv1", "csv", 1),
        ("csv3", "csv", 3),
        ("jsonl", "jsonl", 2),
        ("parquet", "parquet", 2),
        ("npz", "npz", 1),
        ("tfrecord", "tfrecord", 2),
    ):
        partitions(root, fmt)
        done, out = prepare(root, name, fmt, [os.path.join(root, "raw", fmt, f"*.{fmt}")], prepare_processes=processes)
        assert done.returncode == 0, done.stderr
        assert f"read 1797 rows from 3 file(s) by {processes} writer(s) (processes)" in done.stdout
        assert sorted(os.listdir(out)) == sorted([MANIFEST, *(f for f, _, _ in shards_of(out)[0])])
        reference = reference or shards_of(out)
        assert shards_of(out) == reference, name


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_bad_data_in_a_writer_process_and_an_empty_partition_publish_nothing(tmp_path):
    root = str(tmp_path)
    paths = partitions(root, "csv")
    with open(paths[2], "a") as f:
        f.write("3," + ",".join(["1"] * 63) + ",oops\n")
    refused, out = prepare(root, "bad", "csv", paths, prepare_processes=2)
    assert refused.returncode == EXIT_REFUSED, refused.stderr
    assert f"{paths[2]}, line 601, field 'pixel_63': 'oops' is not a number. Nothing was published" in refused.stderr
    assert not os.path.exists(out) and not [d for d in os.listdir(os.path.dirname(out)) if d.startswith(".tmp")]
    empty = os.path.join(root, "raw", "empty.csv")
    with open(empty, "w") as f:
        f.write(",".join(["label", *(f"pixel_{i}" for i in range(64))]) + "\n")
    nothing, out = prepare(root, "empty", "csv", [empty])
    assert nothing.returncode == 1 and f"the input has no rows: {empty}" in nothing.stderr
    assert not os.path.exists(out)


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_an_s3_source_is_prepared_into_an_s3_artifact_root_as_local_files_are(tmp_path, s3):
    """Read from a bucket and written to another (the worker's identity from its environment), the shards and
    the manifest are the local run's."""
    root = str(tmp_path)
    paths = partitions(root, "csv")
    logs = s3.new_bucket()
    for path in paths:
        s3.client().upload_file(path, logs, f"digits/2026-11-20/{os.path.basename(path)}")
    sources = [f"s3://{logs}/digits/2026-11-20/*.csv"]
    remote, out = prepare(
        root, "s3", "csv", sources, env=s3.env, prepare_processes=2, run_root=f"s3://{s3.new_bucket()}"
    )
    assert remote.returncode == 0, remote.stderr
    local, local_out = prepare(root, "local", "csv", paths)
    assert local.returncode == 0, local.stderr
    assert out.startswith("s3://") and shards_of(out) == shards_of(local_out)
    assert [i["path"] for i in read_json(storage.join(out, MANIFEST))["inputs"]] == [
        f"s3://{logs}/digits/2026-11-20/part-{k}.csv" for k in range(3)
    ]
    assert storage.names(out) == sorted(os.listdir(local_out))


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_an_http_source_is_read_as_the_local_file(tmp_path):
    """A partition served over HTTP (this process's http.server; TLS, as https:// adds it, is not exercised)."""
    import functools
    import http.server
    import threading

    root = str(tmp_path)
    paths = partitions(root, "jsonl", parts=1)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/raw/jsonl/part-0.jsonl"
        remote, out = prepare(root, "http", "jsonl", [url])
    finally:
        server.shutdown()
    assert remote.returncode == 0, remote.stderr
    _local, local_out = prepare(root, "local", "jsonl", paths)
    assert shards_of(out) == shards_of(local_out)
