"""A run whose artifact root is a bucket on a real S3-protocol server (moto's, over HTTP): the Airflow side reaches
it through its connection, the stage processes through the credentials the launcher hands them."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import DAY, collecting_logger, plan_for
from tfdist.contract import MANIFEST, read_json, registry, storage
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


SCORE = """
import json, sys
from tfdist.trainer import data, metrics
from tfdist.trainer.evaluate import score, serving_predict
from tfdist.trainer.runtime import import_tensorflow

tf = import_tensorflow()
manifest, data_dir = data.verified_manifest(sys.argv[1] + "/data", "eval")
outputs, labels = score(tf, serving_predict(tf, sys.argv[1] + "/model", "multiclass"), data_dir, manifest)
print(json.dumps(metrics.of_task(manifest["label"], "auto", ["accuracy"], outputs, labels)[0]))
"""


def served_accuracy(copied: str) -> float:
    """The eval accuracy of the SavedModel ``<copied>/model`` on the eval shards ``<copied>/data``, in a fresh
    process with no access to the bucket."""
    done = subprocess.run(
        [sys.executable, "-c", SCORE, copied], capture_output=True, text=True, timeout=300, cwd=copied
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])["accuracy"]


def run_stage(plan, task_id: str) -> tuple[LocalLauncher, dict]:
    logger, _ = collecting_logger(task_id)
    launcher = LocalLauncher(plan)
    return launcher, launcher.run(plan.stage(task_id), logger)


def test_two_nights_publish_and_warm_start_with_their_artifacts_only_in_the_bucket(bucket_root, tmp_path, monkeypatch):
    """The first night trains, evaluates and publishes into the bucket; the second warm-starts from that version
    and is gated against it. The published SavedModel, copied out, scores as the gate said."""
    monkeypatch.chdir(tmp_path)  # the processes' too: a URL taken for a local path would land here
    training = {"checkpoint_every_steps": 20, "keep_checkpoints": 2, "warm_start": {"from": "baseline"}}
    plan = plan_for(bucket_root, "nightly", DAY - dt.timedelta(days=1), training=training)
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
    _, published = run_stage(plan, "export")
    version = published["version"]
    model_dir = plan.stage("export").args.model_dir
    assert published["path"] == f"{model_dir}/{version}" and registry.live(model_dir) == version
    assert f"versions: {version}" in storage.read_bytes(storage.join(model_dir, registry.SERVING_CONFIG)).decode()
    metadata = read_json(registry.metadata_file(published["path"]))
    assert metadata["serving_eval_metrics"]["accuracy"] == pytest.approx(evaluated["metrics"]["accuracy"], abs=1e-6)
    copied = str(tmp_path / "copied")
    storage.download_tree(published["path"], os.path.join(copied, "model"))
    storage.download_tree(layout.data_dir, os.path.join(copied, "data"))
    assert served_accuracy(copied) == pytest.approx(evaluated["metrics"]["accuracy"], abs=1e-6)

    second = plan_for(bucket_root, "nightly-2", DAY, training=training)
    for task_id in ("prepare_data", "validate_data", "train", "evaluate"):
        run_stage(second, task_id)
    assert read_json(second.layout.warm_start_file)["parent"]["version"] == version
    assert read_json(second.layout.blessing_file)["baseline"]["version"] == version
    shutil.rmtree(copied)
    assert os.listdir(tmp_path) == []
