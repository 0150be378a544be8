"""The training's and the run's records: the run record (``run.json``), the train stage's result (its XCom), the
points of its training curve (``curve.jsonl``), its warm-start record and the parent version its processes agreed
on. Each is written and read only through its model here (``tfdist.contract.records``); the progress record is
``tfdist.contract.progress.TrainProgress``."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tfdist.contract.records import Metrics, Part, Record


class RunRecord(Record):
    """``run.json``: what identifies the run and what its trigger changed, written once by its first stage."""

    pipeline_id: str | None = None
    """None in a record from before pipelines had ids."""
    run_id: str
    overrides: dict[str, Any] = Field(default_factory=dict)
    """The trigger's overrides of the author's spec, by dotted field name."""
    data_interval_start: str
    data_interval_end: str
    """The run's window (ISO 8601): later stages read it from here."""
    window: str | None = None
    """Why the run reads that window, in words; None in a record from before windows were recorded."""
    partition_key: str | None = None


class WarmStartSummary(Part):
    """What the train result and the runs page keep of the warm-start record."""

    parent_version: int | None
    parent_run_id: str | None
    cold_start: str | None
    """Why the run started cold (up to 200 characters); None for a warm start."""
    parent_final: Metrics | None
    """The parent's final training loss and metrics (to mark on the curve)."""


class TrainResult(Record):
    """``train/result.json``, the train task's XCom: the last checkpoint, how far training got and how fast."""

    checkpoint: str
    checkpoint_dir: str
    final_step: int
    resumed_from_step: int
    data_manifest_sha256: str
    """The digest of the manifest trained on: evaluate refuses another data directory's."""
    metrics: Metrics
    """The last epoch's loss and train metrics ({} when no epoch ended)."""
    loss_per_epoch: list[float]
    examples_per_sec: float | None
    workers: int
    train_seconds: float
    warm_start: WarmStartSummary | None = None
    """None before the chief wrote its warm-start record, or in a result from before it."""


class WarmStartParent(Part):
    """The published version a run started from."""

    version: int
    run_id: str
    path: str
    data_interval_end: str


class VocabularyRows(Part):
    """How a feature's table rows were matched by token with the parent's."""

    carried: int
    new: int
    dropped: int
    oov_rows: str
    """'carried', or why the out-of-vocabulary rows start fresh."""


class WarmStartRecord(Record):
    """``train/warm_start.json``, written by the chief as training starts: where the training started from (the
    parent version, or why it started cold) and what was restored."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    source: str = Field(alias="from")
    """``training.warm_start.source``."""
    on_mismatch: str
    parent: WarmStartParent | None
    """None for a cold start."""
    parent_final: Metrics | None
    restored: str | None
    """What was restored ('model and optimizer', 'model (another optimizer)'); None for a cold start."""
    cold_start: str | None
    mismatched: list[str]
    """The variables that differ from the parent's, in words."""
    vocabularies: dict[str, VocabularyRows] = Field(default_factory=dict)
    """By feature with a vocabulary, its rows carried from the parent's ({} in a record from before)."""
    normalization: str
    weights: list[tuple[str, str]]
    """Each model variable's Keras path and digest, as training started."""

    def summary(self) -> WarmStartSummary:
        parent = self.parent
        return WarmStartSummary(
            parent_version=parent.version if parent else None,
            parent_run_id=parent.run_id if parent else None,
            cold_start=self.cold_start and self.cold_start[:200],
            parent_final=self.parent_final,
        )


class WarmStartChoice(Record):
    """``train/warm_start_parent.json``: the parent version the run's first process chose (None: none), which the
    others take; created whole, once."""

    version: int | None


class CurvePoint(Record):
    """One line of the training curve (``curve.jsonl``): ``{step, loss, <train metric names>, examples_per_sec,
    learning_rate}`` on disk and over the wire (the train metrics at the top level: a key that names no other field
    is a metric)."""

    step: int
    loss: float | None
    metrics: Metrics = Field(default_factory=dict)
    examples_per_sec: float | None
    learning_rate: float | None = None
    schema_version: int = Field(default=1, exclude=True)
    """On disk (``payload``), not in the points the page charts (each key a chart)."""

    @model_validator(mode="before")
    @classmethod
    def _gather_metrics(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "metrics" in data:
            return data
        named = {k: v for k, v in data.items() if k in cls.model_fields}
        return {**named, "metrics": {k: v for k, v in data.items() if k not in cls.model_fields}}

    @model_serializer(mode="wrap")
    def _flat_metrics(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields: dict[str, Any] = handler(self)
        metrics = fields.pop("metrics")
        return {"step": fields.pop("step"), "loss": fields.pop("loss"), **metrics, **fields}
