"""Shard writing: the prepare stage (read, split, shard, checksum, statistics, vocabularies, manifest) vs the best
hand-written TFRecordWriter loop writing the same records to one file, both one process, both timed after their
imports, on two inputs: the digits (numbers only, NPZ) and the digits with categorical features (a city, a user id,
a list of tags; Parquet). And prepare at scale: its peak memory as the input grows (with a user id that has a
distinct value per row: millions at 64×), its records/s with one and two writer processes, and with its statistics
and vocabularies against without them.

    python -m bench.shards bare <input.npz|input.parquet> <out.tfrecord>     the hand-written loop (the yardstick)"""

from __future__ import annotations

import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from tfdist.contract.data_records import Manifest
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record
from tfdist.contract.stages import worker_command
from tfdist.infra.jsonfiles import read_json
from tfdist.publishing import registry
from tfdist.publishing.data_gate import checks as data_gate_checks
from tfdist.spec.data_checks import DataChecks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THROUGHPUT = re.compile(r"throughput: (\d+) records, ([\d.]+) MB in ([\d.]+)s")


def digits(rows: int) -> tuple:
    """``rows`` digits images (scikit-learn's, replicated; each copy shifted a little so rows differ), labels."""
    import numpy as np
    from sklearn.datasets import load_digits

    data = load_digits()
    copies = -(-rows // len(data.target))
    pixels = np.concatenate([data.data + 0.001 * c for c in range(copies)])[:rows].astype(np.float32)
    return pixels, np.tile(data.target, copies)[:rows].astype(np.int64)


CITIES = [f"city-{k:02d}" for k in range(40)]
TAGS = [f"tag-{k:02d}" for k in range(20)]


def categorical_columns(rows: int, start: int = 0) -> dict[str, list]:
    """Rows ``start`` .. of a city (40 values, skewed), a user id (one per row: ``u000-<row>``) and 0 to 3 tags."""
    index = range(start, start + rows)
    return {
        "city": [CITIES[(k * k) % 37 % len(CITIES)] for k in index],
        "user": [f"u000-{k:08d}" for k in index],
        "tags": [TAGS[k % 7 : k % 7 + k % 4] for k in index],
    }


def write_input(path: str, rows: int) -> None:
    """The digits as NPZ, or (a .parquet path) with the categorical columns besides."""
    import numpy as np

    pixels, labels = digits(rows)
    if not path.endswith(".parquet"):
        np.savez(path, pixel=pixels, label=labels)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pixel = pa.FixedSizeListArray.from_arrays(pa.array(pixels.ravel()), 64)
    pq.write_table(pa.table({"pixel": pixel, "label": labels, **categorical_columns(rows)}), path)


def write_csv_input(path: str, megabytes: float) -> int:
    """About ``megabytes`` of CSV: digits rows, each copy shifted a little so rows differ, with the categorical
    columns (user ids ``u000-<row>``); the row count."""
    import numpy as np
    from sklearn.datasets import load_digits

    data, rows = load_digits(), 0
    with open(path, "w") as f:
        f.write(",".join(["label", *(f"pixel_{i}" for i in range(64)), "city", "user", "tags"]) + "\n")
        while f.tell() < megabytes * 1e6:
            numbers = io.StringIO()
            np.savetxt(
                numbers,
                np.column_stack([data.target, data.data + 0.001 * rows / len(data.target)]),
                fmt=["%d"] + ["%.3f"] * 64,
                delimiter=",",
            )
            columns = categorical_columns(len(data.target), rows)
            for line, city, user, tags in zip(numbers.getvalue().splitlines(), *columns.values(), strict=True):
                f.write(f"{line},{city},{user},{'|'.join(tags)}\n")
            rows += len(data.target)
    return rows


def partition(base: str, path: str, index: int) -> None:
    """A copy of the base CSV whose user ids are its own (``u<index>-<row>``): as many distinct ids as rows."""
    with open(base, "rb") as f, open(path, "wb") as out:
        out.write(f.read().replace(b",u000-", f",u{index:03d}-".encode()))  # same length: same bytes otherwise


CATEGORICAL = [
    {"name": "city", "kind": "categorical"},
    {"name": "user", "kind": "categorical", "hash_buckets": 100_000},  # an id: hashed, and its values still counted
    {"name": "tags", "kind": "categorical_list"},
]


def _spec_file(workdir: str, fmt: str = "npz", processes: int | None = None) -> str:
    """The bench's spec: the digits, with the categorical features unless the input is NPZ."""
    from tfdist.infra.jsonfiles import write_json_atomic
    from tfdist.spec import load_spec

    spec = load_spec(
        {
            "name": "shards_bench",
            "artifact_root": workdir,
            "start_date": "2026-11-01",
            "data": {
                "source": "unused",
                "format": fmt,
                "features": [{"name": "pixel", "shape": [64]}, *(CATEGORICAL if fmt != "npz" else [])],
                "label": {"name": "label", "num_classes": 10},
                "num_shards": 4,
                "prepare_processes": processes,
            },
            "model": {"family": "mlp"},
            "export": {"model_name": "shards_bench"},
            "validation": {"allow_unvalidated": True},  # only prepare runs here: nothing is evaluated or published
        }
    )
    path = os.path.join(workdir, f"spec-{fmt}-{processes}.json")
    write_json_atomic(path, spec.to_json_dict())
    return path


def _timed(argv: list[str]) -> tuple[float, float]:
    """(records/s, MB/s) from the process's throughput line."""
    rate, _ = _run(argv)
    return rate


def _run(argv: list[str]) -> tuple[tuple[float, float], float]:
    """((records/s, MB/s) from the process's throughput line, the peak resident memory of the process and its
    children together in MB, sampled every 50 ms)."""
    import psutil

    with subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    ) as proc:
        peak, main = 0, psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                tree = [main, *main.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:  # a process ended meanwhile
                pass
            time.sleep(0.05)
        stdout, stderr = proc.communicate()
    match = THROUGHPUT.search(stdout)
    if proc.returncode or not match:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    records, megabytes, seconds = int(match[1]), float(match[2]), float(match[3])
    return (records / seconds, megabytes / seconds), peak / 1e6


def _prepare(spec: str, out: str, source: str) -> list[str]:
    shutil.rmtree(out, ignore_errors=True)  # a leftover manifest would make prepare reuse it, not write
    return [
        *worker_command(sys.executable, "prepare"),
        "--spec",
        spec,
        "--out",
        out,
        "--result",
        out + ".result.json",
        "--source",
        source,
    ]


def scaling(workdir: str, base_megabytes: float, factors: tuple[int, ...], repetitions: int) -> dict:
    """prepare_data on ``factor`` CSV partitions of ``base_megabytes`` each (every user id distinct): peak memory
    with one writer process per input size; records/s with one and with two writer processes on the 8× input, and
    with its statistics and vocabularies against without them."""
    os.makedirs(workdir, exist_ok=True)
    base = os.path.join(workdir, "base.csv")
    rows = write_csv_input(base, base_megabytes)
    for factor in factors:
        os.makedirs(folder := os.path.join(workdir, f"x{factor}"))
        for k in range(factor):
            partition(base, os.path.join(folder, f"part-{k:03d}.csv"), k)
    one, two = _spec_file(workdir, "csv", 1), _spec_file(workdir, "csv", 2)
    memory, baseline = {}, os.path.join(workdir, "baseline")
    for factor in factors:
        source, out = os.path.join(workdir, f"x{factor}", "*.csv"), os.path.join(workdir, "out")
        (rate, _), peak = _run(_prepare(one, out, source))
        memory[factor] = {
            "input_mb": factor * os.path.getsize(base) / 1e6,
            "rows": factor * rows,
            "distinct_users": read_json(os.path.join(out, MANIFEST))["statistics"]["categorical"]["user"]["distinct"],
            "peak_rss_mb": peak,
            "records_per_s": rate,
        }
        if factor == factors[0]:  # the baseline: the first input's statistics and vocabularies
            shutil.copytree(out, baseline, ignore=shutil.ignore_patterns("*.tfrecord"))
        memory[factor]["data_gate_seconds"] = data_gate_seconds(out, baseline)
        shutil.rmtree(os.path.join(workdir, f"x{factor}"))  # the disk: 64× is gigabytes
    writers, statistics_cost = {1: [], 2: []}, {"with": [], "without": []}
    os.makedirs(x8 := os.path.join(workdir, "x8"))
    for k in range(8):
        partition(base, os.path.join(x8, f"part-{k:03d}.csv"), k)
    x8 = os.path.join(x8, "*.csv")
    for repetition in range(repetitions):
        for processes, spec in ((1, one), (2, two)) if repetition % 2 == 0 else ((2, two), (1, one)):
            writers[processes].append(_timed(_prepare(spec, os.path.join(workdir, "out"), x8))[0])
        cases = [
            ("with", lambda: _prepare(one, os.path.join(workdir, "out"), x8)),
            (
                "without",
                lambda: [
                    sys.executable,
                    "-m",
                    "bench.without_statistics",
                    *_prepare(one, os.path.join(workdir, "out"), x8)[3:],
                ],
            ),
        ]
        for name, argv in cases if repetition % 2 == 0 else cases[::-1]:
            statistics_cost[name].append(_timed(argv())[0])
    return {"memory": memory, "writers": writers, "statistics": statistics_cost}


def data_gate_seconds(out: str, baseline: str) -> float:
    """The seconds the data gate takes to read the prepared data's statistics, and the baseline's with its
    vocabularies (``baseline``: a prepared data directory without its shards), and check the one against the
    other."""
    started = time.perf_counter()
    now = read_record(os.path.join(out, MANIFEST), Manifest).statistics
    base = read_record(os.path.join(baseline, MANIFEST), Manifest).statistics
    folder = os.path.join(baseline, registry.VOCABULARIES)
    vocabularies = {name.removesuffix(".json"): read_json(os.path.join(folder, name)) for name in os.listdir(folder)}
    data_gate_checks(now, base, DataChecks(), vocabularies)
    return time.perf_counter() - started


INPUTS = {"numbers": "npz", "categorical": "parquet"}
"""The shard-writing bench's inputs: the digits alone, and with the categorical features."""


def measure(workdir: str, sizes: tuple[int, ...], repetitions: int) -> list[dict]:
    os.makedirs(workdir, exist_ok=True)
    rows = []
    for size in sizes:
        for name, fmt in INPUTS.items():
            spec, source = _spec_file(workdir, fmt), os.path.join(workdir, f"input-{size}.{fmt}")
            write_input(source, size)
            ours, bare = [], []
            for repetition in range(repetitions):
                out = os.path.join(workdir, f"out-{size}-{repetition}")
                runs = [
                    (ours, _prepare(spec, out, source)),
                    (bare, [sys.executable, "-m", "bench.shards", "bare", source, out + ".tfrecord"]),
                ]
                for samples, argv in runs if repetition % 2 == 0 else runs[::-1]:
                    samples.append(_timed(argv))
            ratios = [a[0] / b[0] for a, b in zip(ours, bare, strict=True)]
            rows.append(
                {
                    "size": size,
                    "input": name,
                    "cores": 1,
                    "ours_records_per_s": statistics.median(r for r, _ in ours),
                    "ours_mb_per_s": statistics.median(m for _, m in ours),
                    "bare_records_per_s": statistics.median(r for r, _ in bare),
                    "bare_mb_per_s": statistics.median(m for _, m in bare),
                    "ratio": statistics.median(ratios),
                    "ratio_min": min(ratios),
                    "ratio_max": max(ratios),
                }
            )
    return rows


def bare(source: str, out: str) -> None:
    """The yardstick, written independently of tfdist.trainer.data as a good engineer would: load, convert the rows
    to Python lists (the fast way into protobuf; text as bytes, straight from arrow) a block at a time, refill one
    Example per row (cheaper than building one), write."""
    import numpy as np
    import tensorflow as tf

    started = time.monotonic()
    if source.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(source)
        pixels = table["pixel"].combine_chunks().flatten().to_numpy().reshape(len(table), 64)
        labels = table["label"].to_numpy()
        text = {n: [[v] for v in table[n].cast(pa.binary()).to_pylist()] for n in ("city", "user")}
        text["tags"] = table["tags"].cast(pa.list_(pa.binary())).to_pylist()
    else:
        with np.load(source) as arrays:
            pixels, labels, text = arrays["pixel"], arrays["label"], {}
    example = tf.train.Example()
    pixel_values = example.features.feature["pixel"].float_list.value
    label_values = example.features.feature["label"].int64_list.value
    columns = [(example.features.feature[n].bytes_list.value, values) for n, values in text.items()]
    with tf.io.TFRecordWriter(out) as writer:
        for block in range(0, len(labels), 16384):
            rows = slice(block, block + 16384)
            for i, (pixel, label) in enumerate(zip(pixels[rows].tolist(), labels[rows].tolist(), strict=True)):
                pixel_values[:] = pixel
                label_values[:] = [label]
                for field, values in columns:
                    field[:] = values[block + i]
                writer.write(example.SerializeToString())
    seconds = time.monotonic() - started
    megabytes = os.path.getsize(out) / 1e6
    print(
        f"throughput: {len(labels)} records, {megabytes:.2f} MB in {seconds:.3f}s: {len(labels) / seconds:.0f} "
        f"records/s, {megabytes / seconds:.2f} MB/s"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["bare"]:
    bare(*sys.argv[2:4])
