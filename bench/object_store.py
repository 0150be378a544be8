"""Artifacts in object storage (``make bench``, issue 39), against moto's S3 server in a process of its own on this
machine (tests/support/object_store.py: HTTP on loopback, no network latency, so the figures bound the cost of the
protocol and the copies, not of a real network).

- Shard reads: the records of a set of TFRecord shards into tf.data, each file's sha256 checked as the trainer
  does: from local files, staged (copied to scratch, checked, then read locally: ``scratch.fetch``), and streamed
  (read over HTTP, hashed and deframed as the bytes arrive, fed to tf.data from Python). The trainer stages.
- The whole digits pipeline (prepare → validate → train with 2 workers → evaluate → export, the local launcher) with
  a bucket as artifact root against a local one, runs alternating.
- Checkpoints: a checkpoint's save plus its upload against its save alone (the upload runs in a process of its own:
  the training thread pays the save only), and training throughput with frequent checkpoints uploaded to a bucket
  (at the default ``training.upload_every_seconds``, and each one) against saved locally. The S3 server stands in
  for a remote service, yet its CPU is this machine's: it runs at the upload process's priority (SCHED_IDLE), taking
  what the training leaves, as the uploads do."""

from __future__ import annotations

import hashlib
import os
import statistics
import time

from tests.support.object_store import S3Server
from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import write_digits_partitions
from tfdist.spec import TrainingSpec
from tfdist.trainer import scratch
from tfdist.trainer.readers import _framed_records
from tfdist.trainer.uploads import idle_priority

SHARDS = 8
CHECKPOINT_EVERY = 25
"""Steps between the checkpoints of the throughput runs: one every ~0.2 s of this machine's training, far more often
than a real run's (minutes apart)."""
PIPELINE_STAGES = ("prepare_data", "validate_data", "train", "evaluate", "export")


def write_shards(directory: str, records: int) -> list[str]:
    """SHARDS TFRecord files of digits-like tf.train.Examples (64 floats and a label), ``records`` in all."""
    import numpy as np
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    rng, names = np.random.default_rng(0), []
    for shard in range(SHARDS):
        names.append(f"train-{shard:05d}.tfrecord")
        with tf.io.TFRecordWriter(os.path.join(directory, names[-1])) as writer:
            for _ in range(records // SHARDS):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "pixel": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(64))),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(10))])),
                        }
                    )
                )
                writer.write(example.SerializeToString())
    return names


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def count(dataset) -> int:
    """The records of a tf.data pipeline, counted in the graph (as training consumes them: no Python per record)."""
    return int(dataset.reduce(0, lambda n, _: n + 1))


def read_local(directory: str, names: list[str]) -> int:
    """Check each file's sha256, then read its records through tf.data (the trainer's reader)."""
    import tensorflow as tf

    paths = [os.path.join(directory, n) for n in names]
    for path in paths:
        sha256(path)
    return count(tf.data.TFRecordDataset(paths, num_parallel_reads=4))


def read_staged(url_dir: str, names: list[str]) -> int:
    local = scratch.fetch(url_dir, names)
    try:
        return read_local(local, names)
    finally:
        storage.remove_tree(local)


class Hashed:
    """A file read through, its sha256 updated with every byte."""

    def __init__(self, raw) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def read(self, n: int) -> bytes:
        data = self.raw.read(n)
        self.digest.update(data)
        return data


def streamed_records(url_dir: str, names: list[str]):
    """Each file's records, read over HTTP once: hashed and deframed (length, data, CRC-32C each) as they arrive."""
    for name in names:
        with storage.open_file(storage.join(url_dir, name), "rb") as raw:
            stream, first = Hashed(raw), 0
            while chunk := _framed_records(stream, name, first):
                first += len(chunk)
                yield from chunk
            stream.digest.hexdigest()


def read_streamed(url_dir: str, names: list[str]) -> int:
    """The streamed records into tf.data (what a trainer reading the store directly would do: TensorFlow 2.21 has
    no s3:// file system)."""
    import tensorflow as tf

    records = tf.data.Dataset.from_generator(
        lambda: streamed_records(url_dir, names), output_signature=tf.TensorSpec([], tf.string)
    )
    return count(records)


def shard_reads(work: str, bucket: str, records: int, repetitions: int) -> dict:
    """Records/s of each way over the same shards, alternating their order."""
    local = os.path.join(work, "shards")
    names = write_shards(local, records)
    url = storage.join(bucket, "shards")
    storage.upload_tree(local, url)
    ways = {
        "local": lambda: read_local(local, names),
        "staged": lambda: read_staged(url, names),
        "streamed": lambda: read_streamed(url, names),
    }
    rates: dict[str, list[float]] = {way: [] for way in ways}
    ways["local"]()  # TensorFlow's start-up is no way's cost
    order = list(ways)
    for repetition in range(repetitions):
        for way in order if repetition % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            assert ways[way]() == records // SHARDS * SHARDS, way
            rates[way].append(records / (time.perf_counter() - started))
    megabytes = sum(os.path.getsize(os.path.join(local, n)) for n in names) / 1e6
    return {"records": records, "megabytes": megabytes, "records_per_s": rates}


def pipeline_seconds(root: str, run_id: str) -> float:
    """Seconds of the whole pipeline of the tests' small spec (2 workers) on DAY's partition under ``root``."""
    training = {"epochs": 4, "num_workers": 2, "checkpoint_every_steps": 20}
    plan = plan_for(root, run_id, training=training, validation={"thresholds": {"accuracy": {"lower": 0.5}}})
    started = time.perf_counter()
    for task_id in PIPELINE_STAGES:
        run(plan, task_id)
    return time.perf_counter() - started


def artifact_roots(work: str, bucket: str) -> dict[str, str]:
    """A local artifact root and one in the bucket, each holding DAY's digits partition."""
    roots = {"local": os.path.join(work, "local-root"), "bucket": storage.join(bucket, "root")}
    write_digits_partitions(os.path.join(roots["local"], "raw", "digits"), DAY, 1)
    storage.upload_tree(os.path.join(roots["local"], "raw"), storage.join(roots["bucket"], "raw"))
    return roots


def pipelines(roots: dict[str, str], repetitions: int) -> dict:
    seconds: dict[str, list[float]] = {"local": [], "bucket": []}
    for repetition in range(repetitions):
        for where in ("local", "bucket") if repetition % 2 == 0 else ("bucket", "local"):
            seconds[where].append(pipeline_seconds(roots[where], f"bench-{where}-{repetition}"))
    return seconds


def checkpoint_times(work: str, bucket: str, megabytes: int, repetitions: int) -> dict:
    """Seconds to save a checkpoint of ``megabytes`` of variables locally, and to upload it."""
    import tensorflow as tf

    weights = tf.Variable(tf.random.normal([megabytes * 1024 * 1024 // 4]))
    saves, uploads = [], []
    for repetition in range(repetitions):
        local = os.path.join(work, f"checkpoints-{repetition}")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(weights=weights), local, max_to_keep=2)
        started = time.perf_counter()
        manager.save(checkpoint_number=repetition)
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        scratch.checkpoint_upload(local, storage.join(bucket, f"checkpoints-{repetition}"), 2)()
        uploads.append(time.perf_counter() - started)
    return {"megabytes": megabytes, "save_seconds": saves, "upload_seconds": uploads}


TRAINING_WAYS = {"local": ("local", {}), "bucket": ("bucket", {}), "each": ("bucket", {"upload_every_seconds": 0})}
"""The throughput runs: their root, and what their training section adds (each: every checkpoint and record queued
for upload as it is written)."""


def training_rates(roots: dict[str, str], epochs: int, repetitions: int) -> dict:
    """Examples/s of the train stage checkpointing every CHECKPOINT_EVERY steps, each of TRAINING_WAYS (its data
    prepared where its root is), their order alternating."""
    rates: dict[str, list[float]] = {way: [] for way in TRAINING_WAYS}
    training = {"epochs": epochs, "num_workers": 2, "checkpoint_every_steps": CHECKPOINT_EVERY, "keep_checkpoints": 2}
    for repetition in range(repetitions):
        for way in list(TRAINING_WAYS) if repetition % 2 == 0 else list(TRAINING_WAYS)[::-1]:
            where, more = TRAINING_WAYS[way]
            plan = plan_for(roots[where], f"bench-rate-{way}-{repetition}", training={**training, **more})
            run(plan, "prepare_data")
            run(plan, "train")
            rates[way].append(read_json(plan.layout.result("train"))["examples_per_sec"])
    return rates


def measure(work: str, budget) -> dict:
    server = S3Server().start()
    idle_priority(server.process.pid)  # a remote service's stand-in
    try:
        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = server.airflow_connection  # the launcher's connection
        storage.configure("s3", server.options)
        bucket = f"s3://{server.new_bucket()}"
        roots = artifact_roots(work, bucket)
        return {
            "shard_reads": shard_reads(work, bucket, budget.store_records, budget.repetitions),
            "pipeline_seconds": pipelines(roots, budget.repetitions),
            "checkpoint": checkpoint_times(work, bucket, budget.store_checkpoint_mb, budget.repetitions),
            "training": training_rates(roots, budget.store_epochs, budget.repetitions),
        }
    finally:
        os.environ.pop("AIRFLOW_CONN_AWS_DEFAULT", None)
        server.stop()


def rows(results: dict, ratio_row) -> list[dict]:
    reads, checkpoint = results["shard_reads"]["records_per_s"], results["checkpoint"]
    seconds, rates = results["pipeline_seconds"], results["training"]
    return [
        ratio_row(
            "shard reads from the S3 server, staged (copied, checked, read) / local (checked, read)",
            reads["staged"],
            reads["local"],
            "report (the trainer stages)",
            lambda m: None,
        ),
        ratio_row(
            "shard reads from the S3 server into tf.data, streamed (hashed, deframed in Python) / staged",
            reads["streamed"],
            reads["staged"],
            "< 1 chooses staging",
            lambda m: m < 1,
        ),
        ratio_row(
            "the digits pipeline (5 stages, 2 workers), seconds with an S3 root / a local root",
            seconds["bucket"],
            seconds["local"],
            "≤ 1.3",
            lambda m: m <= 1.3,
        ),
        ratio_row(
            f"a {checkpoint['megabytes']} MB checkpoint, save + upload / save (the training thread waits for the save)",
            [s + u for s, u in zip(checkpoint["save_seconds"], checkpoint["upload_seconds"], strict=True)],
            checkpoint["save_seconds"],
            "report",
            lambda m: None,
        ),
        ratio_row(
            f"training examples/s, a checkpoint every {CHECKPOINT_EVERY} steps, uploaded to S3 (at most one per "
            f"upload_every_seconds, {TrainingSpec.model_fields['upload_every_seconds'].default:g}) / saved locally",
            rates["bucket"],
            rates["local"],
            "≥ 0.95 (uploads off the training thread)",
            lambda m: m >= 0.95,
        ),
        ratio_row(
            f"training examples/s, a checkpoint every {CHECKPOINT_EVERY} steps, each uploaded to S3 "
            "(upload_every_seconds: 0; a queued one dropped once keep_checkpoints later ones are) / saved locally",
            rates["each"],
            rates["local"],
            "report",
            lambda m: None,
        ),
    ]


def absolutes(results: dict) -> list[tuple[str, str]]:
    reads = results["shard_reads"]
    out = [
        (
            f"shard reads, {reads['records']:,} records ({reads['megabytes']:.1f} MB, {SHARDS} files): {way}",
            f"{statistics.median(rates):,.0f} records/s",
        )
        for way, rates in reads["records_per_s"].items()
    ]
    out += [
        (f"the digits pipeline, {where} root", f"{statistics.median(s):.1f} s")
        for where, s in results["pipeline_seconds"].items()
    ]
    checkpoint = results["checkpoint"]
    out += [
        (f"a {checkpoint['megabytes']} MB checkpoint: {what}", f"{statistics.median(checkpoint[key]):.2f} s")
        for what, key in (("local save", "save_seconds"), ("upload", "upload_seconds"))
    ]
    return out
