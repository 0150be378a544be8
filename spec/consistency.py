"""The rules between the sections of a spec (``Spec.rules``), each with its JSON Schema where JSON Schema can say
it: the batch and the shards against the processes, the model against the task and the features, the schedule's
partitions against the source, Kubernetes' section and volume, the tables against the pods' memory, the gate, and
the fields a run may override."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from pydantic import BaseModel

from tfdist.spec import sizing
from tfdist.spec.families import CNNModel
from tfdist.spec.kubernetes import memory_bytes
from tfdist.spec.overrides import field_value, override_refusal
from tfdist.spec.rules import JsonSchema, Rule, equals, given
from tfdist.spec.schedule import PARTITION_PERIODS, SOURCE_PERIODS, partition_unit
from tfdist.spec.tasks import LOSSES, METRICS, direction

if TYPE_CHECKING:
    from tfdist.spec.model import Spec


def _batch_splits(spec: Spec) -> str | None:
    t = spec.training
    if t.global_batch_size % t.replicas:
        return (
            f"training.global_batch_size: must be a multiple of the {t.replicas} replicas "
            f"it is split across, got {t.global_batch_size}"
        )
    return None


def _shards_per_reader(spec: Spec) -> str | None:
    readers, shards = spec.training.data_readers, spec.data.num_shards
    if shards < readers:
        return (
            f"data.num_shards: must be ≥ the {readers} training processes so every one "
            f"reads its own shards, got {shards}"
        )
    return None


def _losses_and_metrics_of_the_task(spec: Spec) -> str | None:
    """The loss and the metrics the model reports are the label task's."""
    m, task = spec.model, spec.data.label.task
    if m.loss is not None and m.loss not in LOSSES[task]:
        return f"model.loss: {m.loss!r} is not a loss of task '{task}'; its losses: {', '.join(LOSSES[task])}"
    for reported in m.metrics or ():
        if reported not in METRICS[task]:
            return (
                f"model.metrics: {reported!r} is not a metric of task '{task}'; its metrics: {', '.join(METRICS[task])}"
            )
    return None


def _validated_metrics_reported(spec: Spec) -> str | None:
    """Every metric the validation names is one the model reports, and a change threshold has a direction."""
    v, task, known = spec.validation, spec.data.label.task, ("loss", *spec.metrics)
    named: list[tuple[str, str | None]] = [
        *((f"thresholds.{k}", k) for k in v.thresholds),
        *((f"change_thresholds.{k}", k) for k in v.change_thresholds),
        ("checkpoint.metric", v.checkpoint.metric),
    ]
    for path, metric in named:
        if metric is not None and metric not in known:
            return (
                f"validation.{path}: unknown metric {metric!r}; this model reports {', '.join(known)} "
                "(add it to model.metrics)"
                if metric in METRICS[task]
                else f"validation.{path}: unknown metric {metric!r}, not one of task '{task}': "
                f"{', '.join(['loss', *METRICS[task]])}"
            )
    for name, rule in v.change_thresholds.items():
        if rule.direction is None and direction(task, name) is None:
            return (
                f"validation.change_thresholds.{name}: {name} has no better direction (best at 1); give "
                "'direction', or bound it with a value threshold"
            )
    return None


def _cnn_inputs(spec: Spec) -> str | None:
    """'cnn' reshapes the numeric features, and only they, into its image."""
    d = spec.data
    if not isinstance(spec.model, CNNModel):
        return None
    if any(f.missing_indicator for f in d.numeric_features):
        return (
            "model.family: 'cnn' reshapes the numeric features into its image, which has no place for missing "
            "indicators; drop missing_indicator, or use 'mlp' or 'wide_deep'"
        )
    if d.categorical_features:
        return (
            f"model.family: 'cnn' takes numeric features only, '{d.categorical_features[0].name}' is categorical; "
            "use 'mlp' or 'wide_deep'"
        )
    return None


def _crosses_of_categorical_features(spec: Spec) -> str | None:
    categorical = {f.name for f in spec.data.categorical_features}
    for i, cross in enumerate(getattr(spec.model, "crosses", [])):
        if unknown := [name for name in cross.features if name not in categorical]:
            return (
                f"model.crosses[{i}].features: {unknown[0]!r} is not a categorical feature; categorical "
                f"features: {', '.join(sorted(categorical)) or 'none'}"
            )
    return None


def _image_holds_the_features(spec: Spec) -> str | None:
    m, size = spec.model, spec.data.input_size
    if isinstance(m, CNNModel) and math.prod(m.image_shape) != size:
        return (
            f"model.image_shape: {m.image_shape} holds {math.prod(m.image_shape)} values but the features hold {size}"
        )
    return None


def _kubernetes_section(spec: Spec) -> str | None:
    if spec.training.launcher == "kubernetes" and spec.kubernetes is None:
        return (
            "kubernetes: required with training.launcher 'kubernetes': at least "
            "kubernetes: {pods: {image: ...}} (and artifact_volume: {claim_name: ...} with a local artifact root)"
        )
    return None


_ON_KUBERNETES = {
    "if": {"properties": {"training": equals("launcher", "kubernetes")}, "required": ["training"]},
    "then": given("kubernetes", "object"),
}


def _one_window(spec: Spec) -> str | None:
    """A partitioned run trains on its partition: no window, and a source naming the partition's period or finer."""
    period = spec.partitioned
    if period and spec.data.window:
        return (
            "data.window: a partitioned schedule trains on exactly the partition its events name; "
            "drop data.window, or schedule without partitions"
        )
    unit = partition_unit(spec.data.source)
    if period and (unit is None or not _finer(unit, period)):
        return (
            f"data.source: each run reads its {period} partition, but the source names no "
            f"{period} or finer: put its time in the path, e.g. '.../{{date}}/*.csv'"
        )
    return None


def _finer(unit: str, period: str) -> bool:
    """Partitions of ``unit`` make up a ``period``."""
    return PARTITION_PERIODS.index(unit) <= PARTITION_PERIODS.index(period)


def _one_window_of(period: str) -> JsonSchema:
    """``_one_window`` in JSON Schema, for a schedule partitioned by ``period``."""
    finer = [name for unit, names in SOURCE_PERIODS for name in sorted(names) if _finer(unit, period)]
    partitioned = {
        "properties": {"schedule": {"type": "object", **equals("partitions", period)}},
        "required": ["schedule"],
    }
    source = {"pattern": rf"\{{({'|'.join(finer)})[!:}}]"}
    one_window = {"properties": {"window": {"type": "null"}, "source": source}}
    return {"if": partitioned, "then": {"properties": {"data": one_window}}}


def _split_tables_train_sparsely(spec: Spec) -> str | None:
    """A table split over parameter servers is trained by a sparse optimizer (the Keras optimizers' slots of its
    shards could not be restored into another number of shards)."""
    t = spec.training
    if t.strategy != "parameter_server" or spec.model.embedding_optimizer:
        return None
    split = [
        f"{name} ({size // sizing.COPIES_IN_TRAINING / 2**20:,.0f} MiB)"
        for name, size in sizing.max_table_bytes(spec).items()
        if sizing.shards(t, size) > 1
    ]
    if split:
        return (
            f"model.embedding_optimizer: the tables of {', '.join(split)} may be split over the parameter servers "
            f"(training.parameter_server.shard_min_bytes {t.parameter_server_settings.shard_min_bytes:,}); split "
            "tables train with a sparse optimizer: set model.embedding_optimizer to lazy_adam, adagrad or sgd, or "
            "raise shard_min_bytes"
        )
    return None


_SPLIT_TABLES = "split the tables over parameter servers (training.strategy parameter_server)"


def _embeddings_fit(spec: Spec) -> str | None:
    """The embedding tables fit the memory the train pods are given (on parameter servers: shared by them)."""
    k = spec.kubernetes
    role = "ps" if spec.training.strategy == "parameter_server" else "worker"
    memory = k and k.for_role(role).memory
    needed = sizing.tables_per_pod(spec)
    if memory and needed > memory_bytes(memory) // 2:
        split = "" if role == "ps" else f", or {_SPLIT_TABLES}"
        return (
            f"data.features: the embedding tables need up to {needed / 2**20:,.0f} MiB per {role} pod (with the "
            f"optimizer's slots), over half of its memory {memory}; lower vocabulary.max_tokens, hash_buckets "
            f"or embedding_dim, or give the {role} pods more memory (kubernetes.roles.{role}.memory){split}"
        )
    return None


def _on_the_volume(spec: Spec) -> str | None:
    """Pods see only the artifact volume, which a local artifact root needs and one in an object store has
    not: a local input or export root must be below a local artifact root; a URL is read from wherever the
    pods are."""
    if spec.kubernetes is None:
        return None
    root, in_store = spec.artifact_root, "://" in spec.artifact_root
    if in_store and spec.kubernetes.artifact_volume is not None:
        return (
            f"kubernetes.artifact_volume: pods mount no volume with the artifact root in an object store "
            f"({root}): remove it"
        )
    if not in_store and spec.kubernetes.artifact_volume is None:
        return (
            f"kubernetes.artifact_volume: required with a local artifact root ({root}): a "
            "ReadWriteMany PersistentVolumeClaim every pod mounts there, e.g. {claim_name: tfdist-artifacts}; "
            "or put the artifact root in an object store (s3://bucket/prefix, gs://bucket/prefix)"
        )
    source = spec.data.source.replace("{artifact_root}", root)
    for field, path in (("data.source", source), ("export.root", spec.export_root)):
        if "://" in path:
            continue
        if in_store:
            return (
                f"{field}: pods on Kubernetes have no artifact volume with the artifact root in an object "
                f"store ({root}); give a URL (e.g. '{{artifact_root}}/...')"
            )
        if os.path.commonpath([root, os.path.normpath(path)]) != root:
            return (
                f"{field}: pods on Kubernetes see only the artifact volume mounted at "
                f"{root}; put it below the artifact root (e.g. '{{artifact_root}}/...')"
            )
    return None


def _gated(spec: Spec) -> str | None:
    v = spec.validation
    if not (v.thresholds or v.change_thresholds or v.allow_unvalidated):
        return (
            "validation: no threshold is configured, so nothing would stop a bad model from being published; "
            "add a value threshold, e.g. validation: {thresholds: {accuracy: {lower: 0.9}}}, or a change "
            "threshold against the published baseline, e.g. validation: {change_thresholds: {accuracy: "
            "{direction: higher_is_better}}}; or, to publish every model that restores, say so: "
            "validation: {allow_unvalidated: true}"
        )
    return None


_A_GATE = {
    "anyOf": [
        {"properties": {"thresholds": {"minProperties": 1}}, "required": ["thresholds"]},
        {"properties": {"change_thresholds": {"minProperties": 1}}, "required": ["change_thresholds"]},
        equals("allow_unvalidated", True),
    ]
}


def _overridable_fields(spec: Spec) -> str | None:
    for path in spec.overridable:
        if reason := override_refusal(type(spec), path):
            return (
                f"overridable: {path!r} cannot be overridden by whoever triggers a run: {reason}; "
                f"only the DAG file sets it"
            )
        try:
            value = field_value(spec, path)
        except (AttributeError, KeyError):
            value = spec
        if isinstance(value, (BaseModel, dict)):
            return (
                f"overridable: {path!r} is not a field; give a dotted path to a single "
                f"value such as 'training.epochs' or 'model.learning_rate'"
            )
    return None


RULES: tuple[Rule[Spec], ...] = (
    Rule(_batch_splits),
    Rule(_shards_per_reader),
    Rule(_losses_and_metrics_of_the_task),
    Rule(_validated_metrics_reported),
    Rule(_cnn_inputs),
    Rule(_crosses_of_categorical_features),
    Rule(_image_holds_the_features),
    Rule(_kubernetes_section, schema=(_ON_KUBERNETES,)),
    Rule(_one_window, schema=tuple(_one_window_of(period) for period in PARTITION_PERIODS)),
    Rule(_split_tables_train_sparsely),
    Rule(_embeddings_fit),
    Rule(_on_the_volume),
    Rule(_gated, schema=(_A_GATE,), field="validation"),
    Rule(_overridable_fields),
)
"""In the order the model checks them: the first broken one is the error."""
