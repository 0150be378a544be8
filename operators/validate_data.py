"""ValidateDataOperator: the data gate before training; its decision is explicit, never silent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfdist.operators.base import StageOperator

if TYPE_CHECKING:
    from tfdist.operators.plan import Plan


class ValidateDataOperator(StageOperator):
    """Compares the run's data statistics with the baseline's (the data the published model the gate compares
    with was trained on): drift, constant features, labels, rows, bounds (the spec's ``data.checks``). A check
    in mode 'refuse' that fails ends the task without a retry before anything is trained; one in mode 'warn'
    is logged. The record is ``validate_data/data_validation.json``; XCom: the decision and the first
    failures."""

    stage = "validate_data"

    def return_value(self, record: dict[str, Any], plan: Plan, context: Any) -> dict[str, Any]:
        # a record of the runtime: not imported where a DAG file is parsed
        from tfdist.contract.data_records import ValidateDataResult

        result = ValidateDataResult.parse(record, f"{self.task_id}'s result")
        for line in result.warned:
            self.log.warning("data check failed, warn only: %s", line)
        return result.payload()
