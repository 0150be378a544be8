"""Spec + run context → Plan: pure data, launcher-neutral (each stage's arguments, its members and where they
run, not how they start). The plan is the only reader of the spec on the way to a launcher. No Airflow, no
TensorFlow, no launcher.

``windows``: which data a run reads · ``stages``: the plan of one stage · this module: the run's ``Plan``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from tfdist.contract.layout import RunLayout, run_path
from tfdist.contract.stages import EvaluateArgs, ExportArgs, PrepareArgs, TrainArgs, ValidateDataArgs
from tfdist.contract.train_records import RunRecord
from tfdist.operators.plan.stages import (
    Elastic,
    Following,
    Horovod,
    KubernetesPlacement,
    Member,
    PodResources,
    StagePlan,
    kubernetes_placement,
    train_stage,
)
from tfdist.operators.plan.windows import (
    RunContext,
    RunFacts,
    WindowRefused,
    as_datetime,
    local_time,
    manual_interval,
    partition_start,
    partitions,
    period_end,
    pipeline_id,
    resolve_window,
    scheduled_interval,
    source_for,
)
from tfdist.publishing import registry
from tfdist.spec import Spec, partition_unit

__all__ = [
    "Elastic",
    "Following",
    "Horovod",
    "KubernetesPlacement",
    "Member",
    "Plan",
    "PodResources",
    "RunContext",
    "RunFacts",
    "StagePlan",
    "WindowRefused",
    "as_datetime",
    "build_plan",
    "local_time",
    "manual_interval",
    "partition_start",
    "partitions",
    "period_end",
    "pipeline_id",
    "resolve_window",
    "scheduled_interval",
    "source_for",
    "version_base",
]


@dataclass(frozen=True)
class Plan:
    spec: Spec
    """The run's effective spec (after its overrides)."""
    layout: RunLayout
    context: RunContext
    model_dir: str
    """``<export root>/<model name>``: versions are published below it."""
    stages: tuple[StagePlan, ...]
    launcher: Literal["local", "kubernetes"] = "local"
    """Which launcher realizes the stages (``training.launcher``)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """The run's overrides of the author's spec (recorded in run.json)."""

    def stage(self, task_id: str) -> StagePlan:
        return next(s for s in self.stages if s.task_id == task_id)

    def spec_record(self) -> dict[str, Any]:
        """spec.json: the run's effective spec, as the workers read it."""
        return self.spec.to_json_dict()

    def run_record(self) -> RunRecord:
        """run.json: what identifies the run and what its trigger changed."""
        ctx = self.context
        return RunRecord(
            pipeline_id=ctx.pipeline_id,
            run_id=ctx.run_id,
            overrides=self.overrides,
            data_interval_start=ctx.interval_start.isoformat(),
            data_interval_end=ctx.interval_end.isoformat(),
            window=ctx.window,
            partition_key=ctx.partition_key,
        )


def version_base(ctx: RunContext) -> int:
    """First export version of the run's data interval, from its end (not wall-clock): e.g. 20261121000000.

    The export takes the first free version ``base + n``; a rerun of the same run reuses its own."""
    return registry.version_number(ctx.interval_end)


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
    prepare, validate = _data_args(spec, ctx, layout, model_dir, source or spec.data.source)
    train, evaluate, export = _model_args(spec, ctx, layout, model_dir)
    placement = kubernetes_placement(spec)
    common: dict[str, Any] = {"kubernetes": placement, "cpus_per_process": spec.training.cpus_per_worker}
    return Plan(
        spec=spec,
        layout=layout,
        context=ctx,
        model_dir=model_dir,
        stages=(
            StagePlan("prepare_data", prepare, (Member("prepare", 0),), writers=spec.data.prepare_processes, **common),
            StagePlan("validate_data", validate, (Member("validate", 0),), **common),
            train_stage(spec, train, placement),
            StagePlan("evaluate", evaluate, (Member("evaluate", 0),), **common),
            StagePlan("export", export, (Member("export", 0),), **common),
        ),
        overrides=overrides or {},
        launcher=spec.training.launcher,
    )


def _data_args(
    spec: Spec, ctx: RunContext, layout: RunLayout, model_dir: str, source: str
) -> tuple[PrepareArgs, ValidateDataArgs]:
    """prepare_data's and validate_data's arguments: the window's partitions of ``source``, and the data gate."""
    start = ctx.window_start(spec.cron, spec.data.window, spec.zone)
    window = partitions(start, ctx.interval_end, partition_unit(source), spec.zone)
    sources = tuple(dict.fromkeys(source_for(source, t, spec.artifact_root) for t in window))
    prepare = PrepareArgs(layout.spec_file, layout.data_dir, layout.result("prepare_data"), sources)
    validate = ValidateDataArgs(
        layout.spec_file,
        layout.run_file,
        layout.data_dir,
        model_dir,
        layout.data_validation_dir,
        layout.result("validate_data"),
    )
    return prepare, validate


def _model_args(
    spec: Spec, ctx: RunContext, layout: RunLayout, model_dir: str
) -> tuple[TrainArgs, EvaluateArgs, ExportArgs]:
    """train's, evaluate's and export's arguments."""
    published = {"spec": layout.spec_file, "run": layout.run_file, "data": layout.data_dir, "model_dir": model_dir}
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
        warm_start_record=layout.warm_start_file,
        version_base=version_base(ctx),
        result=layout.result("export"),
        approval=layout.approval_file if spec.export.approval else "",
    )
    return train, evaluate, export
