"""EvaluateOperator: checkpoint validation and the gate; its decision is explicit, never silent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from tfdist.operators.base import StageOperator

if TYPE_CHECKING:
    from tfdist.operators.plan import Plan


class EvaluateOperator(StageOperator):
    """Validates the trained checkpoint (integrity, metrics on the eval split, value thresholds, change
    thresholds against the baseline) and writes the blessing record ``eval/blessing.json``.

    Not blessed: the task fails without a retry (``validation.on_failure: fail``), or is skipped (``skip``);
    export does not run either way, and the reason is in the log. XCom: the decision, metrics and failures
    (``EvaluateResult``; the whole record is eval/blessing.json)."""

    stage = "evaluate"

    def return_value(self, record: dict[str, Any], plan: Plan, context: Any) -> dict[str, Any]:
        if plan.spec.validation.allow_unvalidated:
            self.log.warning(
                "no gate: validation.allow_unvalidated is set, so this model is published without "
                "any threshold (recorded in blessing.json and the version's metadata.json)"
            )
        # a record of the runtime: not imported where a DAG file is parsed
        from tfdist.contract.publish_records import EvaluateResult

        result = EvaluateResult.parse(record, f"{self.task_id}'s result")
        if not result.blessed:
            reason = "model not blessed: " + "; ".join(result.failures)
            self.log.warning("%s", reason)
            if plan.spec.validation.on_failure == "skip":
                raise AirflowSkipException(f"{reason} (validation.on_failure: skip, so export is skipped)")
            raise AirflowFailException(reason)  # no retry: a retry would reach the same decision
        return result.payload()
