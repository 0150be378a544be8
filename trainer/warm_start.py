"""Warm start (``training.warm_start``): a run's first weights from the version the gate will compare it with.

The parent is the baseline (``registry.baseline_for``: the newest version published for a data interval ending no
later than this run's), restored from the training checkpoint kept beside it (``registry.WARM_START_CHECKPOINT``).
Every variable of the parent's model is restored, and the optimizer's state where the optimizer is the same (the
same variables, names and shapes). The run's step counter starts again at 0 (its epochs, checkpoints and data are
counted from it) and the learning rate is this run's; the optimizer keeps its own iteration count, to which Adam's
bias correction of the restored moments belongs (reset, it would shrink the first thousand steps' updates). All of
a run's processes start from the same parent: the first to look it up records its choice, the others take it.
Each process holds the parent (``registry.Reader``) from its choice, made under the model directory's lock, until
its training ends: no export's prune deletes it meanwhile, and a process of the same run that starts later still
finds it. A run not yet training holds nothing; it chooses among the versions left when it starts.
The feature normalization is this run's data's (it is built into the model from the data manifest, not
restored): the data gate has bounded how far that data moved from the parent's.

Variables are matched by their path in the checkpoint's object graph (``model/_operations/3/_kernel``) and shape.
When any of the model's differ (the spec's model changed), the run starts cold, naming them, or with
``on_mismatch: fail`` is refused. Only a run's first start warm-starts: a retry resumes from its own checkpoint.

A categorical feature's vocabulary may have changed since the parent (``vocabularies/`` beside each published
version): the rows of its tables (``<name>_embedding``, ``<name>_linear``) and of their optimizer slots are
matched by token. Rows of values in both vocabularies are carried over, new values keep this run's initial rows,
values gone are dropped; the out-of-vocabulary rows are carried when the bucket count is the same. The record says,
per feature, how many rows were carried, new and dropped."""

from __future__ import annotations

import collections
import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import create_record, read_record
from tfdist.contract.train_records import RunRecord, VocabularyRows, WarmStartChoice, WarmStartParent, WarmStartRecord
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json_if_exists
from tfdist.publishing import registry
from tfdist.trainer import scratch
from tfdist.trainer.runtime import fail

SHOWN_MISMATCHES = 10


def stored_variables(tf, prefix: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each variable of a checkpoint by its shortest object path below each top-level object (``model/...``,
    ``optimizer/...``: a variable both hold has a path under each), with its checkpoint key and shape."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for top in graph.nodes[0].children:
        queue, seen = collections.deque([(top.node_id, top.local_name)]), {top.node_id}
        while queue:
            node, path = queue.popleft()
            for attribute in graph.nodes[node].attributes:
                if attribute.name == "VARIABLE_VALUE":
                    found[path] = (attribute.checkpoint_key, tuple(shapes[attribute.checkpoint_key]))
            for child in graph.nodes[node].children:
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    queue.append((child.node_id, f"{path}/{child.local_name}"))
    return found


def live_objects(tf, root) -> dict[str, Any]:
    """Every object below ``root`` by its shortest path below each top-level object, as ``stored_variables``
    names the variables ``root`` writes."""
    view = tf.train.TrackableView(root)
    found: dict[str, Any] = {}
    for name, top in view.children(root).items():
        queue, seen = collections.deque([(top, name)]), {id(top)}
        while queue:
            obj, path = queue.popleft()
            found[path] = obj
            for local, child in view.children(obj).items():
                if id(child) not in seen:
                    seen.add(id(child))
                    queue.append((child, f"{path}/{local}"))
    return found


def first_paths(objects: dict[str, Any]) -> dict[int, str]:
    """Each object's first path (a variable the model and the optimizer both hold: the model's)."""
    found: dict[int, str] = {}
    for path, obj in objects.items():
        found.setdefault(id(obj), path)
    return found


def differences(
    ours: dict[str, tuple], parent: dict[str, tuple], part: str, model=None, by_token: frozenset[str] = frozenset()
) -> list[str]:
    """The variables under ``part`` ('model', 'optimizer') that are not in both with the same shape (those in
    ``by_token``, whose rows are matched by token, with the same width); with ``model``, each named by its layer
    too."""

    def same(n: str) -> bool:
        a, b = ours.get(n), parent.get(n)
        return a == b or (n in by_token and a is not None and b is not None and a[1:] == b[1:])

    return [
        f"{readable(n, model)} {list(ours[n]) if n in ours else 'absent'} here, "
        f"{list(parent[n]) if n in parent else 'absent'} in the parent"
        for n in sorted(n for n in {*ours, *parent} if n.startswith(part + "/"))
        if not same(n)
    ]


@dataclass(frozen=True)
class TokenRows:
    """Which rows of a table indexed by a vocabulary's ids come from which rows of the parent's (ids: the
    out-of-vocabulary buckets, then the tokens in order)."""

    ours: np.ndarray
    parents: np.ndarray
    counts: VocabularyRows

    @classmethod
    def between(cls, tokens: list[str], oov: int, parent_tokens: list[str], parent_oov: int) -> TokenRows:
        position = {token: parent_oov + i for i, token in enumerate(parent_tokens)}
        pairs = [(oov + i, position[t]) for i, t in enumerate(tokens) if t in position]
        carried = len(pairs)
        if oov == parent_oov:
            pairs += [(i, i) for i in range(oov)]
        ours, parents = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
        counts = VocabularyRows(
            carried=carried,
            new=len(tokens) - carried,
            dropped=len(parent_tokens) - carried,
            oov_rows="carried" if oov == parent_oov else f"fresh ({parent_oov} buckets in the parent, {oov} here)",
        )
        return cls(ours, parents, counts)

    def carried(self, ours: np.ndarray, parent: np.ndarray) -> np.ndarray:
        """Our table with the rows carried over from the parent's."""
        out = ours.copy()
        out[self.ours] = parent[self.parents]
        return out


def slots_of(layer, optimizers: dict[str, Any]) -> list:
    """The optimizer slots of a table layer's weights: the sparse optimizer's, else the Keras optimizer's (found by
    the weights' path)."""
    sparse = optimizers.get("embedding_optimizer")
    if sparse:
        return list(sparse.slots[layer.name].values())
    optimizer, table = optimizers["optimizer"], layer.embeddings
    slot = re.compile(rf"{re.escape(optimizer.name)}/{re.escape(table.path.replace('/', '_'))}_[a-z_]+")
    return [v for v in optimizer.variables if slot.fullmatch(v.path)]


def restore_shards(tf, variable, prefix: str, key: str, parent_rows: int, match: TokenRows | None) -> None:
    """A split table's rows from the checkpoint at ``prefix`` (``key``, ``parent_rows`` rows), each shard's read
    and written on its own ps task, never whole anywhere: its own rows, or with ``match`` the rows matched by token,
    gathered from the parent's table a shard's worth of rows at a time."""
    width, start = variable.shape[1], 0
    for piece in variable.variables:
        rows = piece.shape[0]
        if match is None:
            ours, parents = np.arange(rows), np.arange(start, start + rows)
        else:
            mine = (match.ours >= start) & (match.ours < start + rows)
            ours, parents = match.ours[mine] - start, match.parents[mine]
        with tf.device(piece.device):
            for first in range(0, parent_rows, rows):
                chunk = (parents >= first) & (parents < first + rows)
                if not chunk.any():
                    continue
                count = min(rows, parent_rows - first)
                value = tf.raw_ops.RestoreV2(
                    prefix=prefix,
                    tensor_names=[key],
                    shape_and_slices=[f"{parent_rows} {width} {first},{count}:-"],
                    dtypes=[piece.dtype],
                )[0]
                piece.scatter_update(tf.IndexedSlices(tf.gather(value, parents[chunk] - first), ours[chunk]))
        start += rows


def readable(path: str, model) -> str:
    """``model/_operations/4/_kernel`` as ``dense_1/kernel (model/_operations/4/_kernel)``."""
    found = re.fullmatch(r"model/_operations/(\d+)/_?(\w+)", path)
    if model is None or not found or int(found[1]) >= len(model.operations):
        return path
    return f"{model.operations[int(found[1])].name}/{found[2]} ({path})"


def weight_digests(model) -> list[tuple[str, str]]:
    """Each model variable's Keras path and sha256, in the model's order: which weights a run started from."""
    return [(v.path, hashlib.sha256(v.numpy().tobytes()).hexdigest()[:16]) for v in model.weights]


CHOICE = "warm_start_parent.json"
"""In the train stage's directory: the parent version the run's first process chose, which the others take."""


def agreed_parent(
    found: registry.PublishedVersion | None, model_dir: str, choice_file: str
) -> tuple[registry.PublishedVersion | None, str | None]:
    """(the parent every process of the run starts from, why there is none though one was chosen): ``found`` if this
    process is the first to record its choice (created whole, once: ``create_record``), else the version
    recorded, if it is still published."""
    choice = WarmStartChoice(version=found.version if found else None)
    if create_record(choice_file, choice):
        return found, None
    version = read_record(choice_file, WarmStartChoice).version
    chosen = next((m for m in registry.versions(model_dir) if m.version == version), None)
    gone = version is not None and chosen is None
    return (
        chosen,
        f"baseline version {version}, chosen by this run's first process, is published no more" if gone else None,
    )


class ParentRestore:
    """This run's parent, found from the run's record and the model directory (None, with the reason, if none)."""

    def __init__(self, spec, run_file: str, model_dir: str, record_file: str):
        self.settings = spec.training.warm_start
        self.reader: registry.Reader | None = None
        self.parent: registry.PublishedVersion | None = None
        self.cold_start: str | None = None
        if self.settings.source == "none":
            self.cold_start = "training.warm_start is none"
            return
        run = read_record(run_file, RunRecord)
        with registry.locked(model_dir):  # no prune between the choice and its hold
            self.parent, gone = agreed_parent(
                registry.baseline_for(model_dir, run.data_interval_end, run.run_id),
                model_dir,
                storage.join(storage.parent(record_file), CHOICE),
            )
            if self.parent:
                self.reader = registry.Reader(model_dir, self.parent.version, run.run_id)
        if self.parent is None:
            self.cold_start = gone or "no baseline: nothing published as of this data interval"
        elif not storage.exists(registry.warm_start_checkpoint(self.parent.path) + ".index"):
            self.cold_start = (
                f"baseline version {self.parent.version} keeps no training checkpoint (published by an earlier tfdist)"
            )

    def __enter__(self) -> ParentRestore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The parent is no longer held."""
        if self.reader:
            self.reader.release()

    def restore(self, tf, model, optimizers: dict[str, Any], manifest: Manifest, data_dir: str) -> WarmStartRecord:
        """Restore the parent into ``model`` (and ``optimizers``, by their part of the checkpoint: 'optimizer' and
        'embedding_optimizer', where they are the same, keeping this run's learning rate), the rows of tables by token
        (the vocabularies of ``manifest``, in ``data_dir``, and the parent's); the record of what was done. A mismatch
        starts cold, or refuses the stage with ``on_mismatch: fail``."""
        if self.cold_start or self.parent is None:
            return self.record(model)
        prefix = scratch.local_checkpoint(registry.warm_start_checkpoint(self.parent.path))
        checkpoint = tf.train.Checkpoint(model=model, **optimizers)
        with tempfile.TemporaryDirectory(prefix="tfdist-warm-start-") as ours_dir:
            written = stored_variables(tf, checkpoint.write(os.path.join(ours_dir, "ckpt")))
        objects = live_objects(tf, checkpoint)
        ours = {path: shape for path, (_, shape) in written.items()}
        stored = stored_variables(tf, prefix)
        parent = {path: shape for path, (_, shape) in stored.items()}
        rows, vocabularies = self.token_rows(objects, optimizers, parent, manifest, data_dir, self.parent.path)
        mismatched = differences(ours, parent, "model", model, frozenset(rows))
        if mismatched:
            reason = (
                f"{len(mismatched)} variable(s) of the model do not match baseline version "
                f"{self.parent.version}: " + "; ".join(mismatched[:SHOWN_MISMATCHES])
            )
            if self.settings.on_mismatch == "fail":
                fail(f"refusing to start cold (training.warm_start.on_mismatch is fail): {reason}", EXIT_REFUSED)
            self.cold_start = reason
            return self.record(model, mismatched)
        with_optimizer = not any(differences(ours, parent, part, by_token=frozenset(rows)) for part in optimizers)
        learning_rate = optimizers["optimizer"].learning_rate.numpy()
        reader, path_of = tf.train.load_checkpoint(prefix), first_paths(objects)
        for path in ours:  # the parent's step counter is not restored
            variable = objects[path]
            if path == path_of[id(variable)] and (path.startswith("model/") or with_optimizer):
                key, shape = stored[path]
                if hasattr(variable, "variables"):
                    restore_shards(tf, variable, prefix, key, shape[0], rows.get(path))
                elif path in rows:
                    variable.assign(rows[path].carried(variable.numpy(), reader.get_tensor(key)))
                else:
                    variable.assign(reader.get_tensor(key))
        optimizers["optimizer"].learning_rate.assign(learning_rate)
        restored = "model and optimizer" if with_optimizer else "model (another optimizer)"
        return self.record(model, restored=restored, vocabularies=vocabularies)

    @staticmethod
    def token_rows(
        objects: dict[str, Any],
        optimizers: dict[str, Any],
        parent: dict[str, tuple],
        manifest: Manifest,
        data_dir: str,
        parent_dir: str,
    ) -> tuple[dict[str, TokenRows], dict[str, VocabularyRows]]:
        """(the tables whose rows are matched by token, and their optimizer slots, by path; per feature, the rows
        carried, new and dropped), for each feature with a vocabulary whose tables the parent (in ``parent_dir``)
        has, with its vocabulary."""
        from tfdist.trainer.preprocessing import read_vocabulary

        path_of = first_paths(objects)
        layers = {obj.name: obj for path, obj in objects.items() if re.fullmatch(r"model/_operations/\d+", path)}
        rows: dict[str, TokenRows] = {}
        counts = {}
        for f in manifest.with_vocabulary:
            tables = [layers[n] for n in (f"{f.name}_embedding", f"{f.name}_linear") if n in layers]
            if not tables or path_of[id(tables[0].embeddings)] not in parent:
                continue
            parent_tokens = read_json_if_exists(storage.join(registry.vocabulary_dir(parent_dir), f"{f.name}.json"))
            if parent_tokens is None or f.vocabulary is None:
                continue
            match = TokenRows.between(
                read_vocabulary(data_dir, f.vocabulary),
                f.oov_buckets,
                parent_tokens,
                parent[path_of[id(tables[0].embeddings)]][0] - len(parent_tokens),
            )
            for layer in tables:
                rows |= {path_of[id(v)]: match for v in (layer.embeddings, *slots_of(layer, optimizers))}
            counts[f.name] = match.counts
        return rows, counts

    def record(
        self,
        model,
        mismatched: Sequence[str] = (),
        restored: str | None = None,
        vocabularies: dict[str, VocabularyRows] | None = None,
    ) -> WarmStartRecord:
        parent = self.parent if restored else None
        return WarmStartRecord(
            source=self.settings.source,
            on_mismatch=self.settings.on_mismatch,
            parent=WarmStartParent(
                version=parent.version,
                run_id=parent.metadata.run_id,
                path=parent.path,
                data_interval_end=parent.metadata.data_interval_end,
            )
            if parent
            else None,
            parent_final=parent.metadata.train_metrics if parent else None,
            restored=restored,
            cold_start=self.cold_start,
            mismatched=list(mismatched),
            vocabularies=vocabularies or {},
            normalization="this run's data",
            weights=weight_digests(model),
        )
