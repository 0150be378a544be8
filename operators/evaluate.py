"""EvaluateOperator: checkpoint validation and the gate; its decision is explicit, never silent."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from operators.base import StageOperator, read_json
from operators.plan import Plan


class EvaluateOperator(StageOperator):
    """Validates the trained checkpoint (integrity, metrics on the eval split, value thresholds, change
    thresholds against the baseline) and writes the blessing record ``eval/blessing.json``.

    Not blessed: the task fails without a retry (``validation.on_failure: fail``), or is skipped (``skip``);
    export does not run either way, and the reason is in the log. XCom: the blessing record."""

    stage = "evaluate"

    def result(self, plan: Plan, context: Any) -> dict[str, Any]:
        blessing = read_json(os.path.join(plan.layout.eval_dir, "blessing.json"))
        if plan.spec.validation.allow_unvalidated:
            self.log.warning("no gate: validation.allow_unvalidated is set, so this model is published without "
                             "any threshold (recorded in blessing.json and the version's metadata.json)")
        if not blessing["blessed"]:
            reason = "model not blessed: " + "; ".join(blessing["failures"])
            self.log.warning("%s", reason)
            if plan.spec.validation.on_failure == "skip":
                raise AirflowSkipException(f"{reason} (validation.on_failure: skip, so export is skipped)")
            raise AirflowFailException(reason)  # no retry: a retry would reach the same decision
        return {k: v for k, v in blessing.items() if k != "report"}
