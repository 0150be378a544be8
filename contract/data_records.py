"""The data records (docs/tabular.md, "Formats"): the data manifest prepare_data writes (its shards, features,
label, normalization and data statistics), the data statistics kept beside each published version, the data gate's
record (validate_data/data_validation.json) and the two stages' result records (their XCom values). Keys written
only where they apply (a classified label's class counts, a categorical check's value of note) are left out where
they were not given (``Sparse``), so the files keep the shapes the releases before these models wrote."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from tfdist.contract.records import Part, Record

Task = Literal["multiclass", "binary", "regression"]
Mode = Literal["refuse", "warn", "off"]
LabelStorage = Literal["index", "name", "binary", "value"]
"""How the shards hold the label: a class index, a class name, 0 or 1, the target."""


class Sparse(BaseModel):
    """A record (or part) whose ``OMITTED`` keys (they apply to some records only) are left out of its JSON where
    they were not given: read from a file without them, or built without them."""

    OMITTED: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        given = self.model_fields_set
        return {k: v for k, v in dumped.items() if k not in self.OMITTED or k in given}


# The manifest's parts ------------------------------------------------------------------------------------------


class InputFile(Part):
    """One file of the run's input: its path, size and sha256."""

    path: str
    bytes: int
    sha256: str


class Shard(Part):
    """One TFRecord shard of a split: file (in the data directory), size, sha256, examples."""

    file: str
    bytes: int
    sha256: str
    examples: int


class Split(Part):
    """A split's examples and shards."""

    examples: int
    shards: list[Shard]


class VocabularyFile(Part):
    """A categorical feature's vocabulary: ``vocabularies/<name>.json`` (a JSON list of its tokens), their count,
    the file's sha256."""

    file: str
    size: int
    sha256: str


class NumericEntry(Part):
    """The manifest's record of a numeric feature."""

    name: str
    kind: Literal["numeric"]
    shape: list[int]
    missing_indicator: bool


class _CategoricalEntry(Part):
    """What the manifest records of every categorical feature: ``ids`` (``oov_buckets`` + the vocabulary's size, or
    ``hash_buckets``), ``embedding_dim`` (0: one-hot), its vocabulary (None with hashing)."""

    name: str
    dtype: Literal["string", "int64"]
    ids: int
    embedding_dim: int
    vocabulary: VocabularyFile | None
    oov_buckets: int
    hash_buckets: int | None


class CategoricalEntry(_CategoricalEntry):
    """The manifest's record of a categorical feature."""

    kind: Literal["categorical"]


class CategoricalListEntry(_CategoricalEntry):
    """The manifest's record of a categorical list feature."""

    kind: Literal["categorical_list"]
    combiner: Literal["mean", "sum"]
    max_values: int


FeatureEntry = Annotated[NumericEntry | CategoricalEntry | CategoricalListEntry, Field(discriminator="kind")]


class LabelEntry(Part):
    """The manifest's label: ``stored`` how the shards hold it; ``classes`` the class names by index (multiclass;
    binary: [negative, positive]); ``mean``/``std`` the train rows' target's (regression)."""

    name: str
    task: Task
    stored: LabelStorage
    classes: list[str | None] | None
    num_classes: int | None
    positive: str | None
    mean: float | None
    std: float | None

    @property
    def class_names(self) -> list[str | None]:
        """The class names by index ([] for regression)."""
        return list(self.classes or [])

    @property
    def standardization(self) -> tuple[float, float]:
        """The mean and std a standardized prediction is scaled back by: the target's, (0, 1) for a class."""
        return (self.mean or 0.0, self.std or 1.0) if self.task == "regression" else (0.0, 1.0)


class Normalization(Part):
    """A numeric feature's mean and variance per element over the train rows' values present."""

    mean: list[float]
    variance: list[float]


# The data statistics -------------------------------------------------------------------------------------------


class BinScheme(Part):
    """How the histograms are binned (trainer/statistics.py): statistics binned otherwise are not compared."""

    zero: int
    edges: str
    bins: int


class NumericStatistics(Sparse, Part):
    """Per element of a numeric feature: values present, rows missing one (None: statistics from before missing
    values, when there were none), mean, std, min, max (None without a value), zero share, the histogram's
    non-empty bins."""

    OMITTED = frozenset({"missing"})
    count: list[int]
    missing: list[int] | None = None
    mean: list[float]
    std: list[float]
    min: list[float | None]
    max: list[float | None]
    zero_share: list[float]
    histogram: list[dict[str, int]]


class CategoricalStatistics(Part):
    """A categorical feature's rows, values counted, rows missing one, distinct values (exact or estimated), top
    values with their counts, most frequent first."""

    rows: int
    values: int
    missing: int
    distinct: int
    distinct_exact: bool
    top: list[tuple[str, int]]


class ClassStatistics(Part):
    """A classified label's class names and rows per class over both splits."""

    task: Literal["multiclass", "binary"]
    classes: list[str | None]
    class_counts: list[int]


class TargetStatistics(Part):
    """A regression target's statistics (NumericStatistics' of its one element)."""

    task: Literal["regression"]
    count: int
    mean: float
    std: float
    min: float | None
    max: float | None
    histogram: dict[str, int]


class SplitStatistics(Sparse, Part):
    """A split's rows and, for a classified label, its rows per class index."""

    OMITTED = frozenset({"class_counts"})
    rows: int
    class_counts: list[int] | None = None


class DataStatistics(Sparse, Record):
    """What the data gate compares: the manifest's ``statistics``, and kept beside each published version
    (registry.DATA_STATISTICS). Statistics from before categorical features and label tasks (manifest version 3)
    have neither ``categorical`` nor ``label``."""

    OMITTED = frozenset({"label"})
    bins: BinScheme
    features: dict[str, NumericStatistics]
    categorical: dict[str, CategoricalStatistics] = Field(default_factory=dict)
    label: Annotated[ClassStatistics | TargetStatistics, Field(discriminator="task")] | None = None
    train: SplitStatistics
    eval: SplitStatistics

    @property
    def rows(self) -> int:
        """Train and eval rows."""
        return self.train.rows + self.eval.rows

    @property
    def task(self) -> Task:
        """The label's task (statistics from before tasks: multiclass)."""
        return self.label.task if self.label else "multiclass"


# The manifest --------------------------------------------------------------------------------------------------


class ManifestHead(Record):
    """Which data a manifest is of: its layout version and input fingerprint, read before the whole manifest (one of
    another layout has another shape)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    version: int
    input_fingerprint: str = ""


class Manifest(Sparse, Record):
    """The data manifest (data/manifest.json): ``version`` its layout's (trainer/data.py's MANIFEST_VERSION, part
    of the input fingerprint); ``class_counts`` rows per class index over both splits (a classified label only)."""

    OMITTED = frozenset({"class_counts"})
    version: int
    input_fingerprint: str
    inputs: list[InputFile]
    features: list[FeatureEntry]
    label: LabelEntry
    eval_fraction: float
    stats: dict[str, Normalization]
    statistics: DataStatistics
    class_counts: list[int] | None = None
    train: Split
    eval: Split

    def split(self, name: str) -> Split:
        """The split named ``name`` (train or eval)."""
        splits = {"train": self.train, "eval": self.eval}
        return splits[name]

    @property
    def with_vocabulary(self) -> list[CategoricalEntry | CategoricalListEntry]:
        """The categorical features that map through a vocabulary."""
        return [f for f in self.features if not isinstance(f, NumericEntry) and f.vocabulary is not None]


class PrepareResult(Record):
    """prepare_data's result record (its XCom value)."""

    data_dir: str
    train_examples: int
    eval_examples: int
    input_fingerprint: str


# The data gate's record ----------------------------------------------------------------------------------------


class BaselineRef(Part):
    """The published version whose data the run's was compared with."""

    version: int
    run_id: str
    path: str


class NotCompared(Part):
    """A feature (or the label) with nothing to compare with in the baseline's data, and why."""

    feature: str
    why: str


class TopValue(Part):
    """A categorical check's value of note (the one that moved most, or the most frequent outside the
    vocabulary): its share, and the baseline's (None: not known)."""

    value: str
    share: float
    baseline: float | None


class CheckRow(Sparse, Part):
    """One check of the data gate: this run's value, the baseline's, the bound, the margin (how far inside the
    bound; negative: failed), what a failure does; ``top_value``, ``within`` and ``beyond_top`` for categorical
    features (publishing/data_gate.py's FORMULAS)."""

    OMITTED = frozenset({"top_value", "within", "beyond_top"})
    check: str
    feature: str
    statistic: str
    value: int | float
    baseline: int | float | None
    bound: int | float | list[float]
    margin: float
    rule: str
    top_value: TopValue | None = None
    within: float | None = None
    beyond_top: float | None = None
    mode: Mode
    passed: bool


class DataValidation(Record):
    """The data gate's record (validate_data/data_validation.json): the decision, every check, what was not
    compared and why, the settings and formulas, this run's and the baseline's statistics. Records from before
    ``not_compared`` and ``formulas`` read with them empty."""

    decision: Literal["passed", "refused"]
    run_id: str
    data_interval_end: str | None
    baseline: BaselineRef | None
    baseline_version: int | None
    compared: bool
    why_not_compared: str | None
    not_compared: list[NotCompared] = Field(default_factory=list)
    settings: dict[str, Any]
    formulas: dict[str, str] = Field(default_factory=dict)
    checks: list[CheckRow]
    checks_run: int
    failed: int
    refused: list[str]
    warned: list[str]
    statistics: DataStatistics
    baseline_statistics: DataStatistics | None


SHOWN_FAILURES, SHOWN_CHARACTERS = 5, 200
"""validate_data's result holds the first failures refused and warned, each cut to this many characters (it must
fit a pod's termination message; the whole record is DataValidation)."""


class ValidateDataResult(Record):
    """validate_data's result record (its XCom value): the decision and the first failures."""

    decision: Literal["passed", "refused"]
    baseline_version: int | None
    checks_run: int
    failed: int
    refused: list[str]
    warned: list[str]

    @classmethod
    def of(cls, record: DataValidation) -> ValidateDataResult:
        """The result of the gate's ``record``."""

        def shown(lines: list[str]) -> list[str]:
            return [line[:SHOWN_CHARACTERS] for line in lines[:SHOWN_FAILURES]]

        return cls(
            decision=record.decision,
            baseline_version=record.baseline_version,
            checks_run=record.checks_run,
            failed=record.failed,
            refused=shown(record.refused),
            warned=shown(record.warned),
        )


# prepare_data's pods' files (in the try's directory: trainer/prepare.py's Pods) ---------------------------------


class InputPiece(Part):
    """A piece of the input a writer reads: its file, and the byte range [start, end) whose lines it reads (line
    formats; the whole file otherwise)."""

    url: str
    start: int
    end: int


class PodsPlan(Record):
    """``plan.json``, written by pod 0: each pod's share of the input (its pieces, in input order), or that the
    prepared data is reused (``reuse``; no shares then)."""

    shares: list[list[InputPiece]] | None = None
    reuse: bool = False


class FirstRow(Part):
    """A row of the input, as a message names it: its file, and its line's byte offset (None: a record format's
    file) or its record."""

    url: str
    offset: int | None = None
    record: int = 0


class PieceTally(Part):
    """What a writer learned of one piece, exactly (trainer/prepare.py's PieceResult): rows per split and shard,
    class counts per split (pairs of class and rows), the train rows' moments and every row's statistics per
    numeric feature (arrays as JSON lists), its value counts' file in the parts directory, and a binary label's
    negative value with its first row."""

    counts: dict[str, list[int]]
    classes: dict[str, list[tuple[int | str, int]]]
    train: dict[str, dict[str, Any]]
    statistics: dict[str, dict[str, Any]]
    values_file: str | None
    negative: tuple[str, FirstRow] | None


class PodResult(Record):
    """``result-<pod>.json``, written by each pod but pod 0 once its parts are handed over: what it learned of
    each piece of its share, in input order, and the seconds its TensorFlow import took."""

    pieces: list[PieceTally]
    import_seconds: float
