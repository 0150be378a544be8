"""The data section: the input's source and format, its features (numeric, categorical, lists) and label, and
how it is split and sharded."""

from __future__ import annotations

import math
import string
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from tfdist.spec.data_checks import DataChecks
from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.rules import Rule
from tfdist.spec.section import IDENTIFIER_PATTERN, Section
from tfdist.spec.tasks import Task

SOURCE_PLACEHOLDERS = ("date", "year", "month", "day", "hour", "artifact_root")
MAX_VOCABULARY = 1 << 20
"""The largest vocabulary the statistics pass keeps exact counts for (beyond it: hashing)."""
MAX_HASH_BUCKETS = 1 << 26
MAX_VALUE_BYTES = 4096
MAX_CLASSES = 10000
"""Most classes of a multiclass label, named in the spec or learned from the data."""


class NumericFeature(Section):
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


class Vocabulary(Section):
    """A vocabulary prepare_data computes from the train and eval rows: the most frequent values, most frequent
    first (ties in byte order)."""

    max_tokens: Annotated[int, Field(ge=1, le=MAX_VOCABULARY)] = 10000
    """Most values kept; the rest go to the out-of-vocabulary buckets."""
    min_count: Annotated[int, Field(ge=1)] = 1
    """Only values seen in at least this many rows are kept."""
    oov_buckets: Annotated[int, Field(ge=1, le=1024)] = 1
    """Buckets for values outside the vocabulary (a value's bucket is a hash of it)."""


def _one_encoding(feature: _CategoricalBase) -> str | None:
    if feature.vocabulary is not None and feature.hash_buckets is not None:
        return f"data.features '{feature.name}': give 'vocabulary' or 'hash_buckets', not both"
    return None


class _CategoricalBase(Section):
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

    rules = (Rule(_one_encoding),)

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


def kind(value: Any) -> str:
    """A raw feature's 'kind' (default 'numeric'): the union's discriminator, named after the field it reads, as
    pydantic names a callable discriminator in its errors ('kind()')."""
    return (value.get("kind", "numeric") if isinstance(value, dict) else getattr(value, "kind", "numeric")) or ""


Feature = Annotated[
    Annotated[NumericFeature, Tag("numeric")]
    | Annotated[CategoricalFeature, Tag("categorical")]
    | Annotated[CategoricalListFeature, Tag("categorical_list")],
    Discriminator(kind),
]
"""A raw input feature; its 'kind' (default 'numeric') says which fields it takes."""
Categorical = CategoricalFeature | CategoricalListFeature


def label_value(value: str | int | bool) -> str:
    """A label value as its canonical string (True → 'true', 1 → '1')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fields_of_task(label: Label) -> str | None:
    given = {k for k in ("num_classes", "classes", "positive") if getattr(label, k) is not None}
    allowed = {"multiclass": {"num_classes", "classes"}, "binary": {"positive"}, "regression": set()}[label.task]
    if extra := sorted(given - allowed):
        return (
            f"data.label.{extra[0]}: not a field of task '{label.task}' (it takes "
            f"{', '.join(sorted(allowed)) or 'neither num_classes, classes nor positive'})"
        )
    return None


def _classes_once(label: Label) -> str | None:
    if label.classes is None:
        return None
    if len(set(label.classes)) < len(label.classes):
        return f"data.label.classes: each class once, got {label.classes}"
    if label.num_classes is not None and label.num_classes != len(label.classes):
        return f"data.label.num_classes: {label.num_classes}, but classes names {len(label.classes)}; drop one"
    return None


class Label(Section):
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

    rules = (Rule(_fields_of_task), Rule(_classes_once))

    @property
    def class_names(self) -> list[str] | None:
        """The classes by name when the spec fixes them (multiclass), else None."""
        if self.classes is not None:
            return list(self.classes)
        return [str(c) for c in range(self.num_classes)] if self.num_classes else None


def _distinct_names(data: DataSpec) -> str | None:
    names = [f.name for f in data.features] + [data.label.name]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return f"features and label must have distinct names, repeated: {', '.join(duplicates)}"
    return None


def _bounds_of_numeric_features(data: DataSpec) -> str | None:
    numeric = [f.name for f in data.numeric_features]
    unknown = sorted(set(data.checks.bounds.features) - set(numeric))
    if unknown:
        return (
            f"checks.bounds.features: {', '.join(unknown)} is not a numeric feature; numeric features: "
            f"{', '.join(numeric) or 'none'}"
        )
    return None


def _strings_for_categorical(data: DataSpec) -> str | None:
    if data.format == "npz" and data.categorical_features:
        return (
            f"data.features '{data.categorical_features[0].name}': categorical features need a format with "
            "strings and lists (csv, jsonl, parquet, tfrecord), not npz"
        )
    return None


class DataSpec(Section):
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

    rules = (Rule(_distinct_names), Rule(_bounds_of_numeric_features), Rule(_strings_for_categorical))

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
