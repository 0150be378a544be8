"""Stage prepare_data: the run's input → train/eval TFRecord shards + manifest.json, published atomically.

The input streams through in chunks, so memory does not grow with it, in P writers (data.prepare_processes;
default: one per 32 MB of input, up to this process's cores), each reading a contiguous share of the input's
pieces and writing its rows to its own part of every shard. The parts are joined in order, so the shards
hold the same bytes whatever P. The writers are processes of this one, or (``--pods P``, on Kubernetes) the
stage's P pods, which meet in a directory of the shared artifact volume: pod 0 plans the shares, waits for
the others' parts and publishes. Re-running with the same input (same files, same bytes, same data spec)
reuses the existing result."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import hashlib
import math
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import fsspec
import numpy as np

from tfdist.contract import (
    EXIT_REFUSED,
    MANIFEST,
    THREADS_ENV,
    PrepareArgs,
    digest_json,
    publish_dir,
    read_json,
    write_json_atomic,
)
from tfdist.trainer import data, readers, statistics
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say, usable_cores

if TYPE_CHECKING:
    from tfdist.spec import DataSpec

HASH_BLOCK = 8 << 20
BYTES_PER_WRITER = 32 << 20
"""Without data.prepare_processes, a writer process (a TensorFlow import: seconds, and ~600 MB) is added per
this much input, up to the cores."""


def input_fingerprint(files: list[tuple[str, int]], data_spec: DataSpec, threads: int) -> tuple[str, list[dict]]:
    """The digest of the input files' contents, the data spec (as spec.json holds it) and the manifest version;
    each file's path, size and sha256."""

    def sha256(url: str) -> str:
        digest = hashlib.sha256()
        with fsspec.open(url, "rb") as f:
            while block := f.read(HASH_BLOCK):
                digest.update(block)
        return digest.hexdigest()

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:  # hashlib lets go of the GIL
        digests = list(pool.map(sha256, [url for url, _ in files]))
    inputs = [{"path": url, "bytes": size, "sha256": d} for (url, size), d in zip(files, digests, strict=True)]
    data_section = data_spec.model_dump(mode="json", exclude={"checks"})  # loosening a check prepares nothing again
    return digest_json({"inputs": inputs, "data": data_section, "version": data.MANIFEST_VERSION}), inputs


def write_result(path: str, data_dir: str, manifest: dict) -> None:
    """The stage's result record (the task's XCom)."""
    write_json_atomic(
        path,
        {
            "data_dir": data_dir,
            "train_examples": manifest["train"]["examples"],
            "eval_examples": manifest["eval"]["examples"],
            "input_fingerprint": manifest["input_fingerprint"],
        },
    )


@dataclass(frozen=True)
class Share:
    """What one writer process reads (its pieces, in input order) and where it writes its parts."""

    writer: int
    pieces: list[readers.Piece]
    parts_dir: str
    data_spec: DataSpec
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
    return n, ma + delta * (nb / n), sa + sb + delta**2 * (na * nb / n)


def write_share(share: Share) -> dict[str, Any]:
    """Read the share's pieces chunk by chunk, write each row to its split and shard's part file; per piece:
    rows, per-shard counts, class counts per split, the train rows' moments and every row's statistics. Also
    the seconds its TensorFlow import took (not the stage's work)."""
    if not share.pieces:
        return {"pieces": [], "import_seconds": 0.0}
    spec = share.data_spec
    if share.own_process:
        os.environ[THREADS_ENV] = "1"  # one core per writer process
    before = time.monotonic()
    tf = import_tensorflow()
    imported = time.monotonic() - before
    n, names = spec.num_shards, [f.name for f in spec.features]
    examples = data.ExampleWriter(tf, names, spec.label.name)
    writers: dict[tuple[str, int], Any] = {}
    results = []
    try:
        for piece in share.pieces:
            counts = {"train": np.zeros(n, np.int64), "eval": np.zeros(n, np.int64)}
            classes = {split: np.zeros(spec.label.num_classes, np.int64) for split in counts}
            stats = dict.fromkeys(names, (0, 0.0, 0.0))
            described: dict[str, Any] = {}
            for chunk in readers.chunks(piece, spec):
                is_eval, shard = data.split_and_shard(
                    data.row_hashes(chunk.features, chunk.labels), spec.eval_fraction, n
                )
                for split, rows in (("train", ~is_eval), ("eval", is_eval)):
                    for index in np.unique(shard[rows]).tolist():
                        mask = rows & (shard == index)
                        if (split, index) not in writers:
                            writers[split, index] = tf.io.TFRecordWriter(
                                part_path(share.parts_dir, split, index, share.writer)
                            )
                        examples.write(
                            writers[split, index], {k: v[mask] for k, v in chunk.features.items()}, chunk.labels[mask]
                        )
                    counts[split] += np.bincount(shard[rows], minlength=n)
                    classes[split] += np.bincount(chunk.labels[rows], minlength=spec.label.num_classes)
                stats = {k: merged(stats[k], moments(v[~is_eval])) for k, v in chunk.features.items()}
                described = {
                    k: statistics.merged(described[k], statistics.of_chunk(v))
                    if k in described
                    else statistics.of_chunk(v)
                    for k, v in chunk.features.items()
                }
            results.append({"counts": counts, "classes": classes, "stats": stats, "statistics": described})
    finally:
        for writer in writers.values():
            writer.close()
    return {"pieces": results, "import_seconds": imported}


def shares(pieces: list[readers.Piece], processes: int) -> list[list[readers.Piece]]:
    """Contiguous runs of pieces, one per process (empty when there are fewer pieces), of about equal bytes."""
    total = sum(p.end - p.start for p in pieces) or 1
    runs: list[list[readers.Piece]] = [[] for _ in range(processes)]
    done = 0
    for piece in pieces:  # by where the piece's middle falls
        size = piece.end - piece.start
        runs[min(processes - 1, (2 * done + size) * processes // (2 * total))].append(piece)
        done += size
    return runs


def refuse(exc: readers.BadData) -> NoReturn:
    fail(
        f"{exc}. Nothing was published: fix the input (or what produces it), then clear this run's prepare_data task",
        EXIT_REFUSED,
    )


def write_all(runs: list[list[readers.Piece]], data_spec: DataSpec, parts_dir: str) -> list[dict]:
    """Each run's write_share result: in this process when one writer does it all, else in a pool of writer
    processes."""
    work = [Share(k, run, parts_dir, data_spec, sum(map(bool, runs)) > 1) for k, run in enumerate(runs) if run]
    try:
        if len(work) == 1:
            return [write_share(work[0])]
        with multiprocessing.get_context("spawn").Pool(len(work)) as pool:
            return pool.map(write_share, work, chunksize=1)
    except readers.BadData as exc:
        refuse(exc)


class Pods:
    """The stage's pods on Kubernetes (``--pods``; this one is JOB_COMPLETION_INDEX), meeting in ``directory``
    on the shared artifact volume (one per task try): pod 0 writes the plan (each pod's share of the input,
    or that the data is reused), every other pod writes its parts and then its result, pod 0 waits for them."""

    POLL_SECONDS = 0.2

    def __init__(self, directory: str, count: int) -> None:
        self.dir, self.count, self.index = directory, count, int(os.environ["JOB_COMPLETION_INDEX"])
        self.parts_dir, self.plan_path = os.path.join(directory, "parts"), os.path.join(directory, "plan.json")

    def publish_plan(self, plan: dict) -> None:
        """Pod 0: the plan; earlier tries' directories are removed."""
        for earlier in glob.glob(os.path.join(os.path.dirname(self.dir), "pods-try-*")):
            if earlier != self.dir:
                shutil.rmtree(earlier, ignore_errors=True)
        os.makedirs(self.parts_dir, exist_ok=True)
        write_json_atomic(self.plan_path, plan)

    def wait_plan(self) -> dict:
        while not os.path.exists(self.plan_path):
            time.sleep(self.POLL_SECONDS)
        return read_json(self.plan_path)

    def write_result(self, result: dict) -> None:
        pieces = [
            {
                "counts": {split: v.tolist() for split, v in p["counts"].items()},
                "classes": {split: v.tolist() for split, v in p["classes"].items()},
                "stats": {
                    name: [n, np.asarray(m).tolist(), np.asarray(s).tolist()] for name, (n, m, s) in p["stats"].items()
                },
                "statistics": {name: statistics.to_json(s) for name, s in p["statistics"].items()},
            }
            for p in result["pieces"]
        ]
        write_json_atomic(os.path.join(self.dir, f"result-{self.index}.json"), {**result, "pieces": pieces})

    def wait_results(self) -> list[dict]:
        """Pod 0: every other pod's write_share result, in pod order."""
        results = []
        for k in range(1, self.count):
            while not os.path.exists(path := os.path.join(self.dir, f"result-{k}.json")):
                time.sleep(self.POLL_SECONDS)
            result = read_json(path)
            result["pieces"] = [
                {
                    "counts": {split: np.asarray(v) for split, v in p["counts"].items()},
                    "classes": {split: np.asarray(v) for split, v in p["classes"].items()},
                    "stats": {name: (n, np.asarray(m), np.asarray(s)) for name, (n, m, s) in p["stats"].items()},
                    "statistics": {name: statistics.from_json(s) for name, s in p["statistics"].items()},
                }
                for p in result["pieces"]
            ]
            results.append(result)
        return results


def write_share_of_pod(pods: Pods, data_spec: DataSpec) -> None:
    """A pod other than pod 0: once the plan is there, write its share (unless the data is reused)."""
    plan = pods.wait_plan()
    if "shares" in plan:
        share = [readers.Piece(**p) for p in plan["shares"][pods.index]]
        try:
            pods.write_result(write_share(Share(pods.index, share, pods.parts_dir, data_spec, False)))
        except readers.BadData as exc:
            refuse(exc)


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


def reuse_prepared(args: PrepareArgs, pods: Pods | None, fingerprint: str) -> bool:
    """Whether the output directory already holds data prepared from this input (then its result is written);
    refuse one holding anything else."""
    manifest_path = os.path.join(args.out, MANIFEST)
    if os.path.exists(manifest_path):
        if read_json(manifest_path)["input_fingerprint"] == fingerprint:
            if pods:
                pods.publish_plan({"reuse": True})
            say(f"reusing prepared data in {args.out}: same input fingerprint {fingerprint[:12]}")
            write_result(args.result, args.out, read_json(manifest_path))
            return True
        fail(
            f"{args.out} holds data prepared from other input; move it away to prepare this run's data again",
            EXIT_REFUSED,
        )
    if os.path.exists(args.out):
        fail(f"{args.out} exists without a manifest; move it away to prepare this run's data again", EXIT_REFUSED)
    return False


def write_parts(
    runs: list[list[readers.Piece]], data_spec: DataSpec, pods: Pods | None, tmp: str
) -> tuple[list[dict], str]:
    """(every writer's write_share result, the directory of their parts): the pods' (pod 0 writes the first run),
    or this process's writers' in ``tmp``."""
    if pods:
        pods.publish_plan({"shares": [[dataclasses.asdict(p) for p in run] for run in runs]})
        try:
            first = write_share(Share(0, runs[0], pods.parts_dir, data_spec, False))
        except readers.BadData as exc:
            refuse(exc)
        return [first, *pods.wait_results()], pods.parts_dir
    os.makedirs(parts_dir := os.path.join(tmp, "parts"))
    return write_all(runs, data_spec, parts_dir), parts_dir


def row_counts(
    results: list[dict], files: list[tuple[str, int]], writers: str, num_shards: int
) -> dict[str, np.ndarray]:
    """Rows per split and shard over the writers' pieces, logged with the files and ``writers`` that read them;
    an input without rows, or with too few for the train shards, is refused."""
    counts = {split: sum(r["counts"][split] for r in results) for split in ("train", "eval")}
    records = int(counts["train"].sum() + counts["eval"].sum())
    say(f"read {records} rows from {len(files)} file(s) by {writers}")
    if not records:
        fail(f"the input has no rows: {', '.join(url for url, _ in files)} (an empty partition for this run's window?)")
    if (counts["train"] == 0).any():
        fail(f"{records} rows are too few for {num_shards} train shards (data.num_shards): some shard would be empty")
    return counts


def train_stats(results: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Each feature's mean and variance over the train rows, merged over the writers' pieces in input order."""
    stats = {}
    for name in results[0]["stats"]:
        count, mean, squares = 0, 0.0, 0.0
        for r in results:
            count, mean, squares = merged((count, mean, squares), r["stats"][name])
        stats[name] = {"mean": np.atleast_1d(mean).tolist(), "variance": np.atleast_1d(squares / count).tolist()}
    return stats


def data_statistics(results: list[dict]) -> dict[str, Any]:
    """What the data gate compares: each feature's statistics over every row (merged over the writers' pieces
    in input order), and per split the rows and the label's class counts."""
    features = {}
    for name in results[0]["statistics"]:
        merged_stats = results[0]["statistics"][name]
        for r in results[1:]:
            merged_stats = statistics.merged(merged_stats, r["statistics"][name])
        features[name] = statistics.summary(merged_stats)
    return {
        "bins": statistics.SCHEME,
        "features": features,
        **{
            split: {
                "rows": int(sum(r["counts"][split].sum() for r in results)),
                "class_counts": sum(r["classes"][split] for r in results).tolist(),
            }
            for split in ("train", "eval")
        },
    }


def data_manifest(
    data_spec: DataSpec,
    fingerprint: str,
    inputs: list[dict],
    results: list[dict],
    counts: dict[str, np.ndarray],
    parts_dir: str,
    out_dir: str,
) -> dict[str, Any]:
    """The manifest of the shards, joined into ``out_dir`` from the writers' parts."""
    n = data_spec.num_shards
    manifest = {
        "version": data.MANIFEST_VERSION,
        "input_fingerprint": fingerprint,
        "inputs": inputs,
        "features": [  # stand-in for the data helper's version 4 entries (numeric features, integer classes only)
            {"name": f.name, "kind": "numeric", "shape": f.shape, "missing_indicator": f.missing_indicator}
            for f in data_spec.numeric_features
        ],
        "label": {
            "name": data_spec.label.name,
            "task": data_spec.label.task,
            "stored": "index",
            "classes": data_spec.label.class_names,
            "num_classes": data_spec.label.num_classes,
            "positive": None,
            "mean": None,
            "std": None,
        },
        "eval_fraction": data_spec.eval_fraction,
        "stats": train_stats(results),
        "class_counts": sum(r["classes"]["train"] + r["classes"]["eval"] for r in results).tolist(),
        "statistics": data_statistics(results),
    }
    for split in ("train", "eval"):
        shards = [
            {
                **join_parts(parts_dir, out_dir, split, i, data.shard_name(split, i, n)),
                "examples": int(counts[split][i]),
            }
            for i in range(n)
        ]
        manifest[split] = {"examples": int(counts[split].sum()), "shards": shards}
    return manifest


def main() -> None:
    started = time.monotonic()
    args = PrepareArgs.parse()
    data_spec = load_spec(args.spec).data
    pods = Pods(args.coordination, args.pods) if args.pods > 1 else None
    if pods and pods.index:
        return write_share_of_pod(pods, data_spec)
    files = readers.expand(args.source)
    if not files:
        fail(f"no input files match {args.source} (data.source of the spec, for this run's window)")
    processes = (
        args.pods
        if pods
        else data_spec.prepare_processes
        or max(1, min(usable_cores(), math.ceil(sum(size for _, size in files) / BYTES_PER_WRITER)))
    )
    fingerprint, inputs = input_fingerprint(files, data_spec, min(processes, usable_cores()))
    if reuse_prepared(args, pods, fingerprint):
        return
    with publish_dir(args.out) as tmp:
        runs = shares(readers.pieces(files, data_spec.format), processes)
        done, parts_dir = write_parts(runs, data_spec, pods, tmp)
        started += max(d["import_seconds"] for d in done)  # the throughput counts our work, not the import
        results = [r for d in done for r in d["pieces"]]
        writers = f"{sum(map(bool, runs))} writer(s) ({'pods' if pods else 'processes'})"
        counts = row_counts(results, files, writers, data_spec.num_shards)
        manifest = data_manifest(data_spec, fingerprint, inputs, results, counts, parts_dir, tmp)
        shutil.rmtree(pods.dir if pods else parts_dir)
        write_json_atomic(os.path.join(tmp, MANIFEST), manifest)
    write_result(args.result, args.out, manifest)
    n = data_spec.num_shards
    say(
        f"wrote {manifest['train']['examples']} train and {manifest['eval']['examples']} eval examples "
        f"in {n}+{n} shards to {args.out}"
    )
    seconds = time.monotonic() - started
    records = manifest["train"]["examples"] + manifest["eval"]["examples"]
    megabytes = sum(s["bytes"] for split in ("train", "eval") for s in manifest[split]["shards"]) / 1e6
    say(
        f"throughput: {records} records, {megabytes:.2f} MB in {seconds:.3f}s: {records / seconds:.0f} records/s, "
        f"{megabytes / seconds:.2f} MB/s"
    )


if __name__ == "__main__":
    run_stage(main)
