"""Stage prepare_data: the run's input → train/eval TFRecord shards + manifest.json, published atomically.

The input streams through in chunks, so memory does not grow with it, in P processes
(data.prepare_processes; default: this process's cores), each reading a contiguous share of the input's
pieces and writing its rows to its own part of every shard. The parts are joined in order, so the shards
hold the same bytes whatever P. Re-running with the same input (same files, same bytes, same data spec)
reuses the existing result."""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np

from trainer import data, readers
from trainer.artifacts import digest_json, publish_dir, read_json, write_json_atomic
from trainer.contract import EXIT_REFUSED
from trainer.runtime import fail, import_tensorflow, load_spec, parse_args, run_stage, say, usable_cores

HASH_BLOCK = 8 << 20
BYTES_PER_WRITER = 32 << 20
"""Without data.prepare_processes, a writer process (a TensorFlow import: seconds, and ~600 MB) is added per
this much input, up to the cores."""


def input_fingerprint(files: list[tuple[str, int]], data_spec: dict, threads: int) -> tuple[str, list[dict]]:
    def sha256(url: str) -> str:
        digest = hashlib.sha256()
        with fsspec.open(url, "rb") as f:
            while block := f.read(HASH_BLOCK):
                digest.update(block)
        return digest.hexdigest()

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:  # hashlib lets go of the GIL
        digests = list(pool.map(sha256, [url for url, _ in files]))
    inputs = [{"path": url, "bytes": size, "sha256": d} for (url, size), d in zip(files, digests)]
    return digest_json({"inputs": inputs, "data": data_spec, "version": data.MANIFEST_VERSION}), inputs


def write_result(path: str, data_dir: str, manifest: dict) -> None:
    """The stage's result record (the task's XCom)."""
    write_json_atomic(path, {"data_dir": data_dir, "train_examples": manifest["train"]["examples"],
                             "eval_examples": manifest["eval"]["examples"],
                             "input_fingerprint": manifest["input_fingerprint"]})


@dataclass(frozen=True)
class Share:
    """What one writer process reads (its pieces, in input order) and where it writes its parts."""

    writer: int
    pieces: list[readers.Piece]
    parts_dir: str
    data_spec: dict[str, Any]
    own_process: bool


def part_path(parts_dir: str, split: str, shard: int, writer: int) -> str:
    return os.path.join(parts_dir, f"{split}-{shard:05d}.{writer:05d}")


def moments(values: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, mean, sum of squared deviations) per column, in float64."""
    values = values.astype(np.float64)
    mean = values.mean(axis=0) if len(values) else np.zeros(values.shape[1])
    return len(values), mean, ((values - mean) ** 2).sum(axis=0)


def merged(a: tuple, b: tuple) -> tuple:
    """Two columns' moments as one (Chan et al.): exact for any split of the rows, in a fixed order."""
    (na, ma, sa), (nb, mb, sb) = a, b
    n = na + nb
    if not n:
        return a
    delta = mb - ma
    return n, ma + delta * (nb / n), sa + sb + delta ** 2 * (na * nb / n)


def write_share(share: Share) -> dict[str, Any]:
    """Read the share's pieces chunk by chunk, write each row to its split and shard's part file; per piece:
    rows, per-shard counts, class counts and the train rows' moments. Also the seconds its TensorFlow import
    took (not the stage's work)."""
    spec = share.data_spec
    if share.own_process:
        os.environ["TFDIST_THREADS"] = "1"  # one core per writer process
    before = time.monotonic()
    tf = import_tensorflow()
    imported = time.monotonic() - before
    n, names = spec["num_shards"], [f["name"] for f in spec["features"]]
    examples = data.ExampleWriter(tf, names, spec["label"]["name"])
    writers: dict[tuple[str, int], Any] = {}
    results = []
    try:
        for piece in share.pieces:
            counts = {"train": np.zeros(n, np.int64), "eval": np.zeros(n, np.int64)}
            classes = np.zeros(spec["label"]["num_classes"], np.int64)
            stats = {name: (0, 0.0, 0.0) for name in names}
            for chunk in readers.chunks(piece, spec):
                is_eval, shard = data.split_and_shard(data.row_hashes(chunk.features, chunk.labels),
                                                      spec["eval_fraction"], n)
                for split, rows in (("train", ~is_eval), ("eval", is_eval)):
                    for index in np.unique(shard[rows]).tolist():
                        mask = rows & (shard == index)
                        if (split, index) not in writers:
                            writers[split, index] = tf.io.TFRecordWriter(
                                part_path(share.parts_dir, split, index, share.writer))
                        examples.write(writers[split, index], {k: v[mask] for k, v in chunk.features.items()},
                                       chunk.labels[mask])
                    counts[split] += np.bincount(shard[rows], minlength=n)
                classes += np.bincount(chunk.labels, minlength=len(classes))
                stats = {k: merged(stats[k], moments(v[~is_eval])) for k, v in chunk.features.items()}
            results.append({"counts": counts, "classes": classes, "stats": stats})
    finally:
        for writer in writers.values():
            writer.close()
    return {"pieces": results, "import_seconds": imported}


def shares(pieces: list[readers.Piece], processes: int) -> list[list[readers.Piece]]:
    """Contiguous runs of pieces, one per process, of about equal bytes."""
    total = sum(p.end - p.start for p in pieces) or 1
    runs: list[list[readers.Piece]] = [[] for _ in range(processes)]
    done = 0
    for piece in pieces:  # by where the piece's middle falls
        size = piece.end - piece.start
        runs[min(processes - 1, (2 * done + size) * processes // (2 * total))].append(piece)
        done += size
    return [run for run in runs if run]


def write_all(pieces: list[readers.Piece], data_spec: dict, parts_dir: str,
              processes: int) -> tuple[list, float, int]:
    """Per piece (in input order) its write_share results, the longest TensorFlow import and the writers; in
    this process when one writer does it all, else in a pool of writer processes."""
    runs = shares(pieces, processes)
    work = [Share(k, run, parts_dir, data_spec, len(runs) > 1) for k, run in enumerate(runs)]
    try:
        if len(work) == 1:
            done = [write_share(work[0])]
        else:
            with multiprocessing.get_context("spawn").Pool(len(work)) as pool:
                done = pool.map(write_share, work, chunksize=1)
    except readers.BadData as exc:
        fail(f"{exc}. Nothing was published: fix the input (or what produces it), then clear this run's "
             "prepare_data task", EXIT_REFUSED)
    return [r for d in done for r in d["pieces"]], max(d["import_seconds"] for d in done), len(work)


def join_parts(parts_dir: str, out_dir: str, split: str, shard: int, name: str) -> dict[str, Any]:
    """The shard from its writers' parts, in writer order; its size and sha256."""
    digest, size = hashlib.sha256(), 0
    path = os.path.join(out_dir, name)
    with open(path, "wb") as out:
        for part in sorted(p for p in os.listdir(parts_dir) if p.startswith(f"{split}-{shard:05d}.")):
            with open(os.path.join(parts_dir, part), "rb") as f:
                while block := f.read(HASH_BLOCK):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    return {"file": name, "bytes": size, "sha256": digest.hexdigest()}


def main() -> None:
    started = time.monotonic()
    args = parse_args(__doc__, "out", "result", extra=[("source", {"action": "append", "required": True})])
    spec = load_spec(args.spec)
    data_spec = spec["data"]
    files = readers.expand(args.source)
    if not files:
        fail(f"no input files match {args.source} (data.source of the spec, for this run's window)")
    processes = data_spec.get("prepare_processes") or max(1, min(
        usable_cores(), math.ceil(sum(size for _, size in files) / BYTES_PER_WRITER)))
    fingerprint, inputs = input_fingerprint(files, data_spec, processes)
    manifest_path = os.path.join(args.out, "manifest.json")
    if os.path.exists(manifest_path):
        if read_json(manifest_path)["input_fingerprint"] == fingerprint:
            say(f"reusing prepared data in {args.out}: same input fingerprint {fingerprint[:12]}")
            write_result(args.result, args.out, read_json(manifest_path))
            return
        fail(f"{args.out} holds data prepared from other input; move it away to prepare this run's data again",
             EXIT_REFUSED)
    if os.path.exists(args.out):
        fail(f"{args.out} exists without a manifest; move it away to prepare this run's data again", EXIT_REFUSED)

    n, num_classes = data_spec["num_shards"], data_spec["label"]["num_classes"]
    with publish_dir(args.out) as tmp:
        parts_dir = os.path.join(tmp, "parts")
        os.makedirs(parts_dir)
        results, import_seconds, writers = write_all(readers.pieces(files, data_spec["format"]), data_spec,
                                                     parts_dir, processes)
        started += import_seconds  # the throughput counts our work, not the import
        counts = {split: sum(r["counts"][split] for r in results) for split in ("train", "eval")}
        records = int(counts["train"].sum() + counts["eval"].sum())
        say(f"read {records} rows from {len(files)} file(s) with {writers} writer process(es)")
        if not records:
            fail(f"the input has no rows: {', '.join(url for url, _ in files)} (an empty partition for this run's "
                 "window?)")
        if (counts["train"] == 0).any():
            fail(f"{records} rows are too few for {n} train shards (data.num_shards): some shard would be empty")
        stats = {}
        for name in results[0]["stats"]:
            count, mean, squares = 0, 0.0, 0.0
            for r in results:
                count, mean, squares = merged((count, mean, squares), r["stats"][name])
            stats[name] = {"mean": np.atleast_1d(mean).tolist(), "variance": np.atleast_1d(squares / count).tolist()}
        manifest = {
            "version": data.MANIFEST_VERSION,
            "input_fingerprint": fingerprint,
            "inputs": inputs,
            "features": [{"name": f["name"], "shape": f["shape"]} for f in data_spec["features"]],
            "label": data_spec["label"],
            "eval_fraction": data_spec["eval_fraction"],
            "stats": stats,
            "class_counts": sum(r["classes"] for r in results).tolist(),
        }
        for split in ("train", "eval"):
            shards = [{**join_parts(parts_dir, tmp, split, i, data.shard_name(split, i, n)),
                       "examples": int(counts[split][i])} for i in range(n)]
            manifest[split] = {"examples": int(counts[split].sum()), "shards": shards}
        shutil.rmtree(parts_dir)
        write_json_atomic(os.path.join(tmp, "manifest.json"), manifest)
    write_result(args.result, args.out, manifest)
    say(f"wrote {manifest['train']['examples']} train and {manifest['eval']['examples']} eval examples "
        f"in {n}+{n} shards to {args.out}")
    seconds = time.monotonic() - started
    megabytes = sum(s["bytes"] for split in ("train", "eval") for s in manifest[split]["shards"]) / 1e6
    say(f"throughput: {records} records, {megabytes:.2f} MB in {seconds:.3f}s: {records / seconds:.0f} records/s, "
        f"{megabytes / seconds:.2f} MB/s")


if __name__ == "__main__":
    run_stage(main)
