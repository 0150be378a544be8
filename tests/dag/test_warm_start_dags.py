"""Warm start end to end on real Airflow (``airflow dags test``, three consecutive dates of one pipeline with
``training.warm_start: baseline``): day 1 starts cold, day 2 restores day 1's version, day 3 day 2's; the
lineage is in each version's metadata.json and in its export's Asset event."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from tests.publishing.versions import published_metadata
from tests.support.dags import dags_folder
from tests.support.specs import make_spec
from tfdist.contract.layout import RunLayout, run_path
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import airflow_dags_test, write_digits_partitions
from tfdist.publishing import registry

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
FIRST = dt.date(2026, 11, 12)
DAG_ID = "warm_nightly"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root, dags = str(tmp_path_factory.mktemp("warm_dags")), tmp_path_factory.mktemp("warm_dags_folder")
    spec = make_spec(
        root,
        name=DAG_ID,
        training={"epochs": 2, "num_workers": 1, "warm_start": "baseline"},
        validation={"thresholds": {"accuracy": {"lower": 0.5}}},
        export={"model_name": DAG_ID},
    )
    with dags_folder(dags, [spec], "The Airflow DAG of the warm start test."):
        yield root


ASSET_EVENTS = """
import json
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session
from sqlalchemy import select
with create_session() as session:
    query = (select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
             .where(AssetModel.name == "model://%s").order_by(AssetEvent.id))
    print(json.dumps(list(session.scalars(query))))
"""


def model_asset_events() -> list[dict]:
    """The extras of the Asset events of ``model://warm_nightly`` in Airflow's metadata database, oldest first
    (read in a process of its own: this one's Airflow settings were read before the tests chose AIRFLOW_HOME)."""
    out = subprocess.run([sys.executable, "-c", ASSET_EVENTS % DAG_ID], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_three_nights_each_warm_start_from_the_last_with_lineage_and_asset_events(pipeline, tmp_path):
    root, versions = pipeline, []
    for night in range(3):
        day = FIRST + dt.timedelta(days=night)
        write_digits_partitions(os.path.join(root, "raw", "digits"), day, 1)
        # a manual run's data interval is the day before its logical date
        outcome = airflow_dags_test(DAG_ID, day + dt.timedelta(days=1), str(tmp_path / f"{day}.log"), echo=False)
        log = open(outcome.log_path).read()
        assert outcome.state == "success", log[-4000:]
        record = read_json(RunLayout(run_path(root, DAG_ID, outcome.run_id)).warm_start_file)
        version = published_metadata(os.path.join(root, "models", DAG_ID))[-1]
        if night == 0:
            assert "cold start: no baseline: nothing published as of this data interval" in log
            assert record["parent"] is None and version["parent"] is None
        else:
            parent = versions[-1]
            assert f"warm start from version {parent['version']} (run {parent['run_id']})" in log
            assert record["parent"]["version"] == parent["version"] and record["restored"] == "model and optimizer"
            assert version["parent"] == {"version": parent["version"], "run_id": parent["run_id"]}
        versions.append(version)
    assert [m.version for m in registry.lineage(os.path.join(root, "models", DAG_ID), versions[-1]["version"])] == [
        v["version"] for v in reversed(versions)
    ]
    events = model_asset_events()
    assert [(e["version"], e["parent_version"]) for e in events] == [
        (versions[0]["version"], None),
        (versions[1]["version"], versions[0]["version"]),
        (versions[2]["version"], versions[1]["version"]),
    ]
    assert events[0]["cold_start"] == "no baseline: nothing published as of this data interval"
