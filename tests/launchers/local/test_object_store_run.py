"""A run whose artifact root is a bucket on a real S3-protocol server (moto's, over HTTP): the Airflow side reaches
it through its connection, the stage processes through the credentials the launcher hands them."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import collecting_logger, plan_for
from tfdist.contract import MANIFEST, read_json, storage
from tfdist.operators.launchers.local import LocalLauncher

pytestmark = pytest.mark.e2e


@pytest.fixture
def bucket_root(s3, digits_root, monkeypatch) -> str:
    """A bucket holding the digits partitions under its artifact root; the Airflow connection aws_default to it."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": s3.env["AWS_ACCESS_KEY_ID"],
                "password": s3.env["AWS_SECRET_ACCESS_KEY"],
                "extra": {"endpoint_url": s3.endpoint, "region_name": "us-east-1"},
            }
        ),
    )
    root = f"s3://{s3.new_bucket()}/tfdist"
    storage.upload_tree(os.path.join(digits_root, "raw"), storage.join(root, "raw"))
    return root


def run_stage(plan, task_id: str) -> tuple[LocalLauncher, dict]:
    logger, _ = collecting_logger(task_id)
    launcher = LocalLauncher(plan)
    return launcher, launcher.run(plan.stage(task_id), logger)


def test_a_run_trains_and_evaluates_with_its_artifacts_only_in_the_bucket(bucket_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the processes' too: a URL taken for a local path would land here
    plan = plan_for(bucket_root, "nightly", training={"checkpoint_every_steps": 20, "keep_checkpoints": 2})
    layout = plan.layout
    assert layout.run_dir.startswith(bucket_root + "/")
    run_stage(plan, "prepare_data")
    run_stage(plan, "validate_data")
    launcher, trained = run_stage(plan, "train")
    assert not os.path.exists(launcher.scratch)
    assert trained["checkpoint"].startswith(layout.checkpoint_dir + "/ckpt-")
    checkpoints = storage.names(layout.checkpoint_dir)
    assert "checkpoint" in checkpoints and len({n.split(".")[0] for n in checkpoints} - {"checkpoint"}) == 2
    assert read_json(layout.progress_file)["step"] == trained["final_step"]
    assert storage.names(layout.tensorboard("train"))
    _, evaluated = run_stage(plan, "evaluate")
    assert evaluated["checkpoint"] == trained["checkpoint"] and evaluated["blessed"]
    assert read_json(layout.blessing_file)["metrics"]["accuracy"] > 0.8
    assert read_json(storage.join(layout.data_dir, MANIFEST))["train"]["examples"] > 0
    assert os.listdir(tmp_path) == []
