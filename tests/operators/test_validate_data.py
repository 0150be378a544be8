"""operators/validate_data.py: the data gate's result becomes the XCom value; checks that only warn are logged."""

from __future__ import annotations

from tests.support.plans import plan_for
from tests.support.specs import make_spec
from tfdist.contract.data_records import ValidateDataResult
from tfdist.operators.validate_data import ValidateDataOperator


def test_the_gates_result_is_the_xcom_value_and_each_warning_is_logged(tmp_path, capsys):
    record = ValidateDataResult(
        decision="passed",
        baseline_version=3,
        checks_run=12,
        failed=1,
        refused=[],
        warned=["drift: pixel 0.4 > 0.2"],
    ).payload()
    task = ValidateDataOperator(task_id="validate_data", spec=make_spec(str(tmp_path)))
    assert task.return_value(record, plan_for(str(tmp_path), "manual__1"), {}) == record
    logged = capsys.readouterr().out  # the task's log, as Airflow's structlog writes it here
    assert "data check failed, warn only: drift: pixel 0.4 > 0.2" in logged
