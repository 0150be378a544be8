"""What each run of a pipeline produced, read from its run directories (window, training, gate, export) and
joined with what Airflow knows of it (type, state, times, backfill): for ``tfdist runs`` and the plugin's
training-runs page."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from tfdist.contract.data_records import DataValidation
from tfdist.contract.layout import RunLayout, printable, run_path, runs_root
from tfdist.contract.progress import TrainProgress, read_curve, warm_start_summary
from tfdist.contract.publish_records import Approval, Blessing, ExportResult, Withdrawn
from tfdist.contract.records import Metrics, read_record_if_exists
from tfdist.contract.train_records import CurvePoint, RunRecord, TrainResult
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json_if_exists
from tfdist.publishing import approval, gate, registry
from tfdist.publishing.data_gate import DATA_VALIDATION, failure_line
from tfdist.spec import Spec, load_spec
from tfdist.spec.tasks import TASKS, Direction, direction


def metric_direction(metric: str) -> Direction | None:
    """Whether a higher or a lower value is better: a metric has the same direction in every task that has it
    (None: neither, calibration)."""
    return next(filter(None, (direction(task, metric) for task in TASKS)), None)


def run_spec(layout: RunLayout) -> Spec | None:
    """The spec the run was made from (``spec.json``, read through the spec model); None before it has one (no
    file, or an empty one)."""
    written = read_json_if_exists(layout.spec_file)
    return load_spec(written, origin=f"spec file {layout.spec_file}") if written else None


def task_metrics(spec: Spec | None) -> tuple[str | None, list[str]]:
    """A run's label task and the metrics its spec reports besides the loss; (None, []) before it has a spec. A
    spec from before tasks is multiclass."""
    return (spec.data.label.task, list(spec.metrics)) if spec else (None, [])


class View(BaseModel):
    """What the plugin API answers (its ``response_model``) and ``tfdist runs --json`` prints, built from the
    records."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Progress(View):
    """The train stage's latest progress record as written (``record``), when it was written (ISO 8601, UTC), its
    estimate of the time left and whether training finished."""

    record: TrainProgress
    written_at: str
    seconds_left: float | None
    finished: bool


def progress(run_dir: str) -> Progress | None:
    """The train stage's latest progress with its estimate of the time left, None before it wrote any."""
    record = read_record_if_exists(RunLayout(run_dir).progress_file, TrainProgress)
    if record is None:
        return None
    return Progress(
        record=record,
        written_at=dt.datetime.fromtimestamp(record.updated_at, dt.UTC).isoformat(),
        seconds_left=record.seconds_left,
        finished=record.step >= record.total_steps,
    )


class Curve(View):
    """The run's training curve and, for a warm start, its parent's final training loss and metrics (to mark on
    it)."""

    points: list[CurvePoint]
    parent_final: Metrics | None
    parent_version: int | None


def curve(run_dir: str) -> Curve | None:
    """The run's training curve by step; None before the first point."""
    layout = RunLayout(run_dir)
    points = read_curve(layout.curve_file)
    if not points:
        return None
    start = warm_start_summary(layout.warm_start_file)  # None before, or in a run older than that record
    return Curve(
        points=points,
        parent_final=start.parent_final if start else None,
        parent_version=start.parent_version if start else None,
    )


def started_from(parent: int | None, cold_start: str | None, short: bool = False) -> str:
    """How a run or version started: warm from its parent version, or cold and why; '-' when it was not recorded
    (older runs and versions). ``short``: the version alone, or the reason up to its first colon."""
    if parent is not None:
        return f"v{parent}" if short else f"warm start from v{parent}"
    if cold_start:
        return f"cold: {cold_start.split(':')[0]}" if short else f"cold start: {cold_start}"
    return "-"


def data_validation(run_dir: str) -> DataValidation | None:
    """The data gate's record of the run (its checks, this run's and the baseline's statistics), if any."""
    return read_record_if_exists(os.path.join(RunLayout(run_dir).data_validation_dir, DATA_VALIDATION), DataValidation)


def categorical_failures(record: DataValidation) -> list[str]:
    """The data gate's failed checks of categorical features, in words."""
    categorical = record.statistics.categorical
    return [failure_line(r) for r in record.checks if not r.passed and r.feature in categorical]


def data_decision(run: RunSummary) -> str:
    """The data gate's decision in a word or two: refused, passed, passed with warnings, or '-'."""
    if run.data_decision is None:
        return "-"
    return "REFUSED" if run.data_decision == "refused" else "passed" + (" (warned)" if run.data_failures else "")


class RunSummary(View):
    """One run directory's record (``RunRecord``), training (``TrainResult``, the warm start), data gate, gate,
    approval and published version; None (or empty) where the run wrote nothing yet. The data gate's, the gate's,
    the approval's and the export's fields are their records' as written."""

    pipeline_id: str | None = None
    run_id: str
    overrides: dict[str, Any] = Field(default_factory=dict)
    data_interval_start: str | None = None
    data_interval_end: str | None = None
    window: str | None = None
    partition_key: str | None = None
    run_dir: str
    final_step: int | None
    train_examples_per_sec: float | None
    train_seconds: float | None
    parent_version: int | None
    parent_run_id: str | None
    cold_start: str | None
    data_decision: str | None
    data_failures: list[str]
    data_baseline_version: int | None
    data_categorical_failures: list[str]
    task: str | None
    metric_names: list[str]
    metrics: dict[str, Any] | None
    blessed: bool | None
    gate: str | None
    baseline: dict[str, Any] | None
    checks: list[Any]
    failures: list[Any]
    report: list[Any]
    thresholds: dict[str, Any] | None
    change_thresholds: dict[str, Any] | None
    approval: dict[str, Any] | None
    approval_summary: str | None
    export_version: int | None
    export_path: str | None
    progress: Progress | None


def run_summary(run_dir: str, run_id: str | None = None) -> RunSummary:
    """One run directory's summary; the fields are there, empty, for a run that wrote nothing yet (``run_id`` then
    names it)."""
    layout = RunLayout(run_dir)
    run = read_record_if_exists(layout.run_file, RunRecord)
    train = read_record_if_exists(layout.result("train"), TrainResult)
    start = warm_start_summary(layout.warm_start_file)  # None before, or in a run older than that record
    export = read_record_if_exists(layout.result("export"), ExportResult)
    approved = read_record_if_exists(layout.approval_file, Approval)
    data_gate = data_validation(run_dir)
    task, metric_names = task_metrics(run_spec(layout))
    return RunSummary(
        **(run.model_dump(exclude={"schema_version"}) if run else {"run_id": run_id or os.path.basename(run_dir)}),
        run_dir=run_dir,
        final_step=train.final_step if train else None,
        train_examples_per_sec=train.examples_per_sec if train else None,
        train_seconds=train.train_seconds if train else None,
        parent_version=start.parent_version if start else None,
        parent_run_id=start.parent_run_id if start else None,
        cold_start=start.cold_start if start else None,
        data_decision=data_gate.decision if data_gate else None,
        data_failures=[*data_gate.refused, *data_gate.warned] if data_gate else [],
        data_baseline_version=data_gate.baseline_version if data_gate else None,
        data_categorical_failures=categorical_failures(data_gate) if data_gate else [],
        task=task,
        metric_names=metric_names,
        **gate_summary(read_record_if_exists(layout.blessing_file, Blessing)),
        approval=approved.model_dump(mode="json") if approved else None,
        approval_summary=approval.approval_summary(approved),
        export_version=export.version if export else None,
        export_path=export.path if export else None,
        progress=progress(run_dir),
    )


GATE_FIELDS = ("metrics", "blessed", "gate", "failures", "report", "thresholds", "change_thresholds")
"""What a run's summary takes of its blessing as it is (besides its baseline and checks)."""


def gate_summary(blessing: Blessing | None) -> dict[str, Any]:
    """What a run's summary says of the gate: its decision, each threshold as a check, the baseline it scored
    (all empty before evaluate decided)."""
    if blessing is None:
        return dict.fromkeys(GATE_FIELDS) | {"failures": [], "report": [], "baseline": None, "checks": []}
    scored, checks = blessing.scored_baseline, blessing.checks
    if checks is None and blessing.metrics:  # written before blessing.json recorded its checks
        rules = blessing.thresholds or {}, blessing.change_thresholds or {}
        checks = gate.checks(blessing.metrics, *rules, scored.metrics if scored else None)
    return {
        **blessing.model_dump(mode="json", include=set(GATE_FIELDS)),
        "baseline": scored and scored.model_dump(mode="json", include={"version", "metrics"}),
        "checks": [c.model_dump(mode="json") for c in checks or []],
    }


Summary = TypeVar("Summary", bound=RunSummary)


def _newest_first(runs: Iterable[Summary]) -> list[Summary]:
    return sorted(runs, key=lambda r: (r.data_interval_end or "", r.run_id), reverse=True)


def list_runs(pipeline_id: str, artifact_roots: Iterable[str]) -> list[RunSummary]:
    """One summary per run directory of the pipeline under any of ``artifact_roots``, newest data interval first."""
    runs_dirs = [runs_root(root, pipeline_id) for root in artifact_roots]
    return _newest_first(run_summary(storage.join(d, key)) for d in runs_dirs for key in storage.names(d))


class VersionRow(BaseModel):
    """A published or withdrawn version as ``tfdist models`` and the training-runs page list it: ``baseline``, the
    current baseline (the newest published); ``withdrawn``, who withdrew it, when and why (None: published);
    ``parent``, the version it was warm-started from (None: a cold start, whose reason is ``cold_start``, or a
    version older than the record)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    run_id: str
    data_interval_start: str | None
    data_interval_end: str
    metrics: Metrics
    gate: str | None
    path: str
    baseline: bool
    withdrawn: Withdrawn | None
    parent: int | None
    cold_start: str | None

    @classmethod
    def of(cls, found: registry.PublishedVersion, baseline: bool) -> VersionRow:
        metadata = found.metadata
        return cls(
            **metadata.model_dump(include={"version", "run_id", "data_interval_start", "data_interval_end", "gate"}),
            metrics=metadata.metrics,
            path=found.path,
            baseline=baseline,
            withdrawn=found.withdrawn,
            parent=metadata.parent.version if metadata.parent else None,
            cold_start=metadata.warm_start.cold_start,
        )


def published_versions(model_dirs: Iterable[str]) -> list[VersionRow]:
    """The published versions and the withdrawn ones, newest first. The newest published one is the current
    baseline (what the next run of the latest data interval compares with)."""
    dirs = list(dict.fromkeys(model_dirs))
    live = sorted((m for d in dirs for m in registry.versions(d)), key=lambda m: m.version, reverse=True)
    rows = [VersionRow.of(m, baseline=i == 0) for i, m in enumerate(live)]
    rows += [VersionRow.of(m, baseline=False) for d in dirs for m in registry.withdrawn(d)]
    return sorted(rows, key=lambda m: m.version, reverse=True)


def all_model_dirs(runs: Iterable[RunSummary], declared: Iterable[str]) -> list[str]:
    """A pipeline's model directories: those its export tasks declare and those its runs exported to."""
    return list(dict.fromkeys([*declared, *(os.path.dirname(r.export_path) for r in runs if r.export_path)]))


def now_served(model_dir: str, live: int | None) -> str:
    """After a withdrawal or restore, what TF Serving's "latest" policy serves, in words."""
    if live is None:
        return (
            f"no published version of {os.path.basename(model_dir)} is left: TF Serving serves none until one is "
            "published or restored"
        )
    return f"TF Serving now serves version {live}, the newest published one"


@dataclasses.dataclass(frozen=True)
class AirflowRun:
    """What Airflow's metadata database knows of a run."""

    run_type: str
    state: str
    data_interval_start: str | None
    data_interval_end: str | None
    started_at: str | None
    ended_at: str | None
    backfill_id: int | None = None


@dataclasses.dataclass(frozen=True)
class Backfill:
    id: int
    from_date: str
    to_date: str
    overrides: dict[str, Any]

    @property
    def label(self) -> str:
        overrides = ", ".join(f"{k}={v}" for k, v in self.overrides.items())
        dates = f"backfill {self.id}: {self.from_date[:10]} → {self.to_date[:10]}"
        return f"{dates}, {overrides}" if overrides else dates


def _seconds(start: str | None, end: str | None, now: dt.datetime) -> float | None:
    if start is None:
        return None
    finish = dt.datetime.fromisoformat(end) if end else now
    return round((finish - dt.datetime.fromisoformat(start)).total_seconds(), 1)


def _series(run_type: str | None, backfill: Backfill | None) -> tuple[str, str]:
    if backfill is not None:
        return f"backfill {backfill.id}", backfill.label
    name = run_type or "unknown"
    return name, {"scheduled": "nightly (scheduled)", "manual": "manual triggers"}.get(name, name)


class RunRow(RunSummary):
    """A run on the page: its summary (the data interval Airflow knows where the run recorded none) and what
    Airflow knows of it (None where it lists the run no more)."""

    run_type: str | None
    state: str | None
    started_at: str | None
    ended_at: str | None
    duration_seconds: float | None
    series: str
    """The runs charted as one line: 'backfill <id>', or the run type."""
    series_label: str
    export_withdrawn: dict[str, Any] | None = None
    """Its version's withdrawal (who, when and why); None while it is published, or was never."""


class PipelineRuns(View):
    """The page's data for one pipeline."""

    pipeline_id: str
    metrics: list[str]
    directions: dict[str, Direction | None]
    thresholds: dict[str, Any]
    change_thresholds: dict[str, Any]
    runs: list[RunRow]
    versions: list[VersionRow]


def run_row(summary: RunSummary, known: AirflowRun | None, backfill: Backfill | None, now: dt.datetime) -> RunRow:
    """The run's row on the page: its summary joined with what Airflow knows of it."""
    series, label = _series(known.run_type if known else None, backfill)
    return RunRow(
        **summary.model_dump(exclude={"data_interval_start", "data_interval_end"}),
        data_interval_start=summary.data_interval_start or (known.data_interval_start if known else None),
        data_interval_end=summary.data_interval_end or (known.data_interval_end if known else None),
        run_type=known.run_type if known else None,
        state=known.state if known else None,
        started_at=known.started_at if known else None,
        ended_at=known.ended_at if known else None,
        duration_seconds=_seconds(known.started_at, known.ended_at, now) if known else None,
        series=series,
        series_label=label,
    )


def overview(
    pipeline_id: str,
    artifact_roots: list[str],
    model_dirs: Iterable[str],
    airflow_runs: dict[str, AirflowRun],
    backfills: dict[int, Backfill],
) -> PipelineRuns:
    """The page's data for one pipeline: every run (those Airflow still lists and those only the artifact
    root remembers), the metrics to chart (the specs' and the loss; every one evaluated in runs without a spec) with
    their directions, the thresholds, the published and withdrawn versions (a run's
    ``export_withdrawn``: its version's withdrawal, who, when and why)."""
    now = dt.datetime.now(dt.UTC)
    found = {r.run_id: r for r in list_runs(pipeline_id, artifact_roots)}
    rows = []
    for run_id in dict.fromkeys([*airflow_runs, *found]):
        known = airflow_runs.get(run_id)
        summary = found.get(run_id) or run_summary(run_path(artifact_roots[0], pipeline_id, run_id), run_id)
        backfill = backfills.get(known.backfill_id) if known and known.backfill_id is not None else None
        rows.append(run_row(summary, known, backfill, now))
    versions = published_versions(all_model_dirs(rows, model_dirs))
    withdrawn: dict[int | None, Any] = {v.version: v.withdrawn.model_dump(mode="json") for v in versions if v.withdrawn}
    runs = [r.model_copy(update={"export_withdrawn": withdrawn.get(r.export_version)}) for r in _newest_first(rows)]
    evaluated = [r for r in runs if r.thresholds is not None]
    scored = [k for r in runs for k in r.metrics or {}]
    named = [m for r in runs for m in r.metric_names]  # the specs' metrics, in their order, then the loss
    metrics = [m for m in dict.fromkeys([*named, "loss"] if named else scored) if m in scored]
    return PipelineRuns(
        pipeline_id=pipeline_id,
        metrics=metrics,
        directions={m: metric_direction(m) for m in metrics},
        thresholds=evaluated[0].thresholds or {} if evaluated else {},
        change_thresholds=evaluated[0].change_thresholds or {} if evaluated else {},
        runs=runs,
        versions=versions,
    )


def shown_metrics(runs: list[RunSummary]) -> list[str]:
    """The metrics ``tfdist runs`` shows: the first metric of each run's spec (one, unless the task changed), then
    the loss."""
    return [*dict.fromkeys(r.metric_names[0] for r in runs if r.metric_names), "loss"]


def format_runs(runs: list[RunSummary]) -> str:
    """A side-by-side table: window, overrides, data gate decision, the parent version it was warm-started from
    (or a cold start), the task's metrics (shown_metrics), gate decision, exported version; then the data gate's
    failures of categorical features."""
    metric_names = shown_metrics(runs)
    header = ("run", "window", "overrides", "data", "parent", *metric_names, "gate", "version")
    rows = [header]
    for r in runs:
        metrics = r.metrics or {}
        gate_decision = {True: "blessed", False: "NOT blessed", None: "-"}[r.blessed]
        window = f"{(r.data_interval_start or '?')[:16]} → {(r.data_interval_end or '?')[:16]}"
        overrides = ", ".join(f"{k}={v}" for k, v in r.overrides.items()) or "-"
        shown = [f"{metrics[k]:.4f}" if k in metrics else "-" for k in metric_names]
        rows.append(
            (
                r.run_id,
                window,
                overrides,
                data_decision(r),
                started_from(r.parent_version, r.cold_start, short=True),
                *shown,
                gate_decision,
                str(r.export_version or "-"),
            )
        )
    rows = [tuple(map(printable, row)) for row in rows]  # run ids and overrides a trigger chose: no escape codes
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    failures = [printable(f"  {r.run_id}  {line}") for r in runs for line in r.data_categorical_failures]
    return "\n".join(lines + (["", "data gate, categorical features:", *failures] if failures else []))
