"""The shared shape of every stage operator: render, plan, launch, report."""

from __future__ import annotations

import datetime as dt
import os
import sys
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from operators.launchers import StageFailed, get_launcher
from operators.plan import Plan, RunContext, build_plan, manual_interval
from operators.spec import Spec, SpecError, field_value, load_spec
from trainer.artifacts import read_json, write_json_atomic  # file formats only: no TensorFlow
from trainer.runtime import EXIT_REFUSED


def record_run(spec: Spec, plan: Plan, overrides: dict[str, Any] | None = None) -> None:
    """Write the run's identity (window, overrides) and effective spec once; refuse a run directory
    that was made from another spec."""
    layout, ctx = plan.layout, plan.context
    if os.path.exists(layout.spec_file):
        if read_json(layout.spec_file) != spec.to_json_dict():
            raise ValueError(f"{layout.run_dir} was produced from a different spec (see {layout.spec_file}); "
                             "use a new run, or move that directory away to redo this run")
        return
    write_json_atomic(layout.run_file, {
        "dag_id": ctx.dag_id, "run_id": ctx.run_id, "overrides": overrides or {},
        "data_interval_start": ctx.interval_start.isoformat(), "data_interval_end": ctx.interval_end.isoformat(),
    })
    write_json_atomic(layout.spec_file, spec.to_json_dict())


def _as_datetime(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


class StageOperator(BaseOperator):
    """Runs one stage of the spec's plan in child processes; the task process never imports TensorFlow.

    ``run_dir``, ``data_interval_start`` and ``data_interval_end`` are templated and default to the
    run's own (artifact root / dag_id / run key, and the run's data interval)."""

    stage: str
    template_fields = ("run_dir", "data_interval_start", "data_interval_end")
    ui_color = "#ffe0b2"

    def __init__(
        self,
        *,
        spec: Spec | dict | str,
        run_dir: str | None = None,
        data_interval_start: str | None = None,
        data_interval_end: str | None = None,
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
        self._launcher = None

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's fields and ``artifact_root``: the plugin's API finds the pipeline's runs by it."""
        return super().get_serialized_fields() | {"artifact_root"}

    def effective_spec(self, context: Any) -> tuple[Spec, dict[str, Any]]:
        """(the spec after the run's overrides, the overrides that change it). Overrides come from the
        DAG's Params (trigger form) and the run's conf; anything not overridable is refused."""
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        params = context.get("params") or {}
        requested = {**{k: params[k] for k in self.spec.overridable if k in params}, **conf}
        changed = {k: v for k, v in requested.items()
                   if k not in self.spec.overridable or field_value(self.spec, k) != v}
        if not changed:
            return self.spec, {}
        try:
            return self.spec.with_overrides(changed), changed
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None  # retrying cannot fix the run's conf

    def run_context(self, spec: Spec, context: Any) -> RunContext:
        start = self.data_interval_start or context.get("data_interval_start")
        end = self.data_interval_end or context.get("data_interval_end")
        if start is None or end is None:
            run_after = context["dag_run"].run_after
            start, end = manual_interval(spec.schedule, run_after)
            self.log.info("run triggered without a logical date at %s: training on the window %s → %s",
                          run_after, start, end)
        return RunContext(self.dag_id, context["run_id"], _as_datetime(start), _as_datetime(end))

    def plan_overrides(self) -> dict[str, Any]:
        """This operator's templated replacements for spec defaults (see build_plan)."""
        return {}

    def execute(self, context: Any) -> Any:
        spec, overrides = self.effective_spec(context)
        if overrides:
            self.log.info("this run overrides %s", overrides)
        python = "python" if spec.training.launcher == "kubernetes" else sys.executable  # pods: the image's
        plan = build_plan(spec, self.run_context(spec, context), run_dir=self.run_dir or None, python=python,
                          **self.plan_overrides())
        record_run(spec, plan, overrides)
        self.log.info("run directory %s, data interval %s → %s", plan.layout.run_dir,
                      plan.context.interval_start, plan.context.interval_end)
        self._launcher = get_launcher(spec, plan.context, context["ti"].try_number)
        try:
            self._launcher.run(plan.stage(self.stage), self.log)
        except StageFailed as exc:
            if exc.returncode == EXIT_REFUSED:  # a retry would be refused again
                raise AirflowFailException(f"{self.task_id} refused: {exc}") from None
            raise RuntimeError(f"{self.task_id} failed: {exc}") from None
        return self.result(plan, context)

    def result(self, plan: Plan, context: Any) -> Any:
        """The stage's small XCom result, read from what its processes wrote."""
        raise NotImplementedError

    def on_kill(self) -> None:
        if self._launcher is not None:
            self._launcher.stop()
