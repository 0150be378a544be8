"""Shard writing: the prepare stage (read, split, shard, checksum, manifest) vs a bare TFRecordWriter loop
writing the same records to one file. Both are one process; both time their work after their imports.

    python -m bench.shards bare <input.npz> <out.tfrecord>     the bare loop (the yardstick)"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THROUGHPUT = re.compile(r"throughput: (\d+) records, ([\d.]+) MB in ([\d.]+)s")


def write_input(path: str, rows: int) -> None:
    """``rows`` digits images (scikit-learn's, replicated; each copy shifted a little so rows differ)."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    copies = -(-rows // len(digits.target))
    pixels = np.concatenate([digits.data + 0.001 * c for c in range(copies)])[:rows].astype(np.float32)
    labels = np.tile(digits.target, copies)[:rows].astype(np.int64)
    np.savez(path, pixel=pixels, label=labels)


def _spec_file(workdir: str) -> str:
    from operators.spec import load_spec
    from trainer.artifacts import write_json_atomic

    spec = load_spec({
        "name": "shards_bench", "artifact_root": workdir, "start_date": "2026-11-01",
        "data": {"source": "unused", "format": "npz", "features": [{"name": "pixel", "shape": [64]}],
                 "label": {"name": "label", "num_classes": 10}, "num_shards": 4},
        "model": {"family": "mlp"}, "export": {"model_name": "shards_bench"},
        "validation": {"allow_unvalidated": True},  # only prepare runs here: nothing is evaluated or published
    })
    path = os.path.join(workdir, "spec.json")
    write_json_atomic(path, spec.to_json_dict())
    return path


def _timed(argv: list[str]) -> tuple[float, float]:
    """(records/s, MB/s) from the process's throughput line."""
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    match = THROUGHPUT.search(done.stdout)
    if done.returncode or not match:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records, megabytes, seconds = int(match[1]), float(match[2]), float(match[3])
    return records / seconds, megabytes / seconds


def measure(workdir: str, sizes: tuple[int, ...], repetitions: int) -> list[dict]:
    os.makedirs(workdir, exist_ok=True)
    spec = _spec_file(workdir)
    rows = []
    for size in sizes:
        source = os.path.join(workdir, f"input-{size}.npz")
        write_input(source, size)
        ours, bare = [], []
        for repetition in range(repetitions):
            out = os.path.join(workdir, f"out-{size}-{repetition}")
            shutil.rmtree(out, ignore_errors=True)  # a leftover manifest would make prepare reuse it, not write
            runs = [(ours, [sys.executable, "-m", "trainer.prepare", "--spec", spec, "--out", out, "--result",
                            out + ".result.json", "--source", source]),
                    (bare, [sys.executable, "-m", "bench.shards", "bare", source, out + ".tfrecord"])]
            for samples, argv in runs if repetition % 2 == 0 else runs[::-1]:
                samples.append(_timed(argv))
        ratios = [a[0] / b[0] for a, b in zip(ours, bare)]
        rows.append({
            "size": size, "cores": 1,
            "ours_records_per_s": statistics.median(r for r, _ in ours), "ours_mb_per_s": statistics.median(m for _, m in ours),
            "bare_records_per_s": statistics.median(r for r, _ in bare), "bare_mb_per_s": statistics.median(m for _, m in bare),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        })
    return rows


def bare(source: str, out: str) -> None:
    """The yardstick, written independently of trainer.data: load, build each Example (rows as Python lists,
    the fast way into protobuf), write."""
    import numpy as np
    import tensorflow as tf

    started = time.monotonic()
    with np.load(source) as arrays:
        pixels, labels = arrays["pixel"], arrays["label"]
    with tf.io.TFRecordWriter(out) as writer:
        for pixel, label in zip(pixels, labels):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "pixel": tf.train.Feature(float_list=tf.train.FloatList(value=pixel.tolist())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            })).SerializeToString())
    seconds = time.monotonic() - started
    megabytes = os.path.getsize(out) / 1e6
    print(f"throughput: {len(labels)} records, {megabytes:.2f} MB in {seconds:.3f}s: {len(labels) / seconds:.0f} "
          f"records/s, {megabytes / seconds:.2f} MB/s")


if __name__ == "__main__" and sys.argv[1:2] == ["bare"]:
    bare(*sys.argv[2:4])
