"""The spec's sections and the ``Spec`` they make up: field types, bounds, defaults and the checks across fields.

Each field's docstring is its description (the trigger form shows it; ``overrides.field_doc`` reads it); an
``AuthorOnly`` mark keeps a field from being overridden by whoever triggers a run."""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import math
import os
import re
import string
import urllib.parse
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from tfdist.spec.errors import SpecError, validated
from tfdist.spec.overrides import AuthorOnly, field_value, override_refusal, with_values
from tfdist.spec.tasks import DEFAULT_METRICS, LOSSES, METRICS, Direction, Task, direction

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
FACTORY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
SOURCE_PLACEHOLDERS = ("date", "year", "month", "day", "hour", "artifact_root")
MPI_ARG_PATTERN = r"^[^\x00\n]+$"
RESERVED_MPI_ARGS = ("-np", "-n", "-c", "--np", "-H", "--host", "-hostfile", "--hostfile", "--tag-output")


def default_artifact_root() -> str:
    """'$TFDIST_ARTIFACT_ROOT', else '~/tfdist'."""
    return _artifact_location(os.environ.get("TFDIST_ARTIFACT_ROOT", "~/tfdist"))


MAX_EPOCHS = 1000
"""The most ``training.epochs`` a spec, or a run's override, may ask for."""


PARSED = AuthorOnly("the DAG takes it when its file is parsed; a run cannot change it")
"""Fields the DAG and its tasks are built from at parse time."""
FAMILY = AuthorOnly("it chooses the model section itself, whose other fields change with it")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = _keys(cls)
            for key in data:
                if key not in allowed:
                    close = difflib.get_close_matches(str(key), allowed, n=1)
                    hint = f" (did you mean '{close[0]}'?)" if close else ""
                    raise ValueError(f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}")
        return data


@functools.cache
def _keys(section: type[BaseModel]) -> tuple[str, ...]:
    """The keys a section takes (a field's alias where it has one), in declaration order."""
    return tuple(info.alias or name for name, info in section.model_fields.items())


def _local_path(value: str) -> str:
    """Expand '~' and '$VARS'; an absolute local path."""
    expanded = os.path.expanduser(os.path.expandvars(value))
    if not os.path.isabs(expanded):
        raise ValueError(f"must be an absolute path (after expanding ~ and $VARS), got {value!r}")
    return os.path.normpath(expanded)


OBJECT_STORES = ("s3", "gs")
"""The object stores an artifact or export root may be in: their URL schemes."""
BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
"""A bucket's name as S3 and GCS take it (GCS also takes '_')."""


def _artifact_location(value: str) -> str:
    """An absolute local path (``_local_path``) or an object store's ``<scheme>://<bucket>[/<prefix>]``, its
    trailing '/' dropped; credentials never in it."""
    if "://" not in value:
        return _local_path(value)
    scheme, rest = value.split("://", 1)
    bucket, _, prefix = rest.rstrip("/").partition("/")
    if scheme not in OBJECT_STORES:
        raise ValueError(
            f"{value!r}: the object stores taken are {', '.join(s + '://' for s in OBJECT_STORES)}; "
            "or give a local path"
        )
    if "@" in bucket or ":" in bucket:
        raise ValueError(
            f"{value!r} holds credentials or a port: credentials never go in the spec; the Airflow side takes them "
            "from the connection named in [tfdist] config, the workers from their own identity (docs/object-storage.md)"
        )
    if not BUCKET.fullmatch(bucket):
        raise ValueError(f"{value!r}: {bucket!r} is no bucket name (3-63 lowercase letters, digits, '.', '-', '_')")
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") or not part.isprintable() for part in parts):
        raise ValueError(f"{value!r}: the prefix has an empty, '.' or '..' part or a control character")
    return f"{scheme}://{rest.rstrip('/')}"


MAX_VOCABULARY = 1 << 20
"""The largest vocabulary the statistics pass keeps exact counts for (beyond it: hashing)."""
MAX_HASH_BUCKETS = 1 << 26
MAX_VALUE_BYTES = 4096
MAX_CLASSES = 10000
"""Most classes of a multiclass label, named in the spec or learned from the data."""
FLOAT32_BYTES = 4
COPIES_IN_TRAINING = 3
"""Copies of a table in training: its weights and an optimizer's two slots (Adam)."""
EMBEDDING_BYTES_PER_VALUE = COPIES_IN_TRAINING * FLOAT32_BYTES
"""Bytes an embedding value costs in training."""


class NumericFeature(_Section):
    """A number per row, or a fixed-size vector (CSV columns '<name>_0 .. <name>_<n-1>'); an empty cell, null or
    NaN is missing and imputed with the train rows' mean."""

    name: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    """The feature's name: its CSV or Parquet column (or columns '<name>_0 ..'), JSON field or NPZ array."""
    kind: Literal["numeric"] = "numeric"
    """'numeric' (the default), 'categorical' or 'categorical_list'."""
    shape: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=3)
    """[]: a scalar; [n]: columns '<name>_0 .. <name>_<n-1>' (CSV, Parquet) or a list (JSON lines, a Parquet
    list column)."""
    missing_indicator: bool = False
    """Also give the model, per element, whether the value was missing (1.0) or not (0.0)."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Vocabulary(_Section):
    """A vocabulary prepare_data computes from the train and eval rows: the most frequent values, most frequent
    first (ties in byte order)."""

    max_tokens: Annotated[int, Field(ge=1, le=MAX_VOCABULARY)] = 10000
    """Most values kept; the rest go to the out-of-vocabulary buckets."""
    min_count: Annotated[int, Field(ge=1)] = 1
    """Only values seen in at least this many rows are kept."""
    oov_buckets: Annotated[int, Field(ge=1, le=1024)] = 1
    """Buckets for values outside the vocabulary (a value's bucket is a hash of it)."""


class _CategoricalBase(_Section):
    name: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    """The feature's column (CSV, Parquet), field (JSON lines) or array (NPZ)."""
    dtype: Literal["string", "int64"] = "string"
    """The values' type, and the serving signature's: 'string', or 'int64' for integer IDs."""
    vocabulary: Vocabulary | None = None
    """Map values through a vocabulary computed by prepare_data (the default, with its defaults, when
    'hash_buckets' is not given)."""
    hash_buckets: Annotated[int, Field(ge=2, le=MAX_HASH_BUCKETS)] | None = None
    """Map values to this many buckets by a hash, with no vocabulary (IDs with millions of values)."""
    embedding_dim: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Width of the feature's embedding; default: a one-hot when the vocabulary and its OOV buckets hold at
    most 10 ids, else round(1.6 × ids^0.56), at most 64."""
    max_value_length: Annotated[int, Field(ge=1, le=MAX_VALUE_BYTES)] = 256
    """Longest value allowed, in UTF-8 bytes; a longer one is a bad row."""

    @model_validator(mode="after")
    def _one_encoding(self) -> Any:
        if self.vocabulary is not None and self.hash_buckets is not None:
            raise ValueError(f"data.features '{self.name}': give 'vocabulary' or 'hash_buckets', not both")
        return self

    @property
    def encoding(self) -> Vocabulary | None:
        """The vocabulary settings (None: hashing)."""
        return None if self.hash_buckets else self.vocabulary or Vocabulary()

    @property
    def max_ids(self) -> int:
        """The most ids the feature's lookup can produce (the rows of its embedding)."""
        v = self.encoding
        return self.hash_buckets or (v.max_tokens + v.oov_buckets if v else 0)


class CategoricalFeature(_CategoricalBase):
    """One value per row, a string or an integer, mapped to an embedding (a one-hot for tiny vocabularies); a
    missing value (empty cell, null) is a token of its own."""

    kind: Literal["categorical"]
    """'categorical'."""


class CategoricalListFeature(_CategoricalBase):
    """A variable-length list of values per row (e.g. the last items a user saw), its embeddings combined."""

    kind: Literal["categorical_list"]
    """'categorical_list'."""
    combiner: Literal["mean", "sum"] = "mean"
    """How the values' embeddings are combined (an empty list: zeros)."""
    separator: Annotated[str, Field(min_length=1, max_length=1)] = "|"
    """In CSV: the character between a cell's values (JSON lines, Parquet and TFRecord hold a list)."""
    max_values: Annotated[int, Field(ge=1, le=4096)] = 64
    """Most values a row's list may hold; a longer list is a bad row."""

    @field_validator("separator")
    @classmethod
    def _not_csv(cls, value: str) -> str:
        if value in ',"\n\r':
            raise ValueError(f"{value!r} cannot separate values inside a CSV cell; use e.g. '|' or ';'")
        return value


ONE_HOT_MAX_IDS = 10


def embedding_dim(feature: Categorical, ids: int) -> int:
    """The feature's embedding width for ``ids`` ids: its own, else 0 (a one-hot) up to ONE_HOT_MAX_IDS ids, else
    round(1.6 × ids^0.56), at most 64."""
    if feature.embedding_dim:
        return feature.embedding_dim
    return 0 if ids <= ONE_HOT_MAX_IDS else min(64, round(1.6 * ids**0.56))


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ('8Gi', '512M') in bytes."""
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    number = quantity.rstrip("kKMGTi")
    return int(float(number) * units.get(quantity[len(number) :], 1))


def _feature_kind(value: Any) -> str:
    return (value.get("kind", "numeric") if isinstance(value, dict) else getattr(value, "kind", "numeric")) or ""


Feature = Annotated[
    Annotated[NumericFeature, Tag("numeric")]
    | Annotated[CategoricalFeature, Tag("categorical")]
    | Annotated[CategoricalListFeature, Tag("categorical_list")],
    Discriminator(_feature_kind),
]
"""A raw input feature; its 'kind' (default 'numeric') says which fields it takes."""
Categorical = CategoricalFeature | CategoricalListFeature


def label_value(value: str | int | bool) -> str:
    """A label value as its canonical string (True → 'true', 1 → '1')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class Label(_Section):
    """The label and its task. 'multiclass': integer classes 0 .. num_classes-1, or string classes; 'binary': 0/1,
    true/false or two named values; 'regression': a number."""

    name: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)] = "label"
    """The label's column, field or array."""
    task: Task = "multiclass"
    """'multiclass', 'binary' or 'regression': it chooses the output, the loss and the metrics."""
    num_classes: Annotated[int, Field(ge=2)] | None = None
    """multiclass: integer classes 0 .. num_classes-1."""
    classes: (
        Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=2, max_length=MAX_CLASSES)] | None
    ) = None
    """multiclass: the class names (a row with another value is a bad row); neither this nor 'num_classes': the
    classes seen in the data, sorted, written to the data manifest."""
    positive: str | int | bool | None = None
    """binary: the value that counts as positive; default 1 or true (then the other is 0 or false). Quote a word
    in YAML ('yes'): unquoted, YAML reads yes/no as true/false, which then match yes/no, y/n, on/off, 1/0 too."""
    standardize: bool = True
    """regression: train on the target standardized by the train rows' mean and deviation; the exported model
    predicts in the target's units either way."""

    @model_validator(mode="after")
    def _fields_of_task(self) -> Label:
        given = {k for k in ("num_classes", "classes", "positive") if getattr(self, k) is not None}
        allowed = {"multiclass": {"num_classes", "classes"}, "binary": {"positive"}, "regression": set()}[self.task]
        if extra := sorted(given - allowed):
            raise ValueError(
                f"data.label.{extra[0]}: not a field of task '{self.task}' (it takes "
                f"{', '.join(sorted(allowed)) or 'neither num_classes, classes nor positive'})"
            )
        if self.classes is not None:
            if len(set(self.classes)) < len(self.classes):
                raise ValueError(f"data.label.classes: each class once, got {self.classes}")
            if self.num_classes is not None and self.num_classes != len(self.classes):
                raise ValueError(
                    f"data.label.num_classes: {self.num_classes}, but classes names {len(self.classes)}; drop one"
                )
        return self

    @property
    def class_names(self) -> list[str] | None:
        """The classes by name when the spec fixes them (multiclass), else None."""
        if self.classes is not None:
            return list(self.classes)
        return [str(c) for c in range(self.num_classes)] if self.num_classes else None


class Threshold(_Section):
    lower: float | None = None
    """The value (a metric, a feature's elements) must be at least this."""
    upper: float | None = None
    """The value must be at most this."""

    @model_validator(mode="after")
    def _bounded(self) -> Threshold:
        if self.lower is None and self.upper is None:
            raise ValueError("give 'lower', 'upper' or both")
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"lower ({self.lower}) is above upper ({self.upper})")
        return self


class _Check(_Section):
    mode: Literal["refuse", "warn", "off"] | None = None
    """'refuse' (the run stops before training), 'warn' (logged and recorded, the run goes on) or 'off';
    default: checks.mode."""


class DriftCheck(_Check):
    max_divergence: Annotated[float, Field(gt=0, le=1)] = 0.05
    """The largest Jensen–Shannon divergence (base 2: 0 same, 1 disjoint) allowed between a numeric feature
    element's histogram and the baseline's."""
    max_distance: Annotated[float, Field(gt=0, le=1)] = 0.1
    """The largest L∞ distance allowed between a categorical feature's value shares and the baseline's (TFX's
    measure: the largest change of one value's share, over the baseline's top values and this run's)."""


class VocabularyCheck(_Check):
    max_oov_share: Annotated[float, Field(ge=0, le=1)] = 0.05
    """The largest share of a categorical feature's values allowed outside the baseline's vocabulary (the values
    the baseline model has rows for)."""


class MissingCheck(_Check):
    max_change: Annotated[float, Field(gt=0, le=1)] = 0.05
    """The largest change of a feature's missing rate (per element) allowed against the baseline."""


class ConstantCheck(_Check):
    min_share: Annotated[float, Field(gt=0, lt=1)] = 0.01
    """A feature element counts as varying when more than this share of its rows differ from its most common
    value; constant now and varying in the baseline (or the reverse) fails."""


class LabelCheck(_Check):
    max_change: Annotated[float, Field(gt=0, le=1)] = 0.05
    """multiclass and binary: the largest change of a class's share of the rows (L∞; binary: the positive rate)
    allowed against the baseline; a class the baseline has and this run lacks always fails."""
    max_mean_shift: Annotated[float, Field(gt=0)] = 0.5
    """regression: the largest change of the target's mean allowed, in the baseline's standard deviations."""


class RowsCheck(_Check):
    min_ratio: Annotated[float, Field(gt=0, le=1)] = 0.5
    """This run's rows over the baseline's, at least."""
    max_ratio: Annotated[float, Field(ge=1)] = 2.0
    """... and at most."""


class BoundsCheck(_Check):
    features: dict[str, Threshold] = Field(default_factory=dict)
    """{feature: {lower: x, upper: y}}: every element of the feature within (its min and max); needs no
    baseline."""


class DataChecks(_Section):
    """The data gate (task validate_data): this run's data statistics against the baseline's, the data the
    model the gate compares with was trained on."""

    mode: Literal["refuse", "warn"] = "refuse"
    """What a failed check does unless it says itself: 'refuse' stops the run before training (no retry),
    'warn' logs and records it."""
    drift: DriftCheck = Field(default_factory=DriftCheck)
    """Each numeric feature element's histogram, and each categorical feature's value shares, against the
    baseline's."""
    vocabulary: VocabularyCheck = Field(default_factory=VocabularyCheck)
    """The share of each categorical feature's values outside the baseline's vocabulary."""
    missing: MissingCheck = Field(default_factory=MissingCheck)
    """Each feature's missing rate against the baseline's."""
    constant: ConstantCheck = Field(default_factory=ConstantCheck)
    """A feature element constant on one side only."""
    labels: LabelCheck = Field(default_factory=LabelCheck)
    """The label by task: class shares and classes gone, the positive rate, or the target's mean."""
    rows: RowsCheck = Field(default_factory=RowsCheck)
    """The row count against the baseline's."""
    bounds: BoundsCheck = Field(default_factory=BoundsCheck)
    """Value bounds per feature."""


class DataSpec(_Section):
    source: Annotated[str, Field(min_length=1)]
    """Path, glob or URL (any fsspec file system: s3://, gs://, https://) of the input partitions: '{date}'
    (YYYY-MM-DD), '{year}', '{month}', '{day}' and '{hour}' become each partition of the run's window (its
    hours when '{hour}' is used, else its days, months or years), '{artifact_root}' the root."""
    format: Literal["csv", "jsonl", "npz", "parquet", "tfrecord"]
    """'csv' (a header row; a vector feature is columns <name>_0 ..), 'jsonl' (an object per line; a vector
    feature is a list), 'npz' (one array per feature and one for the label), 'parquet' (a column per
    scalar; a vector feature is a list column or columns <name>_0 ..) or 'tfrecord' (tf.train.Example
    records: a float_list per feature, an int64_list label; each record's CRC-32C checked)."""
    features: Annotated[list[Feature], Field(min_length=1)]
    """The raw input features: {name, shape} (numeric, the default), {name, kind: categorical, vocabulary: {...}
    or hash_buckets: N}, or {name, kind: categorical_list, ...}."""
    label: Label
    """The label and its task: {name, num_classes: N} (integer classes), {name, classes: [...]}, {name, task:
    binary, positive: ...} or {name, task: regression}."""
    eval_fraction: Annotated[float, Field(gt=0, lt=1), AuthorOnly("it sets the held-out data the gate scores")] = 0.2
    """Share of the rows held out for evaluation, by a hash of each row's content (deterministic: duplicates
    never straddle the split)."""
    num_shards: Annotated[int, Field(ge=1, le=1024)] = 4
    """Train shards (and eval shards); at least one per training process."""
    window: Annotated[int, Field(ge=1)] | None = None
    """Train on the last N periods of the schedule ending at the data interval's end (N days for a daily
    schedule, N hours for an hourly one); default: the data interval itself."""
    prepare_processes: Annotated[int, Field(ge=1, le=256)] | None = None
    """Processes writing shards in prepare_data (each reads its share of the input), on Kubernetes each a pod
    of its own; default: one pod, and one process per 32 MB of input up to the cores prepare_data runs on.
    The shards are the same whatever it is."""
    checks: Annotated[DataChecks, AuthorOnly("the data gate that may stop a run is the author's")] = Field(
        default_factory=DataChecks
    )
    """The data gate before training: drift, constant features, labels, rows and bounds against the baseline's
    data (not part of the input's fingerprint: loosening a check prepares nothing again)."""

    @field_validator("source")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        for _, field, _, _ in string.Formatter().parse(value):
            if field is not None and field not in SOURCE_PLACEHOLDERS:
                raise ValueError(
                    f"unknown placeholder {{{field}}}; allowed: {', '.join('{' + p + '}' for p in SOURCE_PLACEHOLDERS)}"
                )
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> DataSpec:
        names = [f.name for f in self.features] + [self.label.name]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"features and label must have distinct names, repeated: {', '.join(duplicates)}")
        numeric = [f.name for f in self.numeric_features]
        unknown = sorted(set(self.checks.bounds.features) - set(numeric))
        if unknown:
            raise ValueError(
                f"checks.bounds.features: {', '.join(unknown)} is not a numeric feature; numeric features: "
                f"{', '.join(numeric) or 'none'}"
            )
        if self.format == "npz" and self.categorical_features:
            raise ValueError(
                f"data.features '{self.categorical_features[0].name}': categorical features need a format with "
                "strings and lists (csv, jsonl, parquet, tfrecord), not npz"
            )
        return self

    @property
    def numeric_features(self) -> list[NumericFeature]:
        return [f for f in self.features if isinstance(f, NumericFeature)]

    @property
    def categorical_features(self) -> list[Categorical]:
        return [f for f in self.features if not isinstance(f, NumericFeature)]

    @property
    def input_size(self) -> int:
        """Values of the numeric features."""
        return sum(f.size for f in self.numeric_features)


Metric = Literal["accuracy", "top_5_accuracy", "auc", "pr_auc", "log_loss", "calibration", "rmse", "mae", "r2", "mse"]


class _ModelBase(_Section):
    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] = "adam"
    """Keras optimizer."""
    embedding_optimizer: Literal["lazy_adam", "adagrad", "sgd"] | None = None
    """The optimizer of the tables of weights by id (embeddings, wide_deep's linear weights and crosses), which then
    updates only the rows a step looked up, their slots included: 'lazy_adam' (Adam's moments of a row move only
    when the row is looked up), 'adagrad', 'sgd'; same learning rate as 'optimizer'. Default: 'optimizer' trains them
    too, and Keras's Adam, AdamW and RMSprop then update every row their slots have moved, each step."""
    learning_rate: Annotated[float, Field(gt=0, le=10)] = 1e-3
    """Optimizer learning rate."""
    loss: Literal["sparse_categorical_crossentropy", "binary_crossentropy", "mse", "huber"] | None = None
    """Training loss; default the task's: 'sparse_categorical_crossentropy' (multiclass), 'binary_crossentropy'
    (binary), 'mse' (regression; or 'huber', with delta 1 in standardized units)."""
    metrics: list[Metric] | None = None
    """Metrics reported besides the loss (and usable in validation), the task's: multiclass accuracy,
    top_5_accuracy (default [accuracy]); binary auc, pr_auc, accuracy (at 0.5), log_loss, calibration (mean
    prediction / positive rate) (default [auc, accuracy]); regression rmse, mae, r2, mse (default [rmse, r2])."""


class MLPModel(_ModelBase):
    family: Annotated[Literal["mlp"], FAMILY]
    """'mlp': a multi-layer perceptron."""
    hidden_units: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: [128, 64]
    )
    """Units of each hidden layer."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate after each hidden layer."""
    activation: Literal["relu", "gelu", "tanh"] = "relu"
    """Activation of the hidden layers."""


class Cross(_Section):
    """A feature cross of the wide part: the features' values joined, hashed into buckets."""

    features: Annotated[list[str], Field(min_length=2, max_length=4)]
    """The categorical features crossed."""
    hash_buckets: Annotated[int, Field(ge=2, le=MAX_HASH_BUCKETS)] = 1000
    """Buckets of the crossed values."""


class WideDeepModel(_ModelBase):
    family: Annotated[Literal["wide_deep"], FAMILY]
    """'wide_deep': a linear part over the categorical features (a weight per id) and crosses, plus an MLP over
    the embeddings and numeric features; their outputs are summed."""
    hidden_units: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: [128, 64]
    )
    """Units of each hidden layer of the deep part."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate after each hidden layer."""
    activation: Literal["relu", "gelu", "tanh"] = "relu"
    """Activation of the hidden layers."""
    crosses: list[Cross] = Field(default_factory=list)
    """Crosses of categorical features in the wide part, e.g. [{features: [country, device], hash_buckets:
    1000}]."""


class CNNModel(_ModelBase):
    family: Annotated[Literal["cnn"], FAMILY]
    """'cnn': a convolutional network over 'image_shape'."""
    image_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=3, max_length=3)]
    """Height, width, channels: the concatenated features are reshaped to it."""
    filters: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(default_factory=lambda: [32, 64])
    """Filters of each convolution layer."""
    kernel_size: Annotated[int, Field(ge=1)] = 3
    """Convolution kernel size."""
    dense_units: Annotated[int, Field(ge=1)] = 64
    """Units of the dense layer after the convolutions."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate before the output layer."""


class CustomModel(_ModelBase):
    family: Annotated[Literal["custom"], FAMILY]
    """'custom': a Keras model from 'factory'."""
    factory: Annotated[str, Field(pattern=FACTORY_PATTERN)]
    """'package.module:function', called as 'function(features, num_classes, **kwargs)' ('task' and
    'feature_info' too, when it takes them): 'features' maps each feature name to the shape of its preprocessed
    input (numeric: normalized, missing values imputed; categorical: int32 ids, a list's padded with -1);
    returns a Keras model taking a dict of those inputs and returning the task's output: class probabilities
    (num_classes of them), the positive class's probability ([batch, 1]) or the prediction ([batch, 1], in
    standardized units when label.standardize); num_classes is 1 for binary and regression."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to 'factory'."""


ModelSpec = Annotated[MLPModel | WideDeepModel | CNNModel | CustomModel, Field(discriminator="family")]


class MPISpec(_Section):
    """Horovod over OpenMPI ('mpirun') or Gloo ('horovodrun --gloo')."""

    controller: Literal["mpi", "gloo"] | None = None
    """Default: 'mpi' with 'extra_args'; else 'mpi' where the machine starting the ranks has OpenMPI's 'mpirun',
    and 'gloo' where it has not (decided when the stage starts, so a spec reads the same everywhere)."""
    slots_per_worker: Annotated[int, Field(ge=1, le=64)] = 1
    """Ranks per worker machine (one per GPU when 'gpus_per_worker' > 0): ranks = workers × slots."""
    extra_args: list[Annotated[str, Field(pattern=MPI_ARG_PATTERN)]] = Field(default_factory=list)
    """Extra 'mpirun' arguments, one list item each (passed as argv, never through a shell); '-np' and '-H'
    are the launcher's."""
    scale_learning_rate: bool = True
    """Multiply 'model.learning_rate' by the number of ranks (Horovod's convention); false if the rate was
    tuned for the global batch."""

    @field_validator("extra_args")
    @classmethod
    def _not_ours(cls, value: list[str]) -> list[str]:
        for arg in value:
            if arg.split("=")[0] in RESERVED_MPI_ARGS:
                raise ValueError(f"{arg!r} is set by the launcher from num_workers and slots_per_worker")
        return value


class WarmStartSpec(_Section):
    source: Literal["none", "baseline"] = Field("none", alias="from")
    """'none': random initial weights; 'baseline': the weights (and the optimizer's state, where the optimizer is
    the same) of the version the gate compares with, the newest published for a data interval ending no later
    than this run's (a backfill starts from what was live then)."""
    on_mismatch: Literal["cold", "fail"] = "cold"
    """When some of the baseline's variables do not fit the spec's model (names or shapes): 'cold' starts from
    random weights, naming them; 'fail' refuses the run (no retry)."""


class ParameterServerSpec(_Section):
    """How the tables of weights by id are spread over the parameter servers."""

    shard_min_bytes: Annotated[int, Field(ge=1 << 16)] = 1 << 22
    """A table of at least twice this many bytes of float32 weights is split by rows into shards (a ShardedVariable)
    of at least this many bytes, spread over the ps tasks; its optimizer slots are split alike, on the same tasks."""
    max_shards: Annotated[int, Field(ge=1, le=1024)] | None = None
    """The most shards of one table; default: 'training.num_ps'."""

    def shards(self, table_bytes: int, num_ps: int) -> int:
        """How many shards a table of ``table_bytes`` bytes of weights is split into."""
        return max(1, min(self.max_shards or num_ps, table_bytes // self.shard_min_bytes))


class TrainingSpec(_Section):
    backend: Literal["tf", "mpi"] = "tf"
    """'tf': a TF cluster from TF_CONFIG; 'mpi': Horovod ranks."""
    strategy: Literal["multi_worker_mirrored", "parameter_server"] = "multi_worker_mirrored"
    """With backend 'tf': synchronous all-reduce, or a chief with parameter servers and workers."""
    launcher: Annotated[Literal["local", "kubernetes"], AuthorOnly("it chooses the machines the training runs on")] = (
        "local"
    )
    """Where every stage runs: 'local' (processes on this machine) or 'kubernetes' (pods; see 'kubernetes')."""
    num_workers: Annotated[int, Field(ge=1, le=64)] = 2
    """Training workers (with Horovod: worker machines, each running 'slots_per_worker' ranks)."""
    num_ps: Annotated[int, Field(ge=0, le=64)] = 0
    """Parameter-server tasks (strategy 'parameter_server' only)."""
    mpi: MPISpec | None = None
    """Horovod settings (backend 'mpi' only; defaults apply when omitted)."""
    parameter_server: ParameterServerSpec | None = None
    """How tables are sharded over the ps tasks (strategy 'parameter_server' only; defaults apply when omitted)."""
    sparse_gradients: Literal["gather", "dense", "auto"] = "auto"
    """With all-reduce (multi_worker_mirrored, Horovod), a table's gradient of the rows a step looked up: 'gather'
    all-gathers the rows, 'dense' makes it a whole table and all-reduces it, 'auto' chooses per table by its rows
    and the rows a step looks up."""
    gpus_per_worker: Annotated[int, Field(ge=0, le=16)] = 0
    """GPUs each worker uses (given with CUDA_VISIBLE_DEVICES locally, with Horovod one per rank; on
    Kubernetes nvidia.com/gpu limits)."""
    cpus_per_worker: Annotated[int, Field(ge=1)] | None = None
    """Threads per worker; default: the machine's cores shared evenly, each process pinned to its share
    (local launcher)."""
    epochs: Annotated[int, Field(ge=1, le=MAX_EPOCHS)] = 5
    """Passes over the training shards, at most 1,000; ``timeout_minutes``, which no run may override, bounds each
    task's time whatever the epochs."""
    global_batch_size: Annotated[int, Field(ge=1)] = 64
    """Examples per training step, split evenly across the replicas (with 'parameter_server' each step runs
    on one worker)."""
    checkpoint_every_steps: Annotated[int, Field(ge=1)] = 100
    """The chief writes a checkpoint every this many steps (and at the end)."""
    keep_checkpoints: Annotated[int, Field(ge=1)] = 3
    """Checkpoints kept in the run's checkpoint directory."""
    upload_every_seconds: Annotated[float, Field(ge=0, le=3600)] = 10.0
    """With an object store's artifact root, the chief uploads what it writes as it trains (the checkpoints, the
    TensorBoard summaries, the progress and the curve) beside the training, each at most once per this many seconds
    (0: every time), and always the first and the last. A restarted training resumes from the newest checkpoint
    uploaded, and the runs page and TensorBoard lag by up to this much. Fewer uploads take less of the training's
    cores."""
    seed: int = 0
    """Seed for weight initialization and shuffling."""
    timeout_minutes: Annotated[int, Field(ge=1), PARSED] = 120
    """Each task's execution timeout."""
    hang_timeout_seconds: Annotated[int, Field(ge=10)] | None = 600
    """The train stage fails when no training process has finished a step for this long (a worker stopped,
    or stuck in a collective), naming the stopped one; null: only ``timeout_minutes`` bounds a hang. On
    Kubernetes each training pod watches the heartbeats."""
    min_workers: Annotated[int, Field(ge=1, le=64)] | None = None
    """Elastic training: the fewest workers training continues with after losing some (killed, hung), from
    the last checkpoint (TF cluster, restarted smaller) or Horovod commit (elastic 'horovodrun --gloo',
    whatever 'mpi.controller' says; a lost worker rejoins), keeping the global batch; default
    'num_workers': losing a worker fails the stage (the task's retry resumes from the checkpoint). On
    Kubernetes the launcher restarts the Job with the pods left, in every mode."""
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    """Elastic training: how many losses one try of the train task may continue after before it fails
    (with Horovod, each may be followed by the worker's return). With 'parameter_server' (local launcher), also
    how many times a killed worker is restarted in place, elastic or not."""
    warm_start: Annotated[WarmStartSpec, AuthorOnly("which model a run continues from is the author's")] = Field(
        default_factory=WarmStartSpec
    )
    """Where training starts: 'none', 'baseline', or {from: baseline, on_mismatch: cold | fail}."""
    summary_every_steps: Annotated[int, Field(ge=1)] = 50
    """The chief writes TensorBoard summaries (loss, accuracy, examples/s, learning rate) and a point of the
    training curve at the end of the first step call at or past every this many steps, and at the last."""
    tensorboard_url: Annotated[
        str | None, Field(pattern=r"^https?://[^\s]+$"), AuthorOnly("it is a link every user of the DAG follows")
    ] = None
    """A TensorBoard serving this pipeline's runs: adds a 'TensorBoard' link to the train task (else Airflow's
    setting [tfdist] tensorboard_url)."""
    pool: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """Airflow pool of the train task: at most that many slots of training run at once (backfills included)."""
    pool_slots: Annotated[Annotated[int, Field(ge=1)] | None, PARSED] = None
    """Slots one training run takes in the pool; default: its number of processes."""

    @field_validator("warm_start", mode="before")
    @classmethod
    def _warm_start_word(cls, value: Any) -> Any:
        return {"from": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _mode(self) -> TrainingSpec:
        if self.min_workers is not None and self.min_workers > self.num_workers:
            raise ValueError(f"training.min_workers: at most num_workers ({self.num_workers}), got {self.min_workers}")
        if self.elastic and self.elastic_sizes == (self.num_workers,):
            raise ValueError(
                f"training.min_workers: no worker count from {self.min_workers} to {self.num_workers - 1} "
                f"splits global_batch_size {self.global_batch_size} evenly across its replicas; "
                "lower min_workers or pick a global batch size they divide"
            )
        if self.backend == "mpi":
            if self.strategy != "multi_worker_mirrored":
                raise ValueError("training.strategy: 'parameter_server' needs backend 'tf' (Horovod is all-reduce)")
            if self.num_ps:
                raise ValueError(
                    f"training.num_ps: parameter servers need backend 'tf' and strategy "
                    f"'parameter_server', got {self.num_ps} with backend 'mpi'"
                )
            mpi = self.mpi_settings
            if self.gpus_per_worker and mpi.slots_per_worker != self.gpus_per_worker:
                raise ValueError(
                    f"training.mpi.slots_per_worker: must equal gpus_per_worker "
                    f"({self.gpus_per_worker}), one rank per GPU, got {mpi.slots_per_worker}"
                )
            if mpi.extra_args and (mpi.controller == "gloo" or self.elastic):
                raise ValueError(
                    "training.mpi.extra_args: mpirun arguments need controller 'mpi' without "
                    "elastic training (min_workers below num_workers runs horovodrun over Gloo)"
                )
        elif self.mpi is not None:
            raise ValueError("training.mpi: Horovod settings need backend 'mpi'")
        elif self.strategy == "parameter_server" and not self.num_ps:
            raise ValueError("training.num_ps: strategy 'parameter_server' needs at least 1 parameter server, got 0")
        elif self.strategy == "multi_worker_mirrored" and self.num_ps:
            raise ValueError(
                f"training.num_ps: parameter servers need strategy 'parameter_server', got "
                f"{self.num_ps} with 'multi_worker_mirrored'"
            )
        if self.parameter_server is not None and self.strategy != "parameter_server":
            raise ValueError("training.parameter_server: table sharding needs strategy 'parameter_server'")
        return self

    @property
    def mpi_settings(self) -> MPISpec:
        return self.mpi or MPISpec()

    @property
    def parameter_server_settings(self) -> ParameterServerSpec:
        return self.parameter_server or ParameterServerSpec()

    @property
    def elastic(self) -> bool:
        """Training continues with fewer workers after a loss."""
        return self.min_workers is not None and self.min_workers < self.num_workers

    @property
    def elastic_sizes(self) -> tuple[int, ...]:
        """Worker counts training may continue with, largest first: from num_workers down to min_workers,
        those whose replicas split the global batch evenly (every step keeps the global batch size)."""
        sizes = range(self.num_workers, (self.min_workers or self.num_workers) - 1, -1)
        per_worker = max(1, self.gpus_per_worker) * (self.mpi_settings.slots_per_worker if self.backend == "mpi" else 1)
        if self.strategy == "parameter_server":  # each step runs on one worker, whatever their number
            return tuple(sizes)
        return tuple(n for n in sizes if self.global_batch_size % (n * per_worker) == 0)

    @property
    def data_readers(self) -> int:
        """Processes that each read their own train shards."""
        return self.num_workers * self.mpi_settings.slots_per_worker if self.backend == "mpi" else self.num_workers

    @property
    def processes(self) -> int:
        """Training processes one run starts (its default pool slots)."""
        if self.strategy == "parameter_server":
            return 1 + self.num_ps + self.num_workers
        return self.data_readers

    @property
    def replicas(self) -> int:
        """Model replicas a global batch is split across in one step."""
        if self.backend == "mpi":
            return self.data_readers
        if self.strategy == "parameter_server":
            return max(1, self.gpus_per_worker)  # each step runs on one worker
        return self.num_workers * max(1, self.gpus_per_worker)


class ChangeThreshold(_Section):
    """How much worse than the baseline (the newest model published as of the run's data interval)
    a metric may be; both tolerances, when given, must hold."""

    direction: Direction | None = None
    """Whether a higher or a lower value of the metric is better; default: the metric's own direction."""
    absolute: Annotated[float, Field(ge=0)] | None = 0.0
    """Largest allowed loss in metric units (0: no worse than the baseline)."""
    relative: Annotated[float, Field(ge=0)] | None = None
    """Largest allowed loss as a fraction of the baseline's value."""


class CheckpointSelection(_Section):
    mode: Literal["latest", "best"] = "latest"
    """'best': validate every retained checkpoint and keep the best by 'metric'."""
    metric: str | None = None
    """The metric 'best' is chosen by; default: the first of the model's metrics."""
    direction: Direction | None = None
    """Whether a higher or a lower 'metric' is better; default: the metric's own direction."""


class ValidationSpec(_Section):
    """The gate: a model is published only when it passes. At least one threshold is required unless
    'allow_unvalidated' says otherwise."""

    thresholds: dict[str, Threshold] = Field(default_factory=dict)
    """Value thresholds on the eval split: {metric: {lower: x, upper: y}}."""
    change_thresholds: dict[str, ChangeThreshold] = Field(default_factory=dict)
    """How much worse than the published baseline each metric may be."""
    checkpoint: CheckpointSelection = Field(default_factory=CheckpointSelection)
    """Which checkpoint is validated: the latest, or the best retained one."""
    on_failure: Literal["fail", "skip"] = "fail"
    """Not blessed: fail the evaluate task (no retry), or skip it; export does not run either way."""
    allow_unvalidated: bool = False
    """Publish every model that passes the integrity checks, with no threshold at all; recorded in
    blessing.json and in the version's metadata.json as published without a gate."""

    @model_validator(mode="after")
    def _one_way(self) -> ValidationSpec:
        if self.allow_unvalidated and (self.thresholds or self.change_thresholds):
            raise ValueError(
                "validation.allow_unvalidated: only for a pipeline without thresholds; "
                "remove it, the thresholds given are the gate"
            )
        return self


class RetrySpec(_Section):
    """Airflow retries of each task. A retried train task resumes from its run's latest checkpoint; a
    model the gate refused, a refused export and invalid run overrides are never retried."""

    prepare_data: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of prepare_data (e.g. for a partition that lands late)."""
    validate_data: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of validate_data after a crash (a refusal is not retried)."""
    train: Annotated[int, Field(ge=0, le=10)] = 2
    """Retries of train; each resumes from the run's latest checkpoint."""
    evaluate: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of evaluate after a crash."""
    export: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of export after a crash; a half-written version is never visible."""
    delay_seconds: Annotated[int, Field(ge=0, le=86400)] = 60
    """Wait before each retry."""


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
KUBERNETES = AuthorOnly("where, as whom and from which image the pods run is the author's")
Role = Literal["prepare", "validate", "chief", "ps", "worker", "evaluate", "export"]
ROLES: tuple[Role, ...] = get_args(Role)


class PodSettings(_Section):
    """What the pods of one role get; every field may be set for all roles and per role."""

    image: Annotated[str, Field(min_length=1, pattern=r"^[^\s]+$")] | None = None
    """Container image with the trainer package (docker/Dockerfile.worker or .worker-gpu)."""
    cpu: Annotated[str, Field(pattern=QUANTITY_PATTERN)] | None = None
    """CPU request and limit, e.g. '4' or '500m'; also the worker's thread count when whole."""
    memory: Annotated[str, Field(pattern=QUANTITY_PATTERN)] | None = None
    """Memory request and limit, e.g. '8Gi'; default for ps pods: twice their share of the tables plus 1 GiB."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods must run on."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """Kubernetes tolerations, as in a pod spec."""
    affinity: dict[str, Any] | None = None
    """Kubernetes affinity, as in a pod spec."""


class ArtifactVolume(_Section):
    claim_name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=253)]
    """A ReadWriteMany PersistentVolumeClaim holding the artifact root, mounted at the artifact root's own
    path in every pod."""


class KubernetesSpec(_Section):
    """Where the stages run with 'training.launcher: kubernetes'. None of it can be overridden by a trigger."""

    connection_id: Annotated[str, Field(pattern=NAME_PATTERN)] = "kubernetes_default"
    """Airflow connection of type 'kubernetes' (in-cluster, kubeconfig file or inline kubeconfig)."""
    namespace: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)] = "default"
    """Namespace of every object a run creates."""
    pods: PodSettings
    """Settings of every pod ('image' required here)."""
    roles: dict[Role, PodSettings] = Field(default_factory=dict)
    """Per-role settings over 'pods' (roles: prepare, validate, chief, ps, worker, evaluate, export)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """When the kubelet pulls the image."""
    image_pull_secrets: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN)]] = Field(default_factory=list)
    """Secrets holding registry credentials."""
    service_account: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """Service account of the pods; default: the namespace's default."""
    priority_class: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """PriorityClass of the pods."""
    scheduler_name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """Scheduler of the pods (e.g. a gang scheduler); default: the cluster's."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on every object and pod."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations on every object and pod."""
    artifact_volume: ArtifactVolume | None = None
    """The shared volume holding a local artifact root; none with an artifact root in an object store."""
    credentials_secret: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=253)] | None = None
    """A Secret of the namespace whose keys become every pod's environment (e.g. AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY), for an object store on a cluster without IRSA or Workload Identity; default: the pods
    reach the store as their service account."""
    operator: Literal["auto", "native", "kubeflow"] = "auto"
    """How the train stage runs: 'native': Indexed Jobs and a headless Service (Kubernetes >= 1.31, no CRD);
    'kubeflow': a TFJob (TF cluster) or MPIJob (Horovod), refused when that CRD is not installed; 'auto':
    kubeflow when the cluster serves its CRD, else native. The other stages are always native Jobs."""
    startup_timeout_seconds: Annotated[int, Field(ge=10)] = 600
    """Pods not running by then fail the stage, with the scheduler's reason."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] = 3600
    """Finished objects are deleted this long after they finish."""
    log_members: Annotated[int, Field(ge=1)] | Literal["all"] = 2
    """How many members' whole logs reach the task log: the result member (chief, worker 0, rank 0's pod or the
    MPIJob's launcher) first, then the others in order; 'all' for every member (small jobs, debugging). Any
    other member's last lines are shown when it fails, is lost or hangs."""

    @field_validator("pods")
    @classmethod
    def _image(cls, value: PodSettings) -> PodSettings:
        if not value.image:
            raise ValueError(
                "kubernetes.pods.image: required: the worker image every pod runs, e.g. "
                "registry.example.com/tfdist-worker:2.21"
            )
        return value

    def for_role(self, role: str) -> PodSettings:
        """The settings of pods of ``role``: 'pods' with the fields the role sets over it (in a spec validated from
        its full JSON dump, spec.json, every field of a role counts as set)."""
        own = self.roles.get(role) if role in ROLES else None
        return self.pods.model_copy(update=own.model_dump(exclude_unset=True)) if own else self.pods


class Approvers(_Section):
    """Who may answer the approval: Airflow's Human-in-the-loop assigned users."""

    users: list[Annotated[str, Field(pattern=r"^[^\s\x00-\x1f\x7f]+$", max_length=256)]] = Field(default_factory=list)
    """User ids as the auth manager knows them (the simple auth manager's: user names)."""
    roles: list[Literal["user", "op", "admin"]] = Field(default_factory=list)
    """Simple auth manager roles (a viewer may not act on a DAG): each stands for every user configured with
    exactly that role ('[core] simple_auth_manager_users') when the approval is asked. Another auth manager
    lists no role's users to a task: the approve task refuses; name users."""

    @model_validator(mode="after")
    def _someone(self) -> Approvers:
        if not (self.users or self.roles):
            raise ValueError(
                "name at least one user or role, or leave 'approvers' out (then anyone who may act on the DAG answers)"
            )
        return self


class Approval(_Section):
    """A human approval between evaluate and export (Airflow's Human-in-the-loop ``ApprovalOperator``): asked
    only when the gate blesses; export publishes nothing without it."""

    approvers: Approvers | None = None
    """Who may answer: {users: [...], roles: [...]}; default: anyone who may act on the DAG (Airflow's rule)."""
    four_eyes: bool = True
    """The user who triggered the run (and so set its overrides) may not answer it; a run with no such user
    (scheduled, asset-triggered) may be answered by any approver."""
    timeout_minutes: Annotated[int, Field(ge=1)] | None = None
    """How long the approval is waited for; default: as long as it takes."""
    on_timeout: Literal["reject", "approve"] = "reject"
    """What no answer within 'timeout_minutes' means: 'reject' (nothing is published) or 'approve' (published,
    recorded and logged as approved by the timeout; with 'four_eyes', only a run no user triggered)."""

    @model_validator(mode="after")
    def _timeout_given(self) -> Approval:
        if self.on_timeout == "approve" and self.timeout_minutes is None:
            raise ValueError("on_timeout: 'approve' needs timeout_minutes (after how long no answer approves)")
        return self


class ExportSpec(_Section):
    model_name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """Versions are published under '<export root>/<model_name>/'."""
    root: str | None = None
    """Where the published versions live, a local path or a bucket's URL; default: '<artifact_root>/models'."""
    keep_versions: Annotated[int, Field(ge=1)] | None = None
    """Keep the newest N versions (and always the baseline); default: keep all."""
    approval: Approval | None = None
    """A human approval before publishing: 'true', or {approvers, four_eyes, timeout_minutes, on_timeout};
    default: none, a blessed model is published at once."""

    @field_validator("approval", mode="before")
    @classmethod
    def _approval_word(cls, value: Any) -> Any:
        return {} if value is True else None if value is False else value

    @field_validator("root")
    @classmethod
    def _root(cls, value: str | None) -> str | None:
        return None if value is None else _artifact_location(value)


@functools.cache
def _cron_is_valid(value: str) -> bool:
    """Whether croniter reads ``value``: asked once per expression (a folder of specs shares a few)."""
    from croniter import croniter  # Airflow's own dependency; cheap

    return bool(croniter.is_valid(value))


def _valid_cron(value: str | None) -> str | None:
    if value is not None and not _cron_is_valid(value):
        raise ValueError(f"not a valid cron expression or preset (e.g. '0 2 * * *', '@daily'), got {value!r}")
    return value


def _asset_uri(uri: str) -> str:
    """An Airflow Asset URI as Airflow accepts it: a scheme, ASCII, no password, not the reserved 'airflow'."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.scheme or not (parts.netloc or parts.path.strip("/")):
        raise ValueError(
            f"{uri!r} is not an asset URI: give a scheme and a location, e.g. 's3://bucket/raw/digits' "
            "or 'file:///data/raw/digits'"
        )
    if not uri.isascii() or len(uri) > 1500 or any(c.isspace() for c in uri):
        raise ValueError(f"{uri!r}: an asset URI is ASCII, without spaces, at most 1500 characters")
    if parts.scheme.lower() == "airflow" or parts.password or parts.fragment:
        raise ValueError(
            f"{uri!r}: the scheme 'airflow' is Airflow's own, and an asset URI carries no password and no '#fragment'"
        )
    return uri


PartitionPeriod = Literal["hour", "day", "week", "month", "year"]
PARTITION_PERIODS: tuple[PartitionPeriod, ...] = get_args(PartitionPeriod)
PARTITION_KEY_FORMATS = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "week": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}
"""A partitioned pipeline's own partition keys (its runs' ``partition_key``), by period: a week's is its Monday."""
SOURCE_PERIODS = (("hour", {"hour"}), ("day", {"date", "day"}), ("month", {"month"}), ("year", {"year"}))
"""The periods a source's time placeholders name, finest first (none names a week)."""


def partition_unit(source: str) -> str | None:
    """The finest time placeholder of a source: its partitions are hours, days, months or years (None: the
    source names no time)."""
    fields = {field for _, field, _, _ in string.Formatter().parse(source) if field}
    return next((unit for unit, names in SOURCE_PERIODS if fields & names), None)


class AssetSchedule(_Section):
    """Run when upstream data lands: Airflow Assets the upstream DAGs update (their URIs)."""

    assets: Annotated[list[str], Field(min_length=1)]
    """URIs of the Airflow Assets the upstream DAGs update, e.g. 's3://lake/raw/digits'."""
    when: Literal["all", "any"] = "all"
    """'all': a run once every asset has a new event; 'any': on each event of any of them."""
    cron: str | None = None
    """Also run on this cron whatever the assets do (Airflow's AssetOrTimeSchedule): 'asset or time'."""
    partitions: PartitionPeriod | None = None
    """The upstream's events carry partition keys (Airflow partitions): each run trains on exactly the
    partition of this period that its events name (a day's key, or several of them rolled into a week...)."""
    partition_key_format: str = "%Y-%m-%dT%H:%M:%S"
    """How the upstream writes its partition keys (strftime), e.g. '%Y-%m-%d' for '2026-11-20'."""

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return _valid_cron(value)

    @field_validator("assets")
    @classmethod
    def _uris(cls, value: list[str]) -> list[str]:
        for i, uri in enumerate(value):
            try:
                _asset_uri(uri)
            except ValueError as exc:
                raise ValueError(f"schedule.assets[{i}]: {exc}") from None
        if len(set(value)) < len(value):
            raise ValueError(f"schedule.assets: each asset once, got {value}")
        return value

    @field_validator("partition_key_format")
    @classmethod
    def _key_format(cls, value: str) -> str:
        if "%" not in value:
            raise ValueError(f"a strftime format of the upstream's keys (e.g. '%Y-%m-%d'), got {value!r}")
        return value

    @model_validator(mode="after")
    def _partitions_or_time(self) -> AssetSchedule:
        if self.partitions and self.cron:
            raise ValueError(
                "schedule.cron: a partitioned schedule runs for its partitions' events only; drop "
                "cron, or drop partitions to run on the assets or the time"
            )
        return self


Schedule = Annotated[
    Annotated[str, Tag("a cron")] | Annotated[AssetSchedule, Tag("upstream assets")],
    Discriminator(lambda value: "a cron" if isinstance(value, str) else "upstream assets"),
]
"""A cron expression, or upstream assets (the tags are no keys of the input: errors name the fields below)."""


class Spec(_Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]
    """Becomes the dag_id."""
    description: str = ""
    """Shown in Airflow as the DAG's description."""
    schedule: Annotated[Schedule | None, PARSED] = "@daily"
    """A cron expression or preset (a data-interval timetable: each run's data interval is the period it
    trains on), None (triggered runs only), or upstream assets: {assets: [URI, ...], when: all|any, cron: ...
    (asset or time), partitions: day|... (partitioned events)}."""
    timezone: Annotated[str, PARSED] = "UTC"
    """The DAG's time zone, an IANA name (e.g. 'Asia/Tokyo'): the schedule's times, a naive 'start_date', and
    the days, hours... of each run's window and of its '{date}' partitions are read in it."""
    start_date: dt.datetime
    """As in Airflow (in 'timezone' unless a zone is given); also the window 'tfdist plan' shows by default."""
    catchup: Annotated[bool, PARSED] = False
    """As in Airflow: run the intervals missed since 'start_date'."""
    max_active_runs: Annotated[int, Field(ge=1), PARSED] = 1
    """Runs of this pipeline at once (a backfill included)."""
    tags: list[str] = Field(default_factory=list)
    """Shown in Airflow as the DAG's tags."""
    overridable: list[str] = Field(default_factory=list)
    """Fields a run may override (trigger form, '--conf', backfill '--dag-run-conf'), as dotted
    paths, e.g. 'training.epochs'; they become the DAG's typed Params."""
    artifact_root: str = Field(default_factory=default_artifact_root)
    """Where every run's artifacts live: a local path (on Kubernetes, the artifact volume's mount path) or an
    object store's 's3://bucket/prefix' or 'gs://bucket/prefix' (no volume; docs/object-storage.md)."""
    data: DataSpec
    """The input: where it is, its format, features and label, and the data gate."""
    model: ModelSpec
    """The model: a built-in family ('mlp', 'cnn') or 'custom', and its optimizer."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """How and where training runs: the mode, workers, epochs, checkpoints, elasticity, warm start."""
    validation: Annotated[ValidationSpec, AuthorOnly("the gate that decides what is published is the author's")] = (
        Field(default_factory=ValidationSpec)
    )
    """The gate: what a model must score to be published."""
    export: Annotated[ExportSpec, AuthorOnly("what is published and which versions are deleted is the author's")]
    """Where and under which name the blessed model is published, how many versions are kept, approval."""
    retries: Annotated[RetrySpec, PARSED] = Field(default_factory=RetrySpec)
    """Airflow retries of each task."""
    kubernetes: Annotated[KubernetesSpec | None, KUBERNETES] = None
    """Pods, images and volume of a run on Kubernetes (see 'tfdist plan --launcher kubernetes')."""

    @field_validator("artifact_root")
    @classmethod
    def _artifact_root(cls, value: str) -> str:
        return _artifact_location(value)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ValueError, ZoneInfoNotFoundError):
            raise ValueError(
                f"not an IANA time zone name (e.g. 'Asia/Tokyo', 'America/New_York', 'UTC'), got {value!r}"
            ) from None
        return value

    @field_validator("start_date")
    @classmethod
    def _zoned(cls, value: dt.datetime, info: ValidationInfo) -> dt.datetime:
        return value if value.tzinfo else value.replace(tzinfo=ZoneInfo(info.data.get("timezone", "UTC")))

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: Any) -> Any:
        return _valid_cron(value) if isinstance(value, str) else value

    @property
    def zone(self) -> ZoneInfo:
        """The DAG's time zone."""
        return ZoneInfo(self.timezone)

    @property
    def cron(self) -> str | None:
        """The schedule's time part: its cron, an asset-or-time schedule's, else None."""
        return self.schedule.cron if isinstance(self.schedule, AssetSchedule) else self.schedule

    @property
    def partitioned(self) -> str | None:
        """The period of the upstream partitions each run trains on (None: not partitioned)."""
        return None if isinstance(self.schedule, str | None) else self.schedule.partitions

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        t, d, m = self.training, self.data, self.model
        if t.global_batch_size % t.replicas:
            raise ValueError(
                f"training.global_batch_size: must be a multiple of the {t.replicas} replicas "
                f"it is split across, got {t.global_batch_size}"
            )
        if d.num_shards < t.data_readers:
            raise ValueError(
                f"data.num_shards: must be ≥ the {t.data_readers} training processes so every one "
                f"reads its own shards, got {d.num_shards}"
            )
        self._task_fits(d.label.task)
        if isinstance(m, CNNModel) and any(f.missing_indicator for f in d.numeric_features):
            raise ValueError(
                "model.family: 'cnn' reshapes the numeric features into its image, which has no place for missing "
                "indicators; drop missing_indicator, or use 'mlp' or 'wide_deep'"
            )
        if isinstance(m, CNNModel) and d.categorical_features:
            raise ValueError(
                f"model.family: 'cnn' takes numeric features only, '{d.categorical_features[0].name}' is categorical; "
                "use 'mlp' or 'wide_deep'"
            )
        categorical = {f.name for f in d.categorical_features}
        for i, cross in enumerate(getattr(m, "crosses", [])):
            if unknown := [name for name in cross.features if name not in categorical]:
                raise ValueError(
                    f"model.crosses[{i}].features: {unknown[0]!r} is not a categorical feature; categorical "
                    f"features: {', '.join(sorted(categorical)) or 'none'}"
                )
        if isinstance(m, CNNModel) and math.prod(m.image_shape) != d.input_size:
            raise ValueError(
                f"model.image_shape: {m.image_shape} holds {math.prod(m.image_shape)} values but the features "
                f"hold {d.input_size}"
            )
        return self

    def _task_fits(self, task: Task) -> None:
        """The loss, metrics and every metric the validation names are the label task's."""
        m, v = self.model, self.validation
        if m.loss is not None and m.loss not in LOSSES[task]:
            raise ValueError(
                f"model.loss: {m.loss!r} is not a loss of task '{task}'; its losses: {', '.join(LOSSES[task])}"
            )
        known = ("loss", *self.metrics)
        for reported in m.metrics or ():
            if reported not in METRICS[task]:
                raise ValueError(
                    f"model.metrics: {reported!r} is not a metric of task '{task}'; its metrics: "
                    f"{', '.join(METRICS[task])}"
                )
        named: list[tuple[str, str | None]] = [
            *((f"thresholds.{k}", k) for k in v.thresholds),
            *((f"change_thresholds.{k}", k) for k in v.change_thresholds),
            ("checkpoint.metric", v.checkpoint.metric),
        ]
        for path, metric in named:
            if metric is not None and metric not in known:
                listed = f"this model reports {', '.join(known)}"
                raise ValueError(
                    f"validation.{path}: unknown metric {metric!r}; {listed} (add it to model.metrics)"
                    if metric in METRICS[task]
                    else f"validation.{path}: unknown metric {metric!r}, not one of task '{task}': "
                    f"{', '.join(['loss', *METRICS[task]])}"
                )
        for name, rule in v.change_thresholds.items():
            if rule.direction is None and direction(task, name) is None:
                raise ValueError(
                    f"validation.change_thresholds.{name}: {name} has no better direction (best at 1); give "
                    "'direction', or bound it with a value threshold"
                )

    @property
    def loss(self) -> str:
        """The training loss: the model's, else the task's default."""
        return self.model.loss or LOSSES[self.data.label.task][0]

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics reported besides the loss: the model's, else the task's defaults."""
        m = self.model.metrics
        return tuple(m) if m is not None else DEFAULT_METRICS[self.data.label.task]

    def direction(self, metric: str) -> Direction | None:
        """Whether a higher or a lower value of ``metric`` is better, by this spec's task."""
        return direction(self.data.label.task, metric)

    @property
    def checkpoint_selection(self) -> tuple[str, Direction]:
        """(metric, direction) the best checkpoint is chosen by."""
        selection = self.validation.checkpoint
        metric = selection.metric or (self.metrics[0] if self.metrics else "loss")
        return metric, selection.direction or self.direction(metric) or "higher_is_better"

    def change_direction(self, metric: str) -> Direction:
        """The direction of the change threshold on ``metric``: its own, else the metric's."""
        rule = self.validation.change_thresholds[metric]
        found = rule.direction or self.direction(metric)
        assert found is not None  # refused at validation
        return found

    @model_validator(mode="after")
    def _one_window(self) -> Spec:
        if self.partitioned and self.data.window:
            raise ValueError(
                "data.window: a partitioned schedule trains on exactly the partition its events name; "
                "drop data.window, or schedule without partitions"
            )
        unit, period = partition_unit(self.data.source), self.partitioned
        if period and (unit is None or PARTITION_PERIODS.index(unit) > PARTITION_PERIODS.index(period)):
            raise ValueError(
                f"data.source: each run reads its {self.partitioned} partition, but the source names no "
                f"{self.partitioned} or finer: put its time in the path, e.g. '.../{{date}}/*.csv'"
            )
        return self

    @model_validator(mode="after")
    def _kubernetes_section(self) -> Spec:
        if self.training.launcher == "kubernetes" and self.kubernetes is None:
            raise ValueError(
                "kubernetes: required with training.launcher 'kubernetes': at least "
                "kubernetes: {pods: {image: ...}} (and artifact_volume: {claim_name: ...} with a local artifact root)"
            )
        return self

    @model_validator(mode="after")
    def _split_tables_train_sparsely(self) -> Spec:
        """A table split over parameter servers is trained by a sparse optimizer (the Keras optimizers' slots of its
        shards could not be restored into another number of shards)."""
        t = self.training
        if t.strategy != "parameter_server" or self.model.embedding_optimizer:
            return self
        settings = t.parameter_server_settings
        split = [
            f"{name} ({size // COPIES_IN_TRAINING / 2**20:,.0f} MiB)"
            for name, size in self.table_bytes.items()
            if settings.shards(size // COPIES_IN_TRAINING, t.num_ps) > 1
        ]
        if split:
            raise ValueError(
                f"model.embedding_optimizer: the tables of {', '.join(split)} may be split over the parameter servers "
                f"(training.parameter_server.shard_min_bytes {settings.shard_min_bytes:,}); split tables train with a "
                "sparse optimizer: set model.embedding_optimizer to lazy_adam, adagrad or sgd, or raise "
                "shard_min_bytes"
            )
        return self

    @model_validator(mode="after")
    def _embeddings_fit(self) -> Spec:
        """The embedding tables fit the memory the train pods are given (on parameter servers: shared by them)."""
        k = self.kubernetes
        role = "ps" if self.training.strategy == "parameter_server" else "worker"
        memory = k and k.for_role(role).memory
        needed = self.tables_per_pod
        if memory and needed > memory_bytes(memory) // 2:
            raise ValueError(
                f"data.features: the embedding tables need up to {needed / 2**20:,.0f} MiB per {role} pod (with the "
                f"optimizer's slots), over half of its memory {memory}; lower vocabulary.max_tokens, hash_buckets "
                f"or embedding_dim, or give the {role} pods more memory (kubernetes.roles.{role}.memory)"
                + (
                    ""
                    if role == "ps"
                    else ", or split the tables over parameter servers (training.strategy parameter_server)"
                )
            )
        return self

    @property
    def table_bytes(self) -> dict[str, int]:
        """The most bytes each table of weights by id can take in training (with the optimizer's slots): each
        categorical feature's embedding ('user') and, with wide_deep, its weight per id and output ('user (wide)'),
        each cross's ('a × b'). An upper bound: trainer/models.py ``table_bytes`` counts the prepared data's ids."""
        label = self.data.label
        width = len(label.class_names or range(MAX_CLASSES)) if label.task == "multiclass" else 1
        wide = isinstance(self.model, WideDeepModel)
        found = {}
        for f in self.data.categorical_features:
            found[f.name] = f.max_ids * max(1, embedding_dim(f, f.max_ids)) * EMBEDDING_BYTES_PER_VALUE
            if wide:
                found[f"{f.name} (wide)"] = f.max_ids * width * EMBEDDING_BYTES_PER_VALUE
        for cross in self.model.crosses if isinstance(self.model, WideDeepModel) else ():
            found[" × ".join(cross.features)] = cross.hash_buckets * width * EMBEDDING_BYTES_PER_VALUE
        return found

    @property
    def tables_per_pod(self) -> int:
        """The most bytes of tables one training pod holds: every table on a worker (all-reduce); on a parameter
        server its even share of them, at least the largest piece (a table, or a shard of a split one) placed whole."""
        tables, t = self.table_bytes, self.training
        if t.strategy != "parameter_server" or not tables:
            return sum(tables.values())
        shards = t.parameter_server_settings.shards
        pieces = [-(-size // shards(size // COPIES_IN_TRAINING, t.num_ps)) for size in tables.values()]
        return max(-(-sum(tables.values()) // t.num_ps), *pieces)

    @model_validator(mode="after")
    def _on_the_volume(self) -> Spec:
        """Pods see only the artifact volume, which a local artifact root needs and one in an object store has
        not: a local input or export root must be below a local artifact root; a URL is read from wherever the
        pods are."""
        if self.kubernetes is None:
            return self
        in_store = "://" in self.artifact_root
        if in_store and self.kubernetes.artifact_volume is not None:
            raise ValueError(
                f"kubernetes.artifact_volume: pods mount no volume with the artifact root in an object store "
                f"({self.artifact_root}): remove it"
            )
        if not in_store and self.kubernetes.artifact_volume is None:
            raise ValueError(
                f"kubernetes.artifact_volume: required with a local artifact root ({self.artifact_root}): a "
                "ReadWriteMany PersistentVolumeClaim every pod mounts there, e.g. {claim_name: tfdist-artifacts}; "
                "or put the artifact root in an object store (s3://bucket/prefix, gs://bucket/prefix)"
            )
        source = self.data.source.replace("{artifact_root}", self.artifact_root)
        for field, path in (("data.source", source), ("export.root", self.export_root)):
            if "://" in path:
                continue
            if "://" in self.artifact_root:
                raise ValueError(
                    f"{field}: pods on Kubernetes have no artifact volume with the artifact root in an object "
                    f"store ({self.artifact_root}); give a URL (e.g. '{{artifact_root}}/...')"
                )
            if os.path.commonpath([self.artifact_root, os.path.normpath(path)]) != self.artifact_root:
                raise ValueError(
                    f"{field}: pods on Kubernetes see only the artifact volume mounted at "
                    f"{self.artifact_root}; put it below the artifact root (e.g. '{{artifact_root}}/...')"
                )
        return self

    @model_validator(mode="after")
    def _gated(self) -> Spec:
        v = self.validation
        if not (v.thresholds or v.change_thresholds or v.allow_unvalidated):
            raise ValueError(
                "validation: no threshold is configured, so nothing would stop a bad model from being published; "
                "add a value threshold, e.g. validation: {thresholds: {accuracy: {lower: 0.9}}}, or a change "
                "threshold against the published baseline, e.g. validation: {change_thresholds: {accuracy: "
                "{direction: higher_is_better}}}; or, to publish every model that restores, say so: "
                "validation: {allow_unvalidated: true}"
            )
        return self

    @model_validator(mode="after")
    def _overridable_fields(self) -> Spec:
        for path in self.overridable:
            if reason := override_refusal(Spec, path):
                raise ValueError(
                    f"overridable: {path!r} cannot be overridden by whoever triggers a run: {reason}; "
                    f"only the DAG file sets it"
                )
            try:
                value = field_value(self, path)
            except (AttributeError, KeyError):
                value = self
            if isinstance(value, (BaseModel, dict)):
                raise ValueError(
                    f"overridable: {path!r} is not a field; give a dotted path to a single "
                    f"value such as 'training.epochs' or 'model.learning_rate'"
                )
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> Spec:
        """This spec with '{dotted path: value}' applied, validated again; undeclared paths are refused, and
        so is a run that would start more training processes than its pool slots (fixed at parse time). Only
        the fields set are given again: a role's pod settings are those it sets (``KubernetesSpec.for_role``)."""
        refused = sorted(set(overrides) - set(self.overridable))
        if refused:
            raise SpecError(
                [
                    f"{path}: not overridable in this pipeline; overridable: "
                    f"{', '.join(self.overridable) or 'nothing (see the spec field overridable)'}"
                    for path in refused
                ],
                "run overrides",
            )
        data = with_values(self.model_dump(mode="json", exclude_unset=True, by_alias=True), overrides)
        changed = validated(Spec, data, "spec after the run's overrides")
        t, slots = self.training, self.training.pool_slots or self.training.processes
        if t.pool and changed.training.processes > slots:
            raise SpecError(
                [
                    f"training: this run would start {changed.training.processes} training processes but "
                    f"its train task holds {slots} slot(s) of pool {t.pool!r} (training.pool_slots, fixed "
                    f"when the DAG file is parsed)"
                ],
                "run overrides",
            )
        return changed

    @property
    def export_root(self) -> str:
        return self.export.root or os.path.join(self.artifact_root, "models")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def section_models() -> list[type[BaseModel]]:
    """Every spec section model."""
    found: list[type[BaseModel]] = []
    stack: list[type[BaseModel]] = [_Section]
    while stack:
        subclasses = stack.pop().__subclasses__()
        found += subclasses
        stack += subclasses
    return found
