"""Spec + run context → Plan: pure data, launcher-neutral (each stage's arguments and members, not how they start).
No Airflow, no TensorFlow, no launcher."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from croniter import croniter

from tfdist.contract import (
    EvaluateArgs,
    ExportArgs,
    PrepareArgs,
    RunLayout,
    StageArgs,
    TrainArgs,
    ValidateDataArgs,
    run_path,
)
from tfdist.spec import Spec, partition_unit


def scheduled_interval(schedule: str | None, logical_date: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The data interval of a scheduled run whose logical date (the interval's start) is ``logical_date``."""
    if schedule is None:
        return logical_date, logical_date + dt.timedelta(days=1)
    return logical_date, croniter(schedule, logical_date).get_next(dt.datetime)


def manual_interval(schedule: str | None, run_after: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The window of a run triggered without a logical date: the last complete interval before
    ``run_after``, as Airflow's data-interval timetables infer it (daily without a schedule)."""
    if schedule is None:
        end = dt.datetime.combine(run_after.date(), dt.time(), run_after.tzinfo)
        return end - dt.timedelta(days=1), end
    end = run_after if croniter.match(schedule, run_after) else croniter(schedule, run_after).get_prev(dt.datetime)
    return croniter(schedule, end).get_prev(dt.datetime), end


PARTITION_KEY_FORMATS = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "week": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}
"""A partitioned pipeline's own partition keys (its runs' ``partition_key``), by period: a week's is its Monday."""


def period_end(start: dt.datetime, period: str) -> dt.datetime:
    """The end of the ``period`` (hour, day, week, month, year) that starts at ``start``."""
    if period in ("hour", "day", "week"):
        return start + dt.timedelta(**{f"{period}s": 1})
    months = start.month + (1 if period == "month" else 12)
    return start.replace(year=start.year + (months - 1) // 12, month=(months - 1) % 12 + 1)


def partition_start(key: str, period: str) -> dt.datetime:
    """Where the partition ``key`` of a ``period`` starts (UTC); ValueError for a key of another form."""
    return dt.datetime.strptime(key, PARTITION_KEY_FORMATS[period]).replace(tzinfo=dt.UTC)


def pipeline_id(dag_id: str, group_id: str | None) -> str:
    """A pipeline's id: its DAG's id, or '<dag id>.<task group id>' for one embedded in a DAG's task group."""
    return f"{dag_id}.{group_id}" if group_id else dag_id


@dataclass(frozen=True)
class RunContext:
    """What identifies one run: artifacts are keyed by it, never by wall-clock time."""

    pipeline_id: str
    """The DAG's id, or '<dag id>.<task group id>' for a pipeline embedded in a DAG (see pipeline_id)."""
    run_id: str
    interval_start: dt.datetime
    interval_end: dt.datetime
    window: str = "its data interval"
    """Why the run reads [interval_start, interval_end) (recorded in run.json, said in the task log)."""
    partition_key: str | None = None
    """The upstream partition the run trains on (a partitioned asset schedule)."""

    def window_start(self, schedule: str | None, window: int | None) -> dt.datetime:
        """Where the run's window starts: the data interval's start, or ``window`` periods of the schedule
        (days without one) before its end."""
        if not window:
            return self.interval_start
        if schedule is None:
            return self.interval_end - dt.timedelta(days=window)
        ticks = croniter(schedule, self.interval_end)
        return [ticks.get_prev(dt.datetime) for _ in range(window)][-1]


def partitions(start: dt.datetime, end: dt.datetime, unit: str | None) -> list[dt.datetime]:
    """The starts of the ``unit`` partitions overlapping [start, end) (just ``start`` without a unit)."""
    if unit is None:
        return [start]
    t = start.replace(minute=0, second=0, microsecond=0, **({} if unit == "hour" else {"hour": 0}))
    t = t.replace(**({"day": 1} if unit in ("month", "year") else {}), **({"month": 1} if unit == "year" else {}))
    found = []
    while t < end:
        found.append(t)
        t = period_end(t, unit)
    return found


def source_for(source: str, partition: dt.datetime, artifact_root: str) -> str:
    return source.format(
        date=partition.date().isoformat(),
        year=f"{partition:%Y}",
        month=f"{partition:%m}",
        day=f"{partition:%d}",
        hour=f"{partition:%H}",
        artifact_root=artifact_root,
    )


@dataclass(frozen=True)
class Member:
    """One member of a stage: a process of a TF cluster, a Horovod worker (its ``slots`` ranks), or a stage's
    one process."""

    role: str
    index: int
    gpus: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Elastic:
    """After losing workers, the stage restarts from its latest checkpoint with the workers it has left."""

    sizes: tuple[int, ...]
    """The worker counts it may restart with, largest first."""
    max_restarts: int
    """Restarts allowed within one run of the stage."""


@dataclass(frozen=True)
class Stage:
    """One task's stage, launcher-neutral: its arguments and its members, not where or how they start (each
    launcher realizes it: processes on this machine, or Kubernetes objects)."""

    task_id: str
    args: StageArgs
    members: tuple[Member, ...]
    sync: Literal["tf_cluster", "horovod"] | None = None
    """How the members train together: a TF cluster (each member one process, told the cluster by its
    TF_CONFIG), or Horovod (each member a worker running ``slots`` ranks); None: one member alone."""
    slots: int = 1
    """Horovod: ranks per worker."""
    servers: tuple[str, ...] = ()
    """Roles that serve until stopped (parameter-server ``ps`` and ``worker``): the stage is done when every
    other member has succeeded, then the launcher stops them."""
    writers: int | None = None
    """prepare_data: processes writing shards, each a share of the input (None: the stage chooses)."""
    hang_timeout_seconds: int | None = None
    """Training: the stage fails when no training process has made progress for this long."""
    elastic: Elastic | None = None

    @property
    def result_file(self) -> str:
        """Where the stage writes its result record (tfdist.contract)."""
        return self.args.result

    @property
    def heartbeat_dir(self) -> str:
        """Training: where each training process marks its progress (tfdist.contract.beat)."""
        return self.args.heartbeats if isinstance(self.args, TrainArgs) else ""

    @property
    def checkpoint_dir(self) -> str:
        """Training: where the chief writes checkpoints (tfdist.contract.checkpoint_step reads the latest)."""
        return self.args.checkpoints if isinstance(self.args, TrainArgs) else ""

    @property
    def workers(self) -> int:
        return sum(m.role == "worker" for m in self.members)

    @property
    def gpus_per_worker(self) -> int:
        return max((m.gpus for m in self.members if m.role == "worker"), default=0)

    def with_workers(self, count: int) -> Stage:
        """The stage with its first ``count`` workers (a TF cluster's other roles as they were)."""
        return replace(self, members=tuple(m for m in self.members if m.role != "worker" or m.index < count))


def train_stage(spec: Spec, args: TrainArgs) -> Stage:
    """Horovod (backend mpi): ``num_workers`` workers of ``slots_per_worker`` ranks. A TF cluster (backend tf):
    ``num_workers`` workers, with a parameter-server chief and ``num_ps`` parameter servers, which serve."""
    t = spec.training
    workers = tuple(Member("worker", i, t.gpus_per_worker) for i in range(t.num_workers))
    elastic = Elastic(t.elastic_sizes, t.max_restarts) if t.elastic else None
    common = {"hang_timeout_seconds": t.hang_timeout_seconds, "elastic": elastic}
    if t.backend == "mpi":
        return Stage("train", args, workers, "horovod", slots=t.mpi_settings.slots_per_worker, **common)
    if t.strategy == "parameter_server":
        others = (Member("chief", 0), *(Member("ps", i) for i in range(t.num_ps)))
        return Stage("train", args, others + workers, "tf_cluster", servers=("ps", "worker"), **common)
    return Stage("train", args, workers, "tf_cluster", **common)


@dataclass(frozen=True)
class Plan:
    spec: Spec
    """The run's effective spec (after its overrides)."""
    layout: RunLayout
    context: RunContext
    model_dir: str
    """``<export root>/<model name>``: versions are published below it."""
    stages: tuple[Stage, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    """The run's overrides of the author's spec (recorded in run.json)."""

    def stage(self, task_id: str) -> Stage:
        return next(s for s in self.stages if s.task_id == task_id)

    def run_record(self) -> dict[str, Any]:
        """run.json: what identifies the run and what its trigger changed."""
        ctx = self.context
        return {
            "pipeline_id": ctx.pipeline_id,
            "run_id": ctx.run_id,
            "overrides": self.overrides,
            "data_interval_start": ctx.interval_start.isoformat(),
            "data_interval_end": ctx.interval_end.isoformat(),
            "window": ctx.window,
            "partition_key": ctx.partition_key,
        }


def version_base(ctx: RunContext) -> int:
    """First export version of the run's data interval, from its end (not wall-clock): e.g. 20261121000000.

    The export takes the first free version ``base + n`` (n < 100); a rerun of the same run reuses its own."""
    return int(ctx.interval_end.astimezone(dt.UTC).strftime("%Y%m%d%H%M")) * 100


def build_plan(
    spec: Spec,
    ctx: RunContext,
    *,
    run_dir: str | None = None,
    source: str | None = None,
    export_root: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Plan:
    """The whole run's plan; ``run_dir``, ``source`` and ``export_root`` replace the spec's defaults."""
    layout = RunLayout(run_dir or run_path(spec.artifact_root, ctx.pipeline_id, ctx.run_id))
    model_dir = os.path.join(export_root or spec.export_root, spec.export.model_name)
    source = source or spec.data.source
    sources = [
        source_for(source, t, spec.artifact_root)
        for t in partitions(ctx.window_start(spec.cron, spec.data.window), ctx.interval_end, partition_unit(source))
    ]
    published = {"spec": layout.spec_file, "run": layout.run_file, "data": layout.data_dir, "model_dir": model_dir}
    prepare = PrepareArgs(
        layout.spec_file, layout.data_dir, layout.result("prepare_data"), tuple(dict.fromkeys(sources))
    )
    validate = ValidateDataArgs(
        layout.spec_file,
        layout.run_file,
        layout.data_dir,
        model_dir,
        layout.data_validation_dir,
        layout.result("validate_data"),
    )
    train = TrainArgs(
        layout.spec_file,
        layout.data_dir,
        layout.checkpoint_dir,
        layout.result("train"),
        layout.heartbeat_dir,
        layout.progress_file,
        layout.run_file,
        model_dir,
        layout.warm_start_file,
        layout.curve_file,
        layout.tensorboard("train"),
    )
    evaluate = EvaluateArgs(
        **published,
        checkpoints=layout.checkpoint_dir,
        train_result=layout.result("train"),
        out=layout.eval_dir,
        result=layout.result("evaluate"),
        tensorboard=layout.tensorboard("eval"),
    )
    export = ExportArgs(
        **published,
        eval=layout.eval_dir,
        train_result=layout.result("train"),
        warm_start=layout.warm_start_file,
        version_base=version_base(ctx),
        result=layout.result("export"),
        approval=layout.approval_file if spec.export.approval else "",
    )
    return Plan(
        spec=spec,
        layout=layout,
        context=ctx,
        model_dir=model_dir,
        stages=(
            Stage("prepare_data", prepare, (Member("prepare", 0),), writers=spec.data.prepare_processes),
            Stage("validate_data", validate, (Member("validate", 0),)),
            train_stage(spec, train),
            Stage("evaluate", evaluate, (Member("evaluate", 0),)),
            Stage("export", export, (Member("export", 0),)),
        ),
        overrides=overrides or {},
    )
