"""The shared shape of every stage operator: render, plan, launch (or defer to a trigger), report.

The plan, the contract and the launchers are imported when a task runs, not when its DAG file is parsed: with
Airflow's default lazy plugins every parse imports them anew, and they cost a quarter of it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

from tfdist.operators.links import TrainingRunLink
from tfdist.spec import Spec, SpecError, field_value, load_spec

if TYPE_CHECKING:
    from tfdist.operators.launchers import Launcher
    from tfdist.operators.plan import Plan, RunContext, RunFacts

    _Operator = BaseOperator  # what RunPlanned is mixed into (its dag_id, its log)
else:
    _Operator = object


def earlier_windows(artifact_root: str, pipeline: str) -> tuple[tuple[str, dt.datetime], ...] | None:
    """(run id, window end) of every recorded run of the pipeline; None where the artifact root is not visible."""
    from tfdist.contract.layout import RunLayout, runs_root
    from tfdist.contract.records import read_record_if_exists
    from tfdist.contract.train_records import RunRecord
    from tfdist.infra import storage
    from tfdist.operators.plan import as_datetime

    if not storage.exists(artifact_root):
        return None
    root = runs_root(artifact_root, pipeline)
    records = (
        read_record_if_exists(RunLayout(storage.join(root, key)).run_file, RunRecord) for key in storage.names(root)
    )
    return tuple((r.run_id, as_datetime(r.data_interval_end)) for r in records if r)


class RunPlanned(_Operator):
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
        from tfdist.operators.plan import pipeline_id

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
        """The run's identity and window (``resolve_window``), from what Airflow and the artifact root tell."""
        from tfdist.operators.plan import RunContext, WindowRefused, resolve_window

        facts = self.run_facts(spec, context)
        try:
            ctx = resolve_window(spec, self.pipeline_id, facts)
        except WindowRefused as exc:
            raise AirflowFailException(str(exc)) from None
        if facts.interval is None:
            self.log.info(
                "run triggered without a logical date at %s: training on the window %s → %s, %s",
                facts.run_after,
                ctx.interval_start,
                ctx.interval_end,
                ctx.window,
            )
        elif ctx.window != RunContext.window:
            self.log.info(
                "the DAG run's data interval is empty: training on the window %s → %s, %s",
                ctx.interval_start,
                ctx.interval_end,
                ctx.window,
            )
        return ctx

    def run_facts(self, spec: Spec, context: Any) -> RunFacts:
        """What the run's context and the artifact root tell of its window; the other runs' records are read
        only for a run without a data interval or a recorded window."""
        from tfdist.contract.layout import RunLayout, run_path
        from tfdist.contract.records import read_record_if_exists
        from tfdist.contract.train_records import RunRecord
        from tfdist.operators.plan import RunFacts, as_datetime

        run_id, dag_run = context["run_id"], context.get("dag_run")
        now = dt.datetime.now(dt.UTC)
        run_after = min(as_datetime(getattr(dag_run, "run_after", None) or now), now)
        start = self.data_interval_start or context.get("data_interval_start")
        end = self.data_interval_end or context.get("data_interval_end")
        if start is not None and end is not None:
            interval = (as_datetime(start), as_datetime(end))
            return RunFacts(run_id, run_after, interval, embedded=bool(self.pipeline_group))
        layout = RunLayout(self.run_dir or run_path(spec.artifact_root, self.pipeline_id, run_id))
        recorded = read_record_if_exists(layout.run_file, RunRecord)
        partition_date = getattr(dag_run, "partition_date", None)
        return RunFacts(
            run_id,
            run_after,
            partition_key=getattr(dag_run, "partition_key", None),
            partition_date=as_datetime(partition_date) if partition_date else None,
            recorded=recorded,
            earlier_windows=()
            if recorded and recorded.window is not None
            else earlier_windows(spec.artifact_root, self.pipeline_id),
        )

    def plan_overrides(self) -> dict[str, Any]:
        """This operator's templated replacements for spec defaults (see build_plan)."""
        return {}

    def plan(self, context: Any) -> Plan:
        """The run's plan, with the spec after the run's overrides; its artifact and export roots' stores are
        reached first (through the Airflow connection: artifact_store.connect)."""
        from tfdist.operators.artifact_store import connect
        from tfdist.operators.plan import build_plan

        spec, overrides = self.effective_spec(context)
        replaced = self.plan_overrides()
        connect(spec.artifact_root, replaced.get("export_root") or spec.export_root)
        return build_plan(
            spec,
            self.run_context(spec, context),
            run_dir=self.run_dir or None,
            overrides=overrides,
            **replaced,
        )


class StageOperator(RunPlanned, BaseOperator):
    """Runs one stage of the spec's plan in child processes; the task process never imports TensorFlow.

    ``run_dir``, ``data_interval_start`` and ``data_interval_end`` are templated and default to the
    run's own (artifact root / pipeline id / run key, and the run's data interval). ``pipeline_group``: the
    task group of a pipeline embedded in a DAG (see ``build_task_group``), None when the pipeline is its DAG."""

    stage: str
    template_fields: Sequence[str] = ("run_dir", "data_interval_start", "data_interval_end")
    ui_color = "#ffe0b2"
    operator_extra_links: Sequence[BaseOperatorLink] = (TrainingRunLink(),)

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
        self._launcher: Launcher | None = None
        self._run_id = ""  # the try's, once it runs

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's fields, ``artifact_root`` and ``pipeline_group``: the plugin's API finds the pipeline's runs
        by them."""
        return super().get_serialized_fields() | {"artifact_root", "pipeline_group"}

    def execute(self, context: Any) -> Any:
        from tfdist.contract.layout import RunMismatch, record_run
        from tfdist.operators.launchers import StageFailed, get_launcher
        from tfdist.operators.outcomes import stage_outcome

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
            record_run(plan.layout, plan.spec_record(), plan.run_record())
            record = self._launcher.run(stage, self.log)
        except RunMismatch as exc:
            raise AirflowFailException(str(exc)) from None
        except StageFailed as exc:
            raise stage_outcome(self.task_id, exc.returncode, str(exc), exc.lost) from None
        except AirflowTaskTimeout:
            self._launcher.stop()  # the task is over: on_kill follows, but the task still counts as running then
            raise
        return self.return_value(record, plan, context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Resumes after the trigger: the stage's result record, its elastic restart, or its failure."""
        from tfdist.operators.launchers import get_launcher
        from tfdist.operators.launchers.base import StageEvent
        from tfdist.operators.outcomes import stage_outcome

        reported = StageEvent.parse(event, f"the trigger event of {self.task_id}")
        if reported.status != "success":
            plan = self.plan(context)
            trigger = get_launcher(plan, context["ti"].try_number).continue_deferred(
                plan.stage(self.stage), reported, self.log, context.get("task_state_store")
            )
            if trigger is not None:
                self.defer(trigger=trigger, method_name="execute_complete")
            raise stage_outcome(self.task_id, reported.returncode, reported.message, reported.lost)
        return self.return_value(reported.result, self.plan(context), context)

    def return_value(self, record: dict[str, Any], plan: Plan, context: Any) -> Any:
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
