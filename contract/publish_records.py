"""The publishing records: the gate's blessing (``eval/blessing.json``) and the eval metrics (``eval/metrics.json``),
the human approval (``approval.json``), a published version's ``metadata.json`` and a withdrawn one's
``withdrawn.json``, and the result records of evaluate and export (``<run dir>/<task>/result.json``, their XCom
values). tfdist.publishing makes and judges them; these are their shapes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from tfdist.contract.data_records import LabelEntry
from tfdist.contract.records import Metrics, Part, Record
from tfdist.spec.tasks import Direction
from tfdist.spec.validation import ChangeThreshold, Threshold

INTEGRITY_CHECKS = ("restores", "finite_weights", "step", "data_manifest")
"""The integrity checks evaluate applies to each candidate checkpoint, in order."""


class ValueCheck(Part):
    """A value threshold's bound applied to a metric: ``margin`` is how far inside the rule (negative: failed;
    None: the metric is undefined)."""

    metric: str
    kind: Literal["value"] = "value"
    rule: str
    bound: float
    value: float | None
    margin: float | None
    passed: bool


class ChangeCheck(Part):
    """A change threshold applied against the baseline's value: ``delta`` the change, ``allowed`` the tolerance."""

    metric: str
    kind: Literal["change"] = "change"
    rule: str
    value: float | None
    baseline: float | None
    delta: float | None
    allowed: float | None
    margin: float | None
    passed: bool


Check = Annotated[ValueCheck | ChangeCheck, Field(discriminator="kind")]


class ScoredBaseline(Part):
    """The baseline version, scored on this run's eval data through its serving signature."""

    version: int
    path: str
    run_id: str
    metrics: Metrics


class UnscoredBaseline(Part):
    """The baseline version, which could not score this run's eval data (``error``: why)."""

    version: int
    path: str
    error: str


class Delta(Part):
    """A metric's change against the baseline: absolute, and relative to the baseline's value (None: it is 0)."""

    absolute: float
    relative: float | None


class Integrity(Part):
    """The integrity checks applied, and the one a candidate failed (None: every candidate passed)."""

    checks: list[str] = Field(default_factory=lambda: list(INTEGRITY_CHECKS))
    failed: str | None = None


class Candidate(Part):
    """A candidate checkpoint that passed the integrity checks, and its metrics."""

    checkpoint: str
    step: int
    metrics: Metrics


class ClassScore(Part):
    """A class's eval examples and the share of them predicted as it (None: no example)."""

    examples: int
    accuracy: float | None


class CheckpointChoice(Part):
    """What the validated checkpoint was chosen by: a metric and its direction."""

    metric: str
    direction: Direction


class Blessing(Record):
    """The gate's decision (``eval/blessing.json``). A candidate that fails an integrity check is refused with
    ``integrity.failed`` and ``failures`` alone; the other fields are then at their defaults, as they are where a
    release before them wrote the record (``checks`` None: before blessing.json recorded its checks)."""

    blessed: bool
    run_id: str
    checkpoint: str
    failures: list[str]
    report: list[str]
    integrity: Integrity = Field(default_factory=Integrity)
    gate: str | None = None
    data_interval_end: str | None = None
    step: int | None = None
    eval_examples: int | None = None
    task: str | None = None
    metrics: Metrics | None = None
    directions: dict[str, Direction | None] = Field(default_factory=dict)
    per_class: dict[str, ClassScore] | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    checkpoint_selection: CheckpointChoice | None = None
    thresholds: dict[str, Threshold] | None = None
    change_thresholds: dict[str, ChangeThreshold] | None = None
    baseline: ScoredBaseline | UnscoredBaseline | None = None
    deltas: dict[str, Delta] = Field(default_factory=dict)
    checks: list[Check] | None = None

    @property
    def scored_baseline(self) -> ScoredBaseline | None:
        """The baseline, where it scored this run's eval data."""
        return self.baseline if isinstance(self.baseline, ScoredBaseline) else None

    @property
    def baseline_version(self) -> int | None:
        return self.baseline.version if self.baseline else None


class EvalMetrics(Record):
    """The chosen checkpoint's metrics on the eval split, and per class (``eval/metrics.json``)."""

    metrics: Metrics
    per_class: dict[str, ClassScore] | None = None


class EvaluateResult(Record):
    """evaluate's result record and XCom value: the decision, metrics and failures (the whole record is the
    blessing)."""

    blessed: bool
    gate: str | None
    run_id: str
    checkpoint: str
    step: int | None
    eval_examples: int | None
    metrics: Metrics | None
    deltas: dict[str, Delta]
    failures: list[str]
    baseline_version: int | None

    @classmethod
    def of(cls, blessing: Blessing) -> EvaluateResult:
        taken = set(cls.model_fields) - {"schema_version", "baseline_version"}
        return cls(**{k: getattr(blessing, k) for k in taken}, baseline_version=blessing.baseline_version)


class ExportResult(Record):
    """export's result record and XCom value: the published version, and how its training started."""

    path: str
    version: int
    model_name: str
    metrics: Metrics | None
    parent_version: int | None = None
    cold_start: str | None = None


Decision = Literal["awaiting", "approved", "rejected"]


class Approval(Record):
    """The human decision on publishing a run (``approval.json``): who decided (None: the timeout), when, their
    comment, whether no answer came in time, who was asked (None: anyone who may act on the DAG), whom four-eyes
    left out, and why the answer or the request was refused (then rejected)."""

    run_id: str
    decision: Decision
    by: str | None = None
    comment: str | None = None
    timed_out: bool = False
    at: str
    asked: list[str] | None = None
    excluded: str | None = None
    refused: str | None = None


class PublishedBlessing(Part):
    """What a version's metadata keeps of the blessing it was published by."""

    blessed: bool
    gate: str | None
    metrics: Metrics | None
    baseline: ScoredBaseline | UnscoredBaseline | None
    deltas: dict[str, Delta]
    thresholds: dict[str, Threshold] | None
    change_thresholds: dict[str, ChangeThreshold] | None
    step: int | None

    @classmethod
    def of(cls, blessing: Blessing) -> PublishedBlessing:
        return cls(**{k: getattr(blessing, k) for k in cls.model_fields})


class ServingSkew(Part):
    """The reloaded SavedModel's largest difference from the trained model's outputs on the eval examples."""

    examples: int
    max_abs_difference: float
    tolerance: float


class ServingInput(Part):
    """One input of the serving signature: a feature by name, its dtype, shape (None: any size) and the value that
    says missing."""

    name: str
    kind: str
    dtype: str
    shape: list[int | None]
    missing: str | int


class ServingOutput(Part):
    dtype: str
    shape: list[int | None]


class Signature(Part):
    """The serving signature's inputs and its outputs by name."""

    inputs: list[ServingInput]
    outputs: dict[str, ServingOutput]


class ParentVersion(Part):
    """The version a version was warm-started from."""

    version: int
    run_id: str


class WarmStart(Part):
    """How a version's training started: the source, what it restored, why it started cold, what did not match."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True)

    source: str | None = Field(None, alias="from")
    restored: str | None = None
    cold_start: str | None = None
    mismatched: list[str] | None = None


class VersionMetadata(Record):
    """A published version's ``metadata.json``: what was published, from which run, data and checkpoint, and why.
    Fields a version published by an earlier release may lack have defaults (``label`` None: before labels had
    tasks; ``parent`` None: a cold start, or before lineage was recorded)."""

    model_name: str | None = None
    version: int
    run_id: str
    data_interval_start: str | None = None
    data_interval_end: str
    spec_sha256: str | None = None
    data_manifest_sha256: str | None = None
    input_fingerprint: str | None = None
    metrics: Metrics
    gate: str | None = None
    blessing: PublishedBlessing | None = None
    serving_eval_metrics: Metrics | None = None
    serving_skew: ServingSkew | None = None
    approval: Approval | None = None
    source_checkpoint: str | None = None
    parent: ParentVersion | None = None
    warm_start: WarmStart = Field(default_factory=WarmStart)
    train_metrics: Metrics | None = None
    label: LabelEntry | None = None
    signature: Signature | None = None
    tensorflow_version: str | None = None


class Withdrawn(Record):
    """A withdrawn version's ``withdrawn.json``: who withdrew it, when and why."""

    version: int
    by: str
    reason: str
    at: str


class Claim(Record):
    """A model directory's ``.claim-<version>`` (registry-internal): an export's, naming its run and checkpoint,
    until its version is published; a prune's (``pruning``, in an object store) until its version is deleted."""

    run_id: str | None = None
    source_checkpoint: str | None = None
    pruning: bool = False


class Holder(Part):
    """The process that made a lock ticket: its host and pid."""

    host: str
    pid: int


class LockTicket(Record):
    """A ticket of a model directory's lock in an object store (``.registry.lock/<n>.json``, registry-internal): who
    made it, when its lease ends (ISO 8601), and whether its holder released the lock."""

    holder: Holder
    until: str
    released: bool = False


class ReaderMarker(Record):
    """A process's marker of a version it reads (``.readers/<random>.json``, registry-internal): the version, its
    run, the process's host and pid, and in an object store its lease's end (ISO 8601; None: a local marker, held
    by its file lock)."""

    version: int
    run_id: str
    host: str
    pid: int
    until: str | None = None
