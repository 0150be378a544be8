"""Plans of runs of the small spec (tests/support/specs.py), and their stages run by the local launcher."""

from __future__ import annotations

import datetime as dt
import json
import os

from tests.support.logs import collecting_logger
from tests.support.specs import DAY, make_spec
from tfdist.contract.layout import record_run
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.plan import RunContext, build_plan
from tfdist.spec import load_spec


def plan_for(root: str, run_id: str, day: dt.date = DAY, **sections):
    """The plan of a run of SMALL_SPEC on the daily partition of ``day``, its run directory recorded."""
    spec = load_spec(make_spec(root, **sections))
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    plan = build_plan(spec, RunContext(spec.name, run_id, start, start + dt.timedelta(days=1)))
    record_run(plan.layout, spec.to_json_dict(), plan.run_record())
    return plan


_PREPARED: dict[str, str] = {}
"""The data directories this test process prepared, by their input and data section."""


def prepare_once(plan, input_key: str) -> None:
    """Run the plan's prepare_data stage; or, when this test process prepared the same input (``input_key``) with
    the same data section before, link the run's data to what that made (later stages only read it)."""
    key = json.dumps([input_key, plan.spec.data.model_dump(mode="json")])
    if key in _PREPARED:
        os.symlink(_PREPARED[key], plan.layout.data_dir)
    else:
        run(plan, "prepare_data")
        _PREPARED[key] = plan.layout.data_dir


def prepared_plan(root: str, run_id: str, day: dt.date = DAY, **sections):
    """``plan_for``, with the run's data prepared once per day's partition and data section (``prepare_once``)."""
    plan = plan_for(root, run_id, day, **sections)
    prepare_once(plan, json.dumps(plan.stage("prepare_data").args.source))
    return plan


def steps_of(plan, epochs: int) -> int:
    """The steps of ``epochs`` over the run's prepared training data, at the global batch of 64."""
    return read_json(plan.layout.manifest_file)["train"]["examples"] // 64 * epochs


def run(plan, task_id: str) -> tuple[LocalLauncher, list[str]]:
    """Run the plan's stage ``task_id`` with the local launcher: the launcher, and the stage's log lines."""
    logger, lines = collecting_logger(task_id)
    launcher = LocalLauncher(plan)
    launcher.run(plan.stage(task_id), logger)
    return launcher, lines.lines
