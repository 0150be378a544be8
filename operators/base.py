"""The shared shape of every stage operator: render, plan, launch (or defer to a trigger), report."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

from tfdist.contract import EXIT_REFUSED, RunLayout, RunMismatch, read_json_if_exists, record_run, run_path, runs_root
from tfdist.operators.launchers import StageFailed, get_launcher
from tfdist.operators.links import TrainingRunLink
from tfdist.operators.plan import (
    PARTITION_KEY_FORMATS,
    Plan,
    RunContext,
    build_plan,
    manual_interval,
    partition_start,
    period_end,
    pipeline_id,
)
from tfdist.spec import AssetSchedule, Spec, SpecError, field_value, load_spec


def as_datetime(value: Any) -> dt.datetime:
    """A datetime as given, or parsed from its ISO text."""
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def _partition_start(period: str, dag_run: Any) -> dt.datetime:
    """Where the run's partition starts: Airflow's partition date, else its key read as this pipeline writes it."""
    key = getattr(dag_run, "partition_key", None)
    if getattr(dag_run, "partition_date", None):
        return as_datetime(dag_run.partition_date).astimezone(dt.UTC)
    try:
        return partition_start(key or "", period)
    except ValueError:
        raise AirflowFailException(
            f"this pipeline trains on one {period} partition per run, but the run names {key!r}: trigger it through "
            f"its upstream assets, or with a partition key such as "
            f"{dt.datetime(2026, 11, 20).strftime(PARTITION_KEY_FORMATS[period])!r}"
        ) from None


def previous_window_end(
    artifact_root: str, pipeline: str, run_id: str, before: dt.datetime
) -> tuple[str, dt.datetime] | None:
    """(run id, window end) of the pipeline's run whose recorded window ends last, at or before ``before``."""
    root = runs_root(artifact_root, pipeline)
    records = (
        read_json_if_exists(RunLayout(os.path.join(root, key)).run_file)
        for key in (sorted(os.listdir(root)) if os.path.isdir(root) else ())
    )
    ends = [
        (r["run_id"], as_datetime(r["data_interval_end"]))
        for r in records
        if r and r.get("run_id") != run_id and "data_interval_end" in r
    ]
    return max((e for e in ends if e[1] <= before), key=lambda e: e[1], default=None)


class RunPlanned:
    """What an operator of the spec's DAG knows of its run: the effective spec and the run's plan. It has
    ``spec``, ``dag_id``, ``pipeline_group`` and the templated ``run_dir``, ``data_interval_start`` and
    ``data_interval_end``."""

    spec: Spec
    pipeline_group: str | None
    run_dir: str | None
    data_interval_start: str | None
    data_interval_end: str | None

    @property
    def pipeline_id(self) -> str:
        return pipeline_id(self.dag_id, self.pipeline_group)

    def run_overrides(self, context: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the run's conf, the DAG's Params) this pipeline takes overrides from: embedded, only the conf's
        ``<task group id>`` mapping (the DAG's Params and the rest of its conf are its author's)."""
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        if not self.pipeline_group:
            return conf, context.get("params") or {}
        own = conf.get(self.pipeline_group) or {}
        if not isinstance(own, dict):
            raise AirflowFailException(
                f"conf.{self.pipeline_group}: must be a mapping of this pipeline's overrides, "
                f'e.g. {{"{self.pipeline_group}": {{"training.epochs": 2}}}}'
            )
        return own, {}

    def effective_spec(self, context: Any) -> tuple[Spec, dict[str, Any]]:
        """(the spec after the run's overrides, the overrides that change it). Overrides come from the
        DAG's Params (trigger form) and the run's conf (see run_overrides); anything not overridable is refused."""
        conf, params = self.run_overrides(context)
        requested = {**{k: params[k] for k in self.spec.overridable if k in params}, **conf}
        changed = {
            k: v for k, v in requested.items() if k not in self.spec.overridable or field_value(self.spec, k) != v
        }
        if not changed:
            return self.spec, {}
        try:
            return self.spec.with_overrides(changed), changed
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None  # retrying cannot fix the run's conf

    def run_context(self, spec: Spec, context: Any) -> RunContext:
        """The run's identity and window: its data interval; else (a run without one: triggered by hand or by
        assets) the window its first stage recorded in run.json, or the one inferred for it (``inferred_window``)."""
        run_id = context["run_id"]
        start = self.data_interval_start or context.get("data_interval_start")
        end = self.data_interval_end or context.get("data_interval_end")
        if start is not None and end is not None:
            if not self.pipeline_group or start != end:
                return RunContext(self.pipeline_id, run_id, as_datetime(start), as_datetime(end))
            start, end = manual_interval(spec.cron, as_datetime(end))  # an embedding DAG's cron trigger: start = end
            self.log.info("the DAG run's data interval is empty: training on the window %s → %s", start, end)
            return RunContext(
                self.pipeline_id, run_id, start, end, "the schedule's period before its DAG run's (empty) data interval"
            )
        recorded = read_json_if_exists(
            RunLayout(self.run_dir or run_path(spec.artifact_root, self.pipeline_id, run_id)).run_file
        )
        if recorded and "window" in recorded:
            return RunContext(
                self.pipeline_id,
                run_id,
                as_datetime(recorded["data_interval_start"]),
                as_datetime(recorded["data_interval_end"]),
                recorded["window"],
                recorded.get("partition_key"),
            )
        ctx = self.inferred_window(spec, context)
        self.log.info(
            "run triggered without a logical date at %s: training on the window %s → %s, %s",
            context["dag_run"].run_after,
            ctx.interval_start,
            ctx.interval_end,
            ctx.window,
        )
        return ctx

    def inferred_window(self, spec: Spec, context: Any) -> RunContext:
        """A partitioned schedule's run: the partition its asset events (or its trigger) name. Other asset
        schedules' runs: since the end of the previous run's window (a day when there is none). A run triggered
        by hand: the last complete interval before it, as Airflow's timetables infer it."""
        dag_run, run_id = context["dag_run"], context["run_id"]
        if spec.partitioned:
            start = _partition_start(spec.partitioned, dag_run)
            return RunContext(
                self.pipeline_id,
                run_id,
                start,
                period_end(start, spec.partitioned),
                f"the {spec.partitioned} partition {dag_run.partition_key!r} its trigger names",
                dag_run.partition_key,
            )
        end = as_datetime(dag_run.run_after)
        if isinstance(spec.schedule, AssetSchedule):
            previous = previous_window_end(spec.artifact_root, self.pipeline_id, run_id, end)
            if previous:
                return RunContext(
                    self.pipeline_id,
                    run_id,
                    previous[1],
                    end,
                    f"since the end of the previous run's window (run {previous[0]!r})",
                )
            unseen = (
                ""
                if os.path.isdir(spec.artifact_root)
                else (f" (this task does not see the artifact root {spec.artifact_root}, where they are recorded)")
            )
            return RunContext(
                self.pipeline_id,
                run_id,
                end - dt.timedelta(days=1),
                end,
                f"the day before it ran: no earlier run of this pipeline has a window{unseen}",
            )
        start, end = manual_interval(spec.cron, end)
        return RunContext(self.pipeline_id, run_id, start, end, "the last complete interval before it was triggered")

    def plan_overrides(self) -> dict[str, Any]:
        """This operator's templated replacements for spec defaults (see build_plan)."""
        return {}

    def plan(self, context: Any) -> Plan:
        """The run's plan, with the spec after the run's overrides."""
        spec, overrides = self.effective_spec(context)
        return build_plan(
            spec,
            self.run_context(spec, context),
            run_dir=self.run_dir or None,
            overrides=overrides,
            **self.plan_overrides(),
        )


class StageOperator(RunPlanned, BaseOperator):
    """Runs one stage of the spec's plan in child processes; the task process never imports TensorFlow.

    ``run_dir``, ``data_interval_start`` and ``data_interval_end`` are templated and default to the
    run's own (artifact root / pipeline id / run key, and the run's data interval). ``pipeline_group``: the
    task group of a pipeline embedded in a DAG (see ``build_task_group``), None when the pipeline is its DAG."""

    stage: str
    template_fields = ("run_dir", "data_interval_start", "data_interval_end")
    ui_color = "#ffe0b2"
    operator_extra_links = (TrainingRunLink(),)

    def __init__(
        self,
        *,
        spec: Spec | dict | str,
        run_dir: str | None = None,
        data_interval_start: str | None = None,
        data_interval_end: str | None = None,
        pipeline_group: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.spec = load_spec(spec)
        kwargs.setdefault("execution_timeout", dt.timedelta(minutes=self.spec.training.timeout_minutes))
        kwargs.setdefault("retries", getattr(self.spec.retries, self.stage))
        kwargs.setdefault("retry_delay", dt.timedelta(seconds=self.spec.retries.delay_seconds))
        super().__init__(**kwargs)
        self.run_dir = run_dir
        self.data_interval_start = data_interval_start
        self.data_interval_end = data_interval_end
        self.artifact_root = self.spec.artifact_root
        self.pipeline_group = pipeline_group
        self._launcher = None
        self._run_id: str | None = None

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's fields, ``artifact_root`` and ``pipeline_group``: the plugin's API finds the pipeline's runs
        by them."""
        return super().get_serialized_fields() | {"artifact_root", "pipeline_group"}

    def execute(self, context: Any) -> Any:
        run_link = TrainingRunLink()  # shown while the stage runs, not only once it ended
        context["ti"].xcom_push(key=run_link.xcom_key, value=run_link.get_link(self, ti_key=context["ti"]))
        plan = self.plan(context)
        if plan.overrides:
            self.log.info("this run overrides %s", plan.overrides)
        self.log.info(
            "run directory %s, data interval %s → %s",
            plan.layout.run_dir,
            plan.context.interval_start,
            plan.context.interval_end,
        )
        self._launcher, self._run_id = get_launcher(plan, context["ti"].try_number), context["run_id"]
        stage = plan.stage(self.stage)
        try:
            trigger = self._launcher.start_deferred(stage, self.log, context.get("task_state_store"))
            if trigger is not None:  # the stage runs without this process: wait in the triggerer
                self.defer(trigger=trigger, method_name="execute_complete")
            record_run(plan.layout, plan.spec.to_json_dict(), plan.run_record())
            record = self._launcher.run(stage, self.log)
        except RunMismatch as exc:
            raise AirflowFailException(str(exc)) from None
        except StageFailed as exc:
            self.fail(exc.returncode, str(exc))
        except AirflowTaskTimeout:
            self._launcher.stop()  # the task is over: on_kill follows, but the task still counts as running then
            raise
        return self.result(record, plan, context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Resumes after the trigger: the stage's result record, its elastic restart, or its failure."""
        if event["status"] != "success":
            plan = self.plan(context)
            trigger = get_launcher(plan, context["ti"].try_number).continue_deferred(
                plan.stage(self.stage), event, self.log, context.get("task_state_store")
            )
            if trigger is not None:
                self.defer(trigger=trigger, method_name="execute_complete")
            self.fail(event["returncode"], event["message"])
        return self.result(event["result"], self.plan(context), context)

    def fail(self, returncode: int | None, message: str) -> None:
        if returncode == EXIT_REFUSED:  # a retry would be refused again
            raise AirflowFailException(f"{self.task_id} refused: {message}")
        raise RuntimeError(f"{self.task_id} failed: {message}")

    def result(self, record: dict[str, Any], plan: Plan, context: Any) -> Any:
        """The task's XCom value from the stage's result record."""
        return record

    def on_kill(self) -> None:
        """Stop the stage, unless its launcher's objects outlive this process and the task still runs: then the
        process was told to stop by its worker shutting down or being evicted, not by a user or a failure, and
        the task's next try follows the objects on."""
        if self._launcher is None:
            return
        if self._launcher.outlives_task and self._still_running():
            self.log.warning(
                "%s: told to stop while the task still runs (its worker shuts down, or was evicted): "
                "the stage is left running for the task's next try to follow",
                self.task_id,
            )
            return
        self._launcher.stop()

    def _still_running(self) -> bool:
        """Whether Airflow still has this try running (a user's kill, a failure or a timeout has ended it); when
        that cannot be learnt, the stage is left running: the next try follows or replaces it."""
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance  # the running task's, not at parse

        try:
            return (
                RuntimeTaskInstance.get_ti_count(
                    dag_id=self.dag_id, task_ids=[self.task_id], run_ids=[self._run_id], states=["running"]
                )
                > 0
            )
        except Exception as exc:
            self.log.warning("%s: could not learn whether the task still runs (%s)", self.task_id, exc)
            return True
