"""Warm start (``training.warm_start``): a run's first weights from the version the gate will compare it with.

The parent is the baseline (``registry.baseline_for``: the newest version published for a data interval ending no
later than this run's), restored from the training checkpoint kept beside it (``registry.WARM_START_CHECKPOINT``).
Every variable of the parent's model is restored, and the optimizer's state where the optimizer is the same (the
same variables, names and shapes). The run's step counter starts again at 0 (its epochs, checkpoints and data are
counted from it) and the learning rate is this run's; the optimizer keeps its own iteration count, to which Adam's
bias correction of the restored moments belongs (reset, it would shrink the first thousand steps' updates). All of
a run's processes start from the same parent: the first to look it up records its choice, the others take it.
The feature normalization is this run's data's (it is built into the model from the data manifest, not
restored): the data gate has bounded how far that data moved from the parent's.

Variables are matched by their path in the checkpoint's object graph (``model/_operations/3/_kernel``) and shape.
When any of the model's differ (the spec's model changed), the run starts cold, naming them, or with
``on_mismatch: fail`` is refused. Only a run's first start warm-starts: a retry resumes from its own checkpoint."""

from __future__ import annotations

import collections
import hashlib
import os
import re
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

from tfdist.contract import EXIT_REFUSED, read_json, registry, write_json_atomic
from tfdist.trainer.runtime import fail

SHOWN_MISMATCHES = 10


def variable_shapes(tf, prefix: str) -> dict[str, tuple[int, ...]]:
    """Each variable of a checkpoint by its shortest object path below each top-level object (``model/...``,
    ``optimizer/...``: a variable both hold has a path under each), with its shape."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    found: dict[str, tuple[int, ...]] = {}
    for top in graph.nodes[0].children:
        queue, seen = collections.deque([(top.node_id, top.local_name)]), {top.node_id}
        while queue:
            node, path = queue.popleft()
            for attribute in graph.nodes[node].attributes:
                if attribute.name == "VARIABLE_VALUE":
                    found[path] = tuple(shapes[attribute.checkpoint_key])
            for child in graph.nodes[node].children:
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    queue.append((child.node_id, f"{path}/{child.local_name}"))
    return found


def differences(ours: dict[str, tuple], parent: dict[str, tuple], part: str, model=None) -> list[str]:
    """The variables under ``part`` ('model', 'optimizer') that are not in both with the same shape; with
    ``model``, each named by its layer too."""
    names = sorted(n for n in {*ours, *parent} if n.startswith(part + "/"))
    return [
        f"{readable(n, model)} {list(ours[n]) if n in ours else 'absent'} here, "
        f"{list(parent[n]) if n in parent else 'absent'} in the parent"
        for n in names
        if ours.get(n) != parent.get(n)
    ]


def readable(path: str, model) -> str:
    """``model/_operations/4/_kernel`` as ``dense_1/kernel (model/_operations/4/_kernel)``."""
    found = re.fullmatch(r"model/_operations/(\d+)/_?(\w+)", path)
    if model is None or not found or int(found[1]) >= len(model.operations):
        return path
    return f"{model.operations[int(found[1])].name}/{found[2]} ({path})"


def weight_digests(model) -> list[list[str]]:
    """Each model variable's Keras path and sha256, in the model's order: which weights a run started from."""
    return [[v.path, hashlib.sha256(v.numpy().tobytes()).hexdigest()[:16]] for v in model.weights]


CHOICE = "warm_start_parent.json"
"""In the train stage's directory: the parent version the run's first process chose, which the others take."""


def agreed_parent(found: dict | None, model_dir: str, choice_file: str) -> tuple[dict | None, str | None]:
    """(the parent every process of the run starts from, why there is none though one was chosen): ``found`` if this
    process is the first to record its choice (created whole, once: a link to a complete file), else the version
    recorded, if it is still published."""
    scratch = f"{choice_file}.{uuid.uuid4().hex}"  # pods may share a pid
    write_json_atomic(scratch, {"version": found and found["version"]})
    try:
        os.link(scratch, choice_file)
        return found, None
    except FileExistsError:
        version = read_json(choice_file)["version"]
        chosen = next((m for m in registry.versions(model_dir) if m["version"] == version), None)
        gone = version is not None and chosen is None
        return (
            chosen,
            f"baseline version {version}, chosen by this run's first process, is published no more" if gone else None,
        )
    finally:
        os.remove(scratch)


class ParentRestore:
    """This run's parent, found from the run's record and the model directory (None, with the reason, if none)."""

    def __init__(self, spec, run_file: str, model_dir: str, record_file: str):
        self.settings = spec.training.warm_start
        self.parent: dict[str, Any] | None = None
        self.cold_start: str | None = None
        if self.settings.source == "none":
            self.cold_start = "training.warm_start is none"
            return
        run = read_json(run_file)
        self.parent, gone = agreed_parent(
            registry.baseline_for(model_dir, run["data_interval_end"], run["run_id"]),
            model_dir,
            os.path.join(os.path.dirname(record_file), CHOICE),
        )
        if self.parent is None:
            self.cold_start = gone or "no baseline: nothing published as of this data interval"
        elif not os.path.exists(registry.warm_start_checkpoint(self.parent["path"]) + ".index"):
            self.cold_start = (
                f"baseline version {self.parent['version']} keeps no training checkpoint "
                "(published by an earlier tfdist)"
            )

    def restore(self, tf, model, optimizer) -> dict[str, Any]:
        """Restore the parent into ``model`` (and ``optimizer`` where it is the same, keeping this run's learning
        rate); the record of what was done. A mismatch starts cold, or refuses the stage with ``on_mismatch:
        fail``."""
        if self.cold_start or self.parent is None:
            return self.record(model)
        prefix = registry.warm_start_checkpoint(self.parent["path"])
        with tempfile.TemporaryDirectory(prefix="tfdist-warm-start-") as scratch:
            ours = variable_shapes(
                tf, tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(scratch, "ckpt"))
            )
        parent = variable_shapes(tf, prefix)
        mismatched = differences(ours, parent, "model", model)
        if mismatched:
            reason = (
                f"{len(mismatched)} variable(s) of the model do not match baseline version "
                f"{self.parent['version']}: " + "; ".join(mismatched[:SHOWN_MISMATCHES])
            )
            if self.settings.on_mismatch == "fail":
                fail(f"refusing to start cold (training.warm_start.on_mismatch is fail): {reason}", EXIT_REFUSED)
            self.cold_start = reason
            return self.record(model, mismatched)
        with_optimizer = not differences(ours, parent, "optimizer")
        objects = {"model": model, **({"optimizer": optimizer} if with_optimizer else {})}
        learning_rate = optimizer.learning_rate.numpy()
        status = tf.train.Checkpoint(**objects).read(prefix)
        status.assert_existing_objects_matched().expect_partial()  # the parent's step counter is not restored
        optimizer.learning_rate.assign(learning_rate)
        return self.record(model, restored="model and optimizer" if with_optimizer else "model (another optimizer)")

    def record(self, model, mismatched: Sequence[str] = (), restored: str | None = None) -> dict[str, Any]:
        parent = self.parent if restored else None
        return {
            "from": self.settings.source,
            "on_mismatch": self.settings.on_mismatch,
            "parent": parent and {k: parent[k] for k in ("version", "run_id", "path", "data_interval_end")},
            "parent_final": parent and parent.get("train_metrics"),
            "restored": restored,
            "cold_start": self.cold_start,
            "mismatched": list(mismatched),
            "normalization": "this run's data",
            "weights": weight_digests(model),
        }
