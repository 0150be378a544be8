"""Windows in the DAG's time zone on real Airflow (``airflow dags test``, prepare_data only: the later tasks are
marked successful without running): a daily run ending at Tokyo midnight reads the Tokyo day, and New York's
run across the clock change of 2026-11-01 reads that local day, 25 hours long. The pure rules (the 23-hour day
of March too) are in tests/operators/plan/test_windows.py."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.support.dags import dags_folder
from tests.support.specs import make_spec
from tfdist.contract.layout import RunLayout, run_path
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import airflow_dags_test, write_digits_partitions

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
LATER_TASKS = "validate_data|train|evaluate|export"


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    """A daily pipeline in Asia/Tokyo and one in America/New_York, on the days around their runs."""
    root, dags = str(tmp_path_factory.mktemp("timezones")), tmp_path_factory.mktemp("timezone_dags")
    for end in (dt.date(2026, 11, 2), dt.date(2026, 11, 21)):
        write_digits_partitions(os.path.join(root, "raw", "digits"), end, 3)
    specs = [
        make_spec(root, name=f"tz_{city}", timezone=zone, export={"model_name": f"tz_{city}"})
        for city, zone in (("tokyo", "Asia/Tokyo"), ("new_york", "America/New_York"))
    ]
    with dags_folder(dags, specs, "Airflow DAGs of the time zone tests."):
        yield root


@pytest.mark.parametrize(
    "dag_id, run_after, interval, hours, day",
    [
        ("tz_tokyo", "2026-11-21T00:00+09:00", ("2026-11-20T00:00+09:00", "2026-11-21T00:00+09:00"), 24, "2026-11-20"),
        (
            "tz_new_york",
            "2026-11-02T00:00-05:00",
            ("2026-11-01T00:00-04:00", "2026-11-02T00:00-05:00"),
            25,
            "2026-11-01",
        ),
    ],
)
def test_a_daily_run_at_local_midnight_reads_the_local_day(
    pipelines, tmp_path, dag_id, run_after, interval, hours, day
):
    root = pipelines
    logical_date = dt.datetime.fromisoformat(run_after)  # Airflow's manual run: the interval before it
    outcome = airflow_dags_test(dag_id, logical_date, str(tmp_path / "dags-test.log"), echo=False, skip=LATER_TASKS)
    log = open(outcome.log_path).read()
    assert outcome.state == "success", log[-4000:]
    layout = RunLayout(run_path(root, dag_id, outcome.run_id))
    run = read_json(layout.run_file)
    start, end = (dt.datetime.fromisoformat(run[f"data_interval_{k}"]) for k in ("start", "end"))
    assert (start, end) == tuple(dt.datetime.fromisoformat(t) for t in interval)
    assert end - start == dt.timedelta(hours=hours)
    inputs = [i["path"] for i in read_json(layout.manifest_file)["inputs"]]
    assert inputs == [os.path.join(root, "raw", "digits", day, "digits.csv")]
