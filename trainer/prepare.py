"""Stage prepare_data: raw input of the run's window → train/eval TFRecord shards + manifest.json, atomically.

Re-running with the same input (same files, same bytes, same data spec) reuses the existing result."""

from __future__ import annotations

import os
import time

import numpy as np

from trainer import data
from trainer.artifacts import digest_json, publish_dir, read_json, sha256_file, write_json_atomic
from trainer.contract import EXIT_REFUSED
from trainer.runtime import fail, import_tensorflow, load_spec, parse_args, run_stage, say


def input_fingerprint(paths: list[str], data_spec: dict) -> tuple[str, list[dict]]:
    inputs = [{"path": p, "bytes": os.path.getsize(p), "sha256": sha256_file(p)} for p in paths]
    return digest_json({"inputs": inputs, "data": data_spec, "version": data.MANIFEST_VERSION}), inputs


def write_result(path: str, data_dir: str, manifest: dict) -> None:
    """The stage's result record (the task's XCom)."""
    write_json_atomic(path, {"data_dir": data_dir, "train_examples": manifest["train"]["examples"],
                             "eval_examples": manifest["eval"]["examples"],
                             "input_fingerprint": manifest["input_fingerprint"]})


def main() -> None:
    started = time.monotonic()
    args = parse_args(__doc__, "out", "result", extra=[("source", {"action": "append", "required": True})])
    spec = load_spec(args.spec)
    data_spec = spec["data"]
    paths = data.expand_sources(args.source)
    if not paths:
        fail(f"no input files match {args.source} (data.source of the spec, for this run's window)")
    fingerprint, inputs = input_fingerprint(paths, data_spec)
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

    features, labels = data.read_inputs(paths, data_spec)
    say(f"read {len(labels)} rows from {len(paths)} file(s)")
    num_classes = data_spec["label"]["num_classes"]
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        fail(f"label values must be in [0, {num_classes}) (data.label.num_classes), "
             f"found {sorted(set(labels[bad]))[:5]}", EXIT_REFUSED)
    is_eval, shard = data.split_and_shard(data.row_hashes(features, labels), data_spec["eval_fraction"],
                                          data_spec["num_shards"])
    n = data_spec["num_shards"]
    train_counts = np.bincount(shard[~is_eval], minlength=n)
    if is_eval.all() or (train_counts == 0).any():
        fail(f"{len(labels)} rows are too few for {n} train shards (data.num_shards): some shard would be empty")
    train = {k: v[~is_eval] for k, v in features.items()}
    stats = {k: {"mean": v.mean(axis=0).tolist(), "variance": v.var(axis=0).tolist()} for k, v in train.items()}

    before_import = time.monotonic()
    tf = import_tensorflow()
    started += time.monotonic() - before_import  # the throughput counts our work, not the import
    manifest = {
        "version": data.MANIFEST_VERSION,
        "input_fingerprint": fingerprint,
        "inputs": inputs,
        "features": [{"name": f["name"], "shape": f["shape"]} for f in data_spec["features"]],
        "label": data_spec["label"],
        "eval_fraction": data_spec["eval_fraction"],
        "stats": stats,
        "class_counts": np.bincount(labels, minlength=num_classes).tolist(),
    }
    with publish_dir(args.out) as tmp:
        for split, rows in (("train", ~is_eval), ("eval", is_eval)):
            shards = []
            for i in range(n):
                mask = rows & (shard == i)
                name = data.shard_name(split, i, n)
                path = os.path.join(tmp, name)
                data.write_shard(tf, path, {k: v[mask] for k, v in features.items()}, labels[mask],
                                 data_spec["label"]["name"])
                shards.append({"file": name, "examples": int(mask.sum()), "bytes": os.path.getsize(path),
                               "sha256": sha256_file(path)})
            manifest[split] = {"examples": int(rows.sum()), "shards": shards}
        write_json_atomic(os.path.join(tmp, "manifest.json"), manifest)
    write_result(args.result, args.out, manifest)
    say(f"wrote {manifest['train']['examples']} train and {manifest['eval']['examples']} eval examples "
        f"in {n}+{n} shards to {args.out}")
    seconds = time.monotonic() - started
    records = len(labels)
    megabytes = sum(os.path.getsize(os.path.join(args.out, s["file"])) for split in ("train", "eval")
                    for s in manifest[split]["shards"]) / 1e6
    say(f"throughput: {records} records, {megabytes:.2f} MB in {seconds:.3f}s: {records / seconds:.0f} records/s, "
        f"{megabytes / seconds:.2f} MB/s")


if __name__ == "__main__":
    run_stage(main)
