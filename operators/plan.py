"""Spec + run context → Plan: pure data (stages and the processes each starts). No Airflow, no TensorFlow."""

from __future__ import annotations

import datetime as dt
import os
import string
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from croniter import croniter

from tfdist.trainer.contract import THREADS_ENV, RunLayout, run_path, stage_command, tf_config
from tfdist.trainer.spec import Spec

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


@dataclass(frozen=True)
class RunContext:
    """What identifies one run: artifacts are keyed by it, never by wall-clock time."""

    dag_id: str
    run_id: str
    interval_start: dt.datetime
    interval_end: dt.datetime

    def window_start(self, schedule: str | None, window: int | None) -> dt.datetime:
        """Where the run's window starts: the data interval's start, or ``window`` periods of the schedule
        (days without one) before its end."""
        if not window:
            return self.interval_start
        if schedule is None:
            return self.interval_end - dt.timedelta(days=window)
        ticks = croniter(schedule, self.interval_end)
        return [ticks.get_prev(dt.datetime) for _ in range(window)][-1]


PARTITION_FIELDS = (("hour", {"hour"}), ("day", {"date", "day"}), ("month", {"month"}), ("year", {"year"}))


def partition_unit(source: str) -> str | None:
    """The finest time placeholder of a source: its partitions are hours, days, months or years (None: the
    source names no time)."""
    fields = {field for _, field, _, _ in string.Formatter().parse(source) if field}
    return next((unit for unit, names in PARTITION_FIELDS if fields & names), None)


def partitions(start: dt.datetime, end: dt.datetime, unit: str | None) -> list[dt.datetime]:
    """The starts of the ``unit`` partitions overlapping [start, end) (just ``start`` without a unit)."""
    if unit is None:
        return [start]
    t = start.replace(minute=0, second=0, microsecond=0, **({} if unit == "hour" else {"hour": 0}))
    t = t.replace(**({"day": 1} if unit in ("month", "year") else {}), **({"month": 1} if unit == "year" else {}))
    found = []
    while t < end:
        found.append(t)
        if unit in ("hour", "day"):
            t += dt.timedelta(**{f"{unit}s": 1})
        else:
            months = t.month + (1 if unit == "month" else 12)
            t = t.replace(year=t.year + (months - 1) // 12, month=(months - 1) % 12 + 1)
    return found


def source_for(source: str, partition: dt.datetime, artifact_root: str) -> str:
    return source.format(date=partition.date().isoformat(), year=f"{partition:%Y}", month=f"{partition:%m}",
                         day=f"{partition:%d}", hour=f"{partition:%H}", artifact_root=artifact_root)


@dataclass(frozen=True)
class Process:
    """One process to start: argv list (never a shell string) and extra environment."""

    role: str
    index: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gpus: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Stage:
    task_id: str
    processes: tuple[Process, ...]
    tf_cluster: bool = False
    """The processes form a TF cluster: the launcher gives each an address and its TF_CONFIG."""
    servers: tuple[str, ...] = ()
    """Roles that serve until stopped (parameter-server ``ps`` and ``worker``): the stage is done when
    every other process has succeeded, then the launcher stops them."""
    rank_tagged: bool = False
    """The process is mpirun/horovodrun: its output lines carry rank tags, relayed as ``[rank-N]``."""
    rank_command: tuple[str, ...] = ()
    """Horovod: the argv of each rank (what mpirun/horovodrun starts), for launchers that start ranks themselves."""
    rank_pods: int = 0
    """Horovod: the workers the ranks run on (pods on Kubernetes), ``slots_per_worker`` ranks each."""
    result_file: str = ""
    """Where the stage's processes write its result record (tfdist.trainer.contract)."""
    heartbeat_dir: str = ""
    """Training: where each training process marks its progress (tfdist.trainer.contract.beat)."""
    hang_timeout_seconds: int | None = None
    """Training: the stage fails when no training process has made progress for this long."""
    checkpoint_dir: str = ""
    """Training: where the chief writes checkpoints (tfdist.trainer.contract.checkpoint_step reads the latest)."""
    elastic_sizes: tuple[int, ...] = ()
    """Elastic TF cluster (or Horovod on Kubernetes): the worker counts the launcher may restart the stage with
    after losing workers, largest first; empty: a loss fails the stage."""
    max_restarts: int = 0
    """Elastic restarts by the launcher allowed within one run of the stage."""


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
        return {"dag_id": ctx.dag_id, "run_id": ctx.run_id, "overrides": self.overrides,
                "data_interval_start": ctx.interval_start.isoformat(), "data_interval_end": ctx.interval_end.isoformat()}


def process_tf_config(stage: Stage, addresses: dict[str, str], process: Process) -> str:
    """TF_CONFIG for one process of a TF cluster; ``addresses`` maps process name → host:port."""
    cluster: dict[str, list[str]] = {}
    for p in stage.processes:
        cluster.setdefault(p.role, []).append(addresses[p.name])
    return tf_config(cluster, process.role, process.index)


def version_base(ctx: RunContext) -> int:
    """First export version of the run's data interval, from its end (not wall-clock): e.g. 20261121000000.

    The export takes the first free version ``base + n`` (n < 100); a rerun of the same run reuses its own."""
    return int(ctx.interval_end.astimezone(dt.timezone.utc).strftime("%Y%m%d%H%M")) * 100


def available_cores() -> list[int]:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return sorted(os.sched_getaffinity(0))


def threads_per_process(spec: Spec, processes: int) -> dict[str, str]:
    """Environment giving each of ``processes`` training processes its share of this machine's cores."""
    return {THREADS_ENV: str(spec.training.cpus_per_worker or max(1, len(available_cores()) // processes))}


def own_cores(spec: Spec, processes: int) -> list[str]:
    """Per training process, the cores it pins itself to (TFDIST_CORES, e.g. '0' or '2,3'), when the run
    shares this machine's cores evenly (``cpus_per_worker`` unset, no more processes than cores): process
    k gets block k. Pinned, 2 workers on 2 cores train 25-28% faster (mirrored, Horovod). Empty
    strings: not pinned."""
    cores = available_cores()
    if spec.training.cpus_per_worker or processes > len(cores):
        return [""] * processes
    share = len(cores) // processes
    return [",".join(map(str, cores[k * share:(k + 1) * share])) for k in range(processes)]


def build_plan(
    spec: Spec,
    ctx: RunContext,
    *,
    python: str = sys.executable,
    run_dir: str | None = None,
    source: str | None = None,
    export_root: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Plan:
    """The whole run's plan; ``run_dir``, ``source`` and ``export_root`` replace the spec's defaults."""
    from tfdist.operators.backends import train_stage

    layout = RunLayout(run_dir or run_path(spec.artifact_root, ctx.dag_id, ctx.run_id))
    common = ["--spec", layout.spec_file]
    train = (*stage_command(python, "train"), *common, "--data", layout.data_dir,
             "--checkpoints", layout.checkpoint_dir, "--result", layout.result("train"),
             "--heartbeats", layout.heartbeat_dir, "--progress", layout.progress_file)
    source = source or spec.data.source
    sources = [source_for(source, t, spec.artifact_root) for t in partitions(
        ctx.window_start(spec.schedule, spec.data.window), ctx.interval_end, partition_unit(source))]
    prepare = [*stage_command(python, "prepare"), *common, "--out", layout.data_dir,
               "--result", layout.result("prepare_data")]
    for pattern in dict.fromkeys(sources):
        prepare += ["--source", pattern]
    model_dir = os.path.join(export_root or spec.export_root, spec.export.model_name)
    published = ["--run", layout.run_file, "--data", layout.data_dir, "--model-dir", model_dir]
    evaluate = [*stage_command(python, "evaluate"), *common, *published, "--checkpoints", layout.checkpoint_dir,
                "--train-result", layout.result("train"), "--out", layout.eval_dir, "--result", layout.result("evaluate")]
    export = [*stage_command(python, "export"), *common, *published, "--eval", layout.eval_dir,
              "--version-base", str(version_base(ctx)), "--result", layout.result("export")]
    single = threads_per_process(spec, 1)
    # on Kubernetes, data.prepare_processes pods write the shards (unset: one pod, its cores writing)
    prepare_pods = spec.data.prepare_processes if spec.training.launcher == "kubernetes" else None
    return Plan(
        spec=spec,
        layout=layout,
        context=ctx,
        model_dir=model_dir,
        stages=tuple(replace(stage, result_file=layout.result(stage.task_id)) for stage in (
            Stage("prepare_data", tuple(Process("prepare", k, tuple(prepare), single)
                                        for k in range(prepare_pods or 1))),
            replace(train_stage(spec, train), heartbeat_dir=layout.heartbeat_dir, checkpoint_dir=layout.checkpoint_dir,
                    hang_timeout_seconds=spec.training.hang_timeout_seconds),
            Stage("evaluate", (Process("evaluate", 0, tuple(evaluate), single),)),
            Stage("export", (Process("export", 0, tuple(export), single),)),
        )),
        overrides=overrides or {},
    )
