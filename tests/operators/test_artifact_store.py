"""operators/artifact_store.py without a store: local roots need no credentials, a store tfdist cannot reach is
refused by name, and the options handed to local stage processes live as long as they run. Signing in to S3 and
GCS (their stand-in servers): tests/launchers/local/test_store_sign_in.py."""

from __future__ import annotations

import json
import logging
import os

import pytest

from tfdist.operators.artifact_store import HandedOptions, StoreUnreachable, access, connect, connection_id


def test_local_roots_need_no_credentials_and_hand_nothing_on(tmp_path):
    assert connect(str(tmp_path), str(tmp_path / "models")) == {}
    assert access(str(tmp_path)) == ({}, {})


def test_a_root_in_a_store_the_airflow_side_does_not_reach_is_refused_naming_it(tmp_path):
    with pytest.raises(StoreUnreachable, match=r"hdfs://nn/runs: the Airflow side reaches s3:// and gs:// roots"):
        connect(str(tmp_path), "hdfs://nn/runs")
    with pytest.raises(StoreUnreachable):  # a refusal is not remembered as a success
        connect("hdfs://nn/runs")


def test_each_stores_connection_is_its_tfdist_option_else_the_options_default(monkeypatch):
    monkeypatch.delenv("AIRFLOW__TFDIST__AWS_CONN_ID", raising=False)
    monkeypatch.delenv("AIRFLOW__TFDIST__GCP_CONN_ID", raising=False)
    assert (connection_id("s3"), connection_id("gs")) == ("aws_default", "google_cloud_default")
    monkeypatch.setenv("AIRFLOW__TFDIST__AWS_CONN_ID", "ml_bucket")
    assert connection_id("s3") == "ml_bucket"


def test_the_handed_options_file_exists_while_the_stage_runs_then_is_deleted(tmp_path):
    path = str(tmp_path / "options.json")
    with HandedOptions(path, (str(tmp_path),), logging.getLogger(__name__)) as handed:
        with open(path) as f:
            assert json.load(f) == {} == handed.handed
        assert handed.thread.is_alive()
    assert not os.path.exists(path) and not handed.thread.is_alive()
