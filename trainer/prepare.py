"""Stage prepare_data: the run's input → train/eval TFRecord shards + manifest.json, published atomically.

The input streams through in chunks, so memory does not grow with it, in P writers (data.prepare_processes;
default: one per 32 MB of input, up to this process's cores), each reading a contiguous share of the input's
pieces and writing its rows to its own part of every shard. The parts are joined in order, so the shards
hold the same bytes whatever P. The writers are processes of this one, or (``--pods P``, on Kubernetes) the
stage's P pods, which meet in a directory of the try (on the shared artifact volume, or in the object store
holding the artifact root): pod 0 plans the shares, waits for the others' parts and publishes. Re-running with
the same input (same files, same bytes, same data spec) reuses the existing result."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import hashlib
import itertools
import math
import multiprocessing
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, NoReturn

import fsspec
import numpy as np

from tfdist.contract.data_records import (
    BinScheme,
    CategoricalEntry,
    CategoricalListEntry,
    CategoricalStatistics,
    ClassStatistics,
    DataStatistics,
    FeatureEntry,
    FirstRow,
    InputFile,
    InputPiece,
    LabelEntry,
    Manifest,
    ManifestHead,
    Normalization,
    NumericEntry,
    NumericStatistics,
    PieceTally,
    PodResult,
    PodsPlan,
    PrepareResult,
    Shard,
    Split,
    SplitStatistics,
    TargetStatistics,
    VocabularyFile,
)
from tfdist.contract.launch import EXIT_REFUSED, THREADS_ENV
from tfdist.contract.layout import MANIFEST
from tfdist.contract.records import read_record, read_record_if_exists, write_record
from tfdist.contract.stages import PrepareArgs
from tfdist.infra import storage
from tfdist.infra.jsonfiles import digest_json, sha256_file
from tfdist.publishing import registry
from tfdist.spec import CategoricalListFeature, NumericFeature
from tfdist.spec.data import MAX_CLASSES
from tfdist.spec.sizing import embedding_dim
from tfdist.trainer import data, readers, statistics
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say, usable_cores

if TYPE_CHECKING:
    from tfdist.spec import Categorical, DataSpec, Feature, Label

HASH_BLOCK = 8 << 20
BYTES_PER_WRITER = 32 << 20
"""Without data.prepare_processes, a writer process (a TensorFlow import: seconds, and ~600 MB) is added per
this much input, up to the cores."""


def input_fingerprint(files: list[tuple[str, int]], data_spec: DataSpec, threads: int) -> tuple[str, list[InputFile]]:
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
    inputs = [InputFile(path=url, bytes=size, sha256=d) for (url, size), d in zip(files, digests, strict=True)]
    data_section = data_spec.model_dump(mode="json", exclude={"checks"})  # loosening a check prepares nothing again
    listed = [i.model_dump(mode="json") for i in inputs]
    return digest_json({"inputs": listed, "data": data_section, "version": data.MANIFEST_VERSION}), inputs


def write_result(path: str, data_dir: str, manifest: Manifest) -> None:
    """The stage's result record (the task's XCom)."""
    result = PrepareResult(
        data_dir=data_dir,
        train_examples=manifest.train.examples,
        eval_examples=manifest.eval.examples,
        input_fingerprint=manifest.input_fingerprint,
    )
    write_record(path, result)


@dataclass(frozen=True)
class Share:
    """What one writer process reads (its pieces, in input order) and where it writes its parts."""

    writer: int
    pieces: list[readers.Piece]
    parts_dir: str
    data_spec: DataSpec
    own_process: bool
    fold: bool
    """Its pieces start the input and its result comes back as objects: it merges their value counts itself, in
    the order the stage merges them (the other writers hand each piece's on in a file)."""


def part_path(parts_dir: str, split: str, shard: int, writer: int) -> str:
    return os.path.join(parts_dir, f"{split}-{shard:05d}.{writer:05d}")


SPLITS = ("train", "eval")


class PieceResult:
    """What a writer learns of one piece in the pass that writes its rows: rows per split and shard, the label's
    class counts per split, the train rows' moments and every row's statistics per numeric feature (and per
    regression target, under the label's name), the negative value of a binary label, and the categorical
    features' value counts (merged in memory by the first writer, kept in a file of the parts directory by the
    others: memory stays flat however many pieces)."""

    def __init__(self, spec: DataSpec) -> None:
        self.spec = spec
        self.counts = {split: np.zeros(spec.num_shards, np.int64) for split in SPLITS}
        self.classes: dict[str, Counter] = {split: Counter() for split in SPLITS}
        self.train: dict[str, dict] = {}
        self.statistics: dict[str, dict] = {}
        self.values = {f.name: statistics.ValueCounts(value_capacity(f)) for f in spec.categorical_features}
        self.values_file: str | None = None
        """Where the value counts went (``keep_values``): a file's name in the parts directory."""
        self.negative: readers.Negative = None

    def add(self, chunk: readers.Chunk, is_eval: np.ndarray, shard: np.ndarray) -> None:
        spec = self.spec
        numbers = dict(chunk.numeric)
        if readers.label_storage(spec.label) == "value":
            numbers[spec.label.name] = chunk.labels[:, None]
        else:
            self._count_classes(chunk.labels, is_eval)
        for split, rows in (("train", ~is_eval), ("eval", is_eval)):
            self.counts[split] += np.bincount(shard[rows], minlength=spec.num_shards)
        for name, v in numbers.items():
            train = statistics.moments(v[~is_eval])
            every = statistics.merged(train, statistics.moments(v[is_eval]))
            self.train[name] = _merged(self.train.get(name), train)
            self.statistics[name] = _merged(self.statistics.get(name), statistics.of_chunk(v, every))
        for name, values in chunk.categorical.items():
            self.values[name].add(values.flat, chunk.rows, values.missing(), values.digests)
        self.negative = readers.same_negative(self.negative, chunk.negative, spec.label.name)

    def _count_classes(self, labels: Any, is_eval: np.ndarray) -> None:
        for split, rows in (("train", ~is_eval), ("eval", is_eval)):
            chosen = itertools.compress(labels, rows) if isinstance(labels, list) else labels[rows].tolist()
            self.classes[split].update(chosen)
        self.check_classes()

    def check_classes(self) -> None:
        """Refuse more than MAX_CLASSES classes (a multiclass label learning them: an id, or a price?)."""
        if len(self.classes["train"] | self.classes["eval"]) > MAX_CLASSES:
            raise readers.BadData(
                f"data.label '{self.spec.label.name}': more than {MAX_CLASSES} classes in the input; is it a "
                "regression target (data.label.task: regression), or an id?"
            )

    def keep_values(self, parts_dir: str, file_name: str) -> None:
        """Move the value counts to the .npz file ``file_name`` in the parts directory."""
        arrays: dict[str, Any] = {
            f"{name}.{k}": v for name, counts in self.values.items() for k, v in counts.to_arrays().items()
        }
        path = os.path.join(parts_dir, file_name)
        with storage.naming(path), open(path, "wb") as f:
            np.savez(f, **arrays)
        self.values, self.values_file = {}, file_name

    def tally(self) -> PieceTally:
        """Exactly, as its record (a pod hands its pieces' results to pod 0 this way)."""
        negative = self.negative and (self.negative[0], FirstRow(**dataclasses.asdict(self.negative[1])))
        return PieceTally(
            counts={split: v.tolist() for split, v in self.counts.items()},
            classes={split: [(_json_key(k), n) for k, n in c.items()] for split, c in self.classes.items()},
            train={name: statistics.to_json(s) for name, s in self.train.items()},
            statistics={name: statistics.to_json(s) for name, s in self.statistics.items()},
            values_file=self.values_file,
            negative=negative,
        )

    @classmethod
    def of_tally(cls, spec: DataSpec, tally: PieceTally) -> PieceResult:
        result = cls(spec)
        result.counts = {split: np.asarray(v, np.int64) for split, v in tally.counts.items()}
        result.classes = {
            split: Counter({k.encode() if isinstance(k, str) else k: n for k, n in pairs})
            for split, pairs in tally.classes.items()
        }
        result.train = {name: statistics.from_json(s) for name, s in tally.train.items()}
        result.statistics = {name: statistics.from_json(s) for name, s in tally.statistics.items()}
        result.values, result.values_file = {}, tally.values_file
        negative = tally.negative
        result.negative = negative and (negative[0], readers.Where(**negative[1].model_dump()))
        return result


@dataclass
class ShareResult:
    """What a writer hands back: a PieceResult per piece of its share, in input order, their value counts merged
    (Share.fold; else None) and the seconds its TensorFlow import took (not the stage's work)."""

    pieces: list[PieceResult]
    values: dict[str, statistics.ValueCounts] | None = None
    import_seconds: float = 0.0


def value_capacity(feature: Categorical) -> int:
    return statistics.capacity(feature.encoding.max_tokens if feature.encoding else 0)


def _merged(a: dict | None, b: dict) -> dict:
    return b if a is None else statistics.merged(a, b)


def _json_key(key: int | bytes) -> int | str:
    return key.decode() if isinstance(key, bytes) else key


def write_rows(examples: data.ExampleWriter, chunk: readers.Chunk, group: np.ndarray, open_part) -> None:
    """Write the chunk's rows to their group's part (``group``: per row, split × num_shards + shard), each in
    input order."""
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(group.max(initial=0) + 2))
    columns = examples.columns(chunk)
    for g in np.flatnonzero(np.diff(bounds)).tolist():
        examples.write(open_part(g), columns, order[bounds[g] : bounds[g + 1]].tolist())


def write_share(share: Share) -> ShareResult:
    """Read the share's pieces chunk by chunk, write each row to its split and shard's part file; what it learned."""
    if not share.pieces:
        return ShareResult([])
    spec = share.data_spec
    if share.own_process:
        os.environ[THREADS_ENV] = "1"  # one core per writer process
    before = time.monotonic()
    tf = import_tensorflow()
    gc.freeze()  # TensorFlow's objects: a collection would walk them all, each time the writer's garbage is swept
    imported = time.monotonic() - before
    n = spec.num_shards
    examples = data.ExampleWriter(tf, spec)
    parts: dict[int, Any] = {}

    def open_part(group: int):
        if group not in parts:
            split, shard = SPLITS[group // n], group % n
            parts[group] = tf.io.TFRecordWriter(part_path(share.parts_dir, split, shard, share.writer))
        return parts[group]

    results, negative = [], None
    folded = PieceResult(spec).values if share.fold else None
    try:
        for k, piece in enumerate(share.pieces):
            result = PieceResult(spec)
            for chunk in readers.chunks(piece, spec):
                is_eval, shard = data.split_and_shard(data.row_hashes(chunk), spec.eval_fraction, n)
                write_rows(examples, chunk, shard + n * is_eval, open_part)
                result.add(chunk, is_eval, shard)
            negative = readers.same_negative(negative, result.negative, spec.label.name)
            if folded is None:
                result.keep_values(share.parts_dir, f"values-{share.writer:05d}-{k:05d}.npz")
            else:
                for name, counts in result.values.items():
                    folded[name].merge(counts)
                result.values = {}
            results.append(result)
    finally:
        for part in parts.values():
            part.close()
    return ShareResult(results, folded, imported)


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


def write_all(runs: list[list[readers.Piece]], data_spec: DataSpec, parts_dir: str) -> list[ShareResult]:
    """Each run's write_share result: in this process when one writer does it all, else in a pool of writer
    processes."""
    first, several = next(k for k, run in enumerate(runs) if run), sum(map(bool, runs)) > 1
    work = [Share(k, run, parts_dir, data_spec, several, k == first) for k, run in enumerate(runs) if run]
    try:
        if len(work) == 1:
            return [write_share(work[0])]
        with multiprocessing.get_context("spawn").Pool(len(work)) as pool:
            return pool.map(write_share, work, chunksize=1)
    except readers.BadData as exc:
        refuse(exc)


class Pods:
    """The stage's pods on Kubernetes (``--pods``; this one is JOB_COMPLETION_INDEX), meeting in ``directory``
    (one per task try) on the shared artifact volume or in the object store holding the artifact root: pod 0
    writes the plan (each pod's share of the input, or that the data is reused), every other pod writes its parts
    and then its result, pod 0 waits for them. In a store, each pod writes its parts on its own disk and the others
    upload theirs, which pod 0 downloads beside its own."""

    def __init__(self, directory: str, count: int) -> None:
        self.dir, self.count, self.index = directory, count, int(os.environ["JOB_COMPLETION_INDEX"])
        self.in_store = storage.is_object_store(directory)
        self.poll_seconds = 1.0 if self.in_store else 0.2  # in a store, each look is a request
        self.shared_parts = None if self.in_store else os.path.join(directory, "parts")
        self.plan_path = storage.join(directory, "plan.json")

    def publish_plan(self, plan: PodsPlan) -> None:
        """Pod 0: the plan; earlier tries' directories are removed."""
        tries = storage.parent(self.dir)
        for earlier in storage.names(tries):
            if earlier.startswith("pods-try-") and storage.join(tries, earlier) != self.dir:
                storage.remove_tree(storage.join(tries, earlier))
        if self.shared_parts:
            os.makedirs(self.shared_parts, exist_ok=True)
        write_record(self.plan_path, plan)

    def wait_plan(self) -> PodsPlan:
        while not storage.exists(self.plan_path):
            time.sleep(self.poll_seconds)
        return read_record(self.plan_path, PodsPlan)

    @contextlib.contextmanager
    def own_parts(self) -> Iterator[str]:
        """Another pod: the directory to write its parts in (in a store, one on its disk, removed afterwards)."""
        if self.shared_parts:
            yield self.shared_parts
            return
        local = tempfile.mkdtemp(prefix="tfdist-parts-")
        try:
            yield local
        finally:
            shutil.rmtree(local)

    def result_path(self, pod: int) -> str:
        return storage.join(self.dir, f"result-{pod}.json")

    def write_result(self, result: ShareResult, parts_dir: str) -> None:
        """Another pod: its parts handed over (uploaded, in a store), then its result."""
        if self.in_store:
            storage.upload_tree(parts_dir, storage.join(self.dir, "parts"))
        pieces = [p.tally() for p in result.pieces]
        write_record(self.result_path(self.index), PodResult(pieces=pieces, import_seconds=result.import_seconds))

    def wait_results(self, data_spec: DataSpec, parts_dir: str) -> list[ShareResult]:
        """Pod 0: every other pod's write_share result, in pod order; their parts then in ``parts_dir``, beside
        its own."""
        results = []
        for k in range(1, self.count):
            while not storage.exists(path := self.result_path(k)):
                time.sleep(self.poll_seconds)
            pod = read_record(path, PodResult)
            pieces = [PieceResult.of_tally(data_spec, p) for p in pod.pieces]
            results.append(ShareResult(pieces, None, pod.import_seconds))
        if self.in_store:
            storage.download_tree(storage.join(self.dir, "parts"), parts_dir)
        return results


def write_share_of_pod(pods: Pods, data_spec: DataSpec) -> None:
    """A pod other than pod 0: once the plan is there, write its share (unless the data is reused)."""
    plan = pods.wait_plan()
    if plan.shares is None:
        return
    share = [readers.Piece(**p.model_dump()) for p in plan.shares[pods.index]]
    with pods.own_parts() as parts_dir:
        try:
            result = write_share(Share(pods.index, share, parts_dir, data_spec, False, False))
        except readers.BadData as exc:
            refuse(exc)
        pods.write_result(result, parts_dir)


def join_parts(parts_dir: str, out_dir: str, split: str, shard: int, name: str) -> dict[str, Any]:
    """The shard from its writers' parts, in writer order (one part: moved); its size and sha256."""
    path = os.path.join(out_dir, name)
    parts = sorted(os.path.join(parts_dir, p) for p in os.listdir(parts_dir) if p.startswith(f"{split}-{shard:05d}."))
    if len(parts) == 1:
        os.replace(parts[0], path)
        return {"file": name, "bytes": os.path.getsize(path), "sha256": sha256_file(path)}
    digest, size = hashlib.sha256(), 0
    with storage.naming(path), open(path, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while block := f.read(HASH_BLOCK):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    return {"file": name, "bytes": size, "sha256": digest.hexdigest()}


def reuse_prepared(args: PrepareArgs, pods: Pods | None, fingerprint: str) -> bool:
    """Whether the output directory already holds data prepared from this input (then its result is written);
    refuse one holding anything else."""
    path = storage.join(args.out, MANIFEST)
    if head := read_record_if_exists(path, ManifestHead):
        if head.input_fingerprint == fingerprint:  # of the same layout version: the fingerprint digests it
            if pods:
                pods.publish_plan(PodsPlan(reuse=True))
            say(f"reusing prepared data in {args.out}: same input fingerprint {fingerprint[:12]}")
            write_result(args.result, args.out, read_record(path, Manifest))
            return True
        fail(
            f"{args.out} holds data prepared from other input; move it away to prepare this run's data again",
            EXIT_REFUSED,
        )
    if not storage.is_object_store(args.out) and os.path.exists(args.out):  # in a store: a crashed upload's
        fail(f"{args.out} exists without a manifest; move it away to prepare this run's data again", EXIT_REFUSED)
    return False


def write_parts(
    runs: list[list[readers.Piece]], data_spec: DataSpec, pods: Pods | None, tmp: str
) -> tuple[list[ShareResult], str]:
    """(every writer's write_share result, the directory of their parts): the pods' (pod 0 writes the first run),
    or this process's writers' in ``tmp``."""
    if pods:
        parts_dir = pods.shared_parts or os.path.join(tmp, "parts")
        pods.publish_plan(PodsPlan(shares=[[InputPiece(**dataclasses.asdict(p)) for p in run] for run in runs]))
        say(f"shared the input among {pods.count} pods (plan in {pods.dir}); writing this pod's share")
        os.makedirs(parts_dir, exist_ok=True)
        try:
            first = write_share(Share(0, runs[0], parts_dir, data_spec, False, True))
        except readers.BadData as exc:
            refuse(exc)
        return [first, *pods.wait_results(data_spec, parts_dir)], parts_dir
    os.makedirs(parts_dir := os.path.join(tmp, "parts"))
    return write_all(runs, data_spec, parts_dir), parts_dir


def row_counts(total: PieceResult, files: list[tuple[str, int]], writers: str) -> dict[str, np.ndarray]:
    """Rows per split and shard, logged with the files and ``writers`` that read them; an input without rows, or
    with too few for the train shards, is refused."""
    counts = total.counts
    records = int(counts["train"].sum() + counts["eval"].sum())
    say(f"read {records} rows from {len(files)} file(s) by {writers}")
    if not records:
        fail(f"the input has no rows: {', '.join(url for url, _ in files)} (an empty partition for this run's window?)")
    if (counts["train"] == 0).any():
        fail(
            f"{records} rows are too few for {len(counts['train'])} train shards (data.num_shards): some shard would "
            "be empty"
        )
    return counts


def merged_results(done: list[ShareResult], data_spec: DataSpec, parts_dir: str) -> PieceResult:
    """The writers' pieces' results merged in input order: the value counts the first writer merged itself, then
    each later piece's, read back from its file in ``parts_dir``."""
    total = PieceResult(data_spec)
    total.values = next((d.values for d in done if d.values), total.values)
    for r in (r for d in done for r in d.pieces):
        for split in SPLITS:
            total.counts[split] += r.counts[split]
            total.classes[split].update(r.classes[split])
        total.train = {name: _merged(total.train.get(name), s) for name, s in r.train.items()}
        total.statistics = {name: _merged(total.statistics.get(name), s) for name, s in r.statistics.items()}
        if r.values_file:
            with np.load(os.path.join(parts_dir, r.values_file)) as arrays:
                for name, counts in total.values.items():
                    fields = {k.split(".", 1)[1]: arrays[k] for k in arrays.files if k.startswith(f"{name}.")}
                    counts.merge(statistics.ValueCounts.from_arrays(fields))
        total.negative = readers.same_negative(total.negative, r.negative, data_spec.label.name)
    total.check_classes()
    return total


def train_stats(data_spec: DataSpec, total: PieceResult) -> dict[str, Normalization]:
    """Each numeric feature's mean and variance per element over the train rows' values; a feature element
    without a value in any train row is refused."""
    stats = {}
    for f in data_spec.numeric_features:
        s = total.train[f.name]
        if not s["count"].all():
            element = f.name if not f.shape else f"{f.name}[{int(np.argmin(s['count']))}]"
            fail(
                f"data.features '{element}': no train row has a value, so it has no mean to stand for its missing "
                "values; check the input's column (or field) name, or drop the feature. Nothing was published",
                EXIT_REFUSED,
            )
        stats[f.name] = Normalization(mean=s["mean"].tolist(), variance=(s["m2"] / s["count"]).tolist())
    return stats


def label_classes(label: Label, total: PieceResult) -> tuple[list, list[str | None]]:
    """(the label's class keys as the chunks hold them, by class index; their names) for multiclass and binary."""
    storage = readers.label_storage(label)
    if storage == "binary":
        return [0, 1], readers.binary_classes(label, total.negative and total.negative[0])
    if storage == "index":
        names = label.class_names or []
        return list(range(len(names))), list(names)
    seen = sorted({k.decode() for c in total.classes.values() for k in c})
    if all(re.fullmatch(r"-?\d+", name) for name in seen):
        seen.sort(key=int)
    if len(seen) < 2:
        fail(
            f"data.label '{label.name}': the input holds {len(seen)} class ({', '.join(seen)}); a multiclass task "
            "needs at least 2 (a binary one: data.label.task: binary). Nothing was published",
            EXIT_REFUSED,
        )
    return [name.encode() for name in seen], list(seen)


def label_record(label: Label, total: PieceResult, classes: list[str | None]) -> LabelEntry:
    """The manifest's label (docs/tabular.md)."""
    mean, std = None, None
    if label.task == "regression":
        s = total.train[label.name]
        seen, spread = float(s["mean"][0]), math.sqrt(s["m2"][0] / max(int(s["count"][0]), 1))
        mean, std = (seen, spread or 1.0) if label.standardize else (0.0, 1.0)
    return LabelEntry(
        name=label.name,
        task=label.task,
        stored=readers.label_storage(label),
        classes=classes or None,
        num_classes=len(classes) or None,
        positive=classes[1] if label.task == "binary" else None,
        mean=mean,
        std=std,
    )


def write_vocabularies(
    data_spec: DataSpec, ranked: dict[str, list[tuple[bytes, int]]], out_dir: str
) -> dict[str, VocabularyFile]:
    """Each vocabulary feature's tokens to ``vocabularies/<name>.json`` in ``out_dir``; its record (file, size,
    sha256). A vocabulary of no token is refused."""
    records = {}
    for f in data_spec.categorical_features:
        if (v := f.encoding) is None:
            continue
        tokens = statistics.vocabulary(ranked[f.name], v.min_count, v.max_tokens)
        if not tokens:
            most = ranked[f.name][:1]
            seen = f"the most frequent, {most[0][0].decode()!r}, {most[0][1]} times" if most else "no value at all"
            fail(
                f"data.features '{f.name}': its vocabulary would have no token: no value was seen min_count "
                f"({v.min_count}) times ({seen}); lower data.features[].vocabulary.min_count, or use hash_buckets. "
                "Nothing was published",
                EXIT_REFUSED,
            )
        content = ("[\n" + ",\n".join(map(encode_basestring, tokens)) + "\n]").encode()  # json.dumps(indent=0), in C
        name = f"{registry.VOCABULARIES}/{f.name}.json"
        os.makedirs(os.path.join(out_dir, registry.VOCABULARIES), exist_ok=True)
        path = os.path.join(out_dir, name)
        with storage.naming(path), open(path, "wb") as file:
            file.write(content)
        records[f.name] = VocabularyFile(file=name, size=len(tokens), sha256=hashlib.sha256(content).hexdigest())
    return records


def feature_record(feature: Feature, vocabulary: VocabularyFile | None) -> FeatureEntry:
    """The manifest's record of a feature (docs/tabular.md)."""
    if isinstance(feature, NumericFeature):
        return NumericEntry(
            name=feature.name, kind="numeric", shape=feature.shape, missing_indicator=feature.missing_indicator
        )
    v = feature.encoding
    ids = v.oov_buckets + vocabulary.size if v and vocabulary else feature.hash_buckets or 0
    common: dict[str, Any] = {
        "name": feature.name,
        "dtype": feature.dtype,
        "ids": ids,
        "embedding_dim": embedding_dim(feature, ids),
        "vocabulary": vocabulary,
        "oov_buckets": v.oov_buckets if v else 0,
        "hash_buckets": feature.hash_buckets,
    }
    if isinstance(feature, CategoricalListFeature):
        return CategoricalListEntry(
            **common, kind="categorical_list", combiner=feature.combiner, max_values=feature.max_values
        )
    return CategoricalEntry(**common, kind="categorical")


def data_statistics(
    data_spec: DataSpec,
    total: PieceResult,
    ranked: dict[str, list[tuple[bytes, int]]],
    keys: list,
    classes: list[str | None],
) -> DataStatistics:
    """What the data gate compares (docs/tabular.md): every row's statistics per feature and of the label, and
    per split the rows and the class counts."""
    label = data_spec.label
    label_stats: ClassStatistics | TargetStatistics
    if label.task == "regression":
        target = statistics.summary(total.statistics[label.name])
        label_stats = TargetStatistics(
            task=label.task, **{k: target[k][0] for k in ("count", "mean", "std", "min", "max", "histogram")}
        )
    else:
        both = total.classes["train"] + total.classes["eval"]
        label_stats = ClassStatistics(task=label.task, classes=classes, class_counts=[both[k] for k in keys])
    splits = {
        split: SplitStatistics(rows=int(total.counts[split].sum()))
        if label.task == "regression"
        else SplitStatistics(rows=int(total.counts[split].sum()), class_counts=[total.classes[split][k] for k in keys])
        for split in SPLITS
    }
    return DataStatistics(
        bins=BinScheme.model_validate(statistics.SCHEME),
        features={
            f.name: NumericStatistics.model_validate(statistics.summary(total.statistics[f.name]))
            for f in data_spec.numeric_features
        },
        categorical={
            f.name: CategoricalStatistics.model_validate(total.values[f.name].summary(ranked[f.name]))
            for f in data_spec.categorical_features
        },
        label=label_stats,
        train=splits["train"],
        eval=splits["eval"],
    )


def data_manifest(
    data_spec: DataSpec, fingerprint: str, inputs: list[InputFile], total: PieceResult, parts_dir: str, out_dir: str
) -> Manifest:
    """The manifest of the shards, joined into ``out_dir`` from the writers' parts, and of the vocabularies
    written there."""
    ranked = {f.name: total.values[f.name].ranked() for f in data_spec.categorical_features}
    vocabularies = write_vocabularies(data_spec, ranked, out_dir)
    keys, classes = label_classes(data_spec.label, total) if data_spec.label.task != "regression" else ([], [])
    data_stats = data_statistics(data_spec, total, ranked, keys, classes)
    n = data_spec.num_shards
    splits = {
        split: Split(
            examples=int(total.counts[split].sum()),
            shards=[
                Shard(
                    **join_parts(parts_dir, out_dir, split, i, data.shard_name(split, i, n)),
                    examples=int(total.counts[split][i]),
                )
                for i in range(n)
            ],
        )
        for split in SPLITS
    }
    classified: dict[str, Any] = {}  # the class counts: of a classified label only
    if isinstance(data_stats.label, ClassStatistics):
        classified["class_counts"] = data_stats.label.class_counts
    return Manifest(
        version=data.MANIFEST_VERSION,
        input_fingerprint=fingerprint,
        inputs=inputs,
        features=[feature_record(f, vocabularies.get(f.name)) for f in data_spec.features],
        label=label_record(data_spec.label, total, classes),
        eval_fraction=data_spec.eval_fraction,
        stats=train_stats(data_spec, total),
        statistics=data_stats,
        train=splits["train"],
        eval=splits["eval"],
        **classified,
    )


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
    with storage.staged(args.out, last=(MANIFEST,)) as tmp:
        runs = shares(readers.pieces(files, data_spec.format), processes)
        done, parts_dir = write_parts(runs, data_spec, pods, tmp)
        started += max(d.import_seconds for d in done)  # the throughput counts our work, not the import
        try:
            total = merged_results(done, data_spec, parts_dir)
        except readers.BadData as exc:
            refuse(exc)
        writers = f"{sum(map(bool, runs))} writer(s) ({'pods' if pods else 'processes'})"
        row_counts(total, files, writers)
        manifest = data_manifest(data_spec, fingerprint, inputs, total, parts_dir, tmp)
        if pods:
            storage.remove_tree(pods.dir)
        shutil.rmtree(parts_dir, ignore_errors=True)  # in tmp (on a volume, the pods' went with pods.dir)
        write_record(os.path.join(tmp, MANIFEST), manifest)
    write_result(args.result, args.out, manifest)
    n = data_spec.num_shards
    say(
        f"wrote {manifest.train.examples} train and {manifest.eval.examples} eval examples "
        f"in {n}+{n} shards to {args.out}"
    )
    seconds = time.monotonic() - started
    records = manifest.train.examples + manifest.eval.examples
    megabytes = sum(s.bytes for split in SPLITS for s in manifest.split(split).shards) / 1e6
    say(
        f"throughput: {records} records, {megabytes:.2f} MB in {seconds:.3f}s: {records / seconds:.0f} records/s, "
        f"{megabytes / seconds:.2f} MB/s"
    )


if __name__ == "__main__":
    run_stage(main)
