"""Runs whose artifact root is a bucket on a real S3-protocol server (moto's) or a GCS emulator (fake-gcs-server),
over HTTP, on real Airflow: the tasks reach it through the Airflow connection, the stage processes through the
credentials the launcher hands them."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from tests.support.dags import dags_folder
from tests.support.object_store import gcs_connection, new_bucket_url
from tests.support.specs import DAY, make_spec
from tfdist.contract.layout import RunLayout, run_path
from tfdist.contract.progress import CHECKPOINT_STATE, kept_checkpoints
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import airflow_dags_test
from tfdist.publishing import registry

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
DAG_ID = "digits_in_a_bucket"


@pytest.fixture(params=["s3", "gs"])
def bucket_root(request, digits_root, monkeypatch) -> str:
    """A bucket holding the digits partitions under its artifact root; the Airflow connection to it (aws_default
    with the S3 server's key; google_cloud_default with a service account key)."""
    if request.param == "s3":
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", request.getfixturevalue("s3").airflow_connection)
    else:
        key = request.getfixturevalue("token_server").service_account_key()
        monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", gcs_connection(key=key))
    root = new_bucket_url(request, request.param, "tfdist")
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
print(json.dumps(metrics.of_task(manifest.label, "auto", ["accuracy"], outputs, labels)[0]))
"""


def served_accuracy(copied: str) -> float:
    """The eval accuracy of the SavedModel ``<copied>/model`` on the eval shards ``<copied>/data``, in a fresh
    process with no access to the bucket."""
    done = subprocess.run(
        [sys.executable, "-c", SCORE, copied], capture_output=True, text=True, timeout=300, cwd=copied
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])["accuracy"]


def test_two_nights_on_real_airflow_with_their_artifacts_only_in_the_bucket(bucket_root, tmp_path, monkeypatch):
    """``airflow dags test``, twice: the first night trains (2 workers), evaluates and publishes into the bucket;
    the second warm-starts from that version and is gated against it, which its prune (``keep_versions: 1``) spares.
    Nothing lands on the local disk: not under
    the local artifact root, the working directory or the launcher's scratch. The published SavedModel, copied
    out, scores as the gate said."""
    local_root, work, scratch, logs = (tmp_path / name for name in ("artifacts", "work", "tmp", "logs"))
    for folder in (work, scratch):
        folder.mkdir()
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(local_root))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.chdir(work)  # the processes' too: a URL taken for a local path would land here
    training = {"checkpoint_every_steps": 20, "keep_checkpoints": 2, "warm_start": {"from": "baseline"}}
    spec = make_spec(bucket_root, name=DAG_ID, training=training, export={"model_name": DAG_ID, "keep_versions": 1})
    with dags_folder(tmp_path / "dags", [spec], "The Airflow DAG of the object-store run."):
        first = airflow_dags_test(DAG_ID, DAY, str(logs / "first.log"), echo=False)
        assert first.state == "success", open(first.log_path).read()[-4000:]
        second = airflow_dags_test(DAG_ID, DAY + dt.timedelta(days=1), str(logs / "second.log"), echo=False)
        assert second.state == "success", open(second.log_path).read()[-4000:]
    assert not local_root.exists() and os.listdir(work) == [] and not list(scratch.glob("tfdist-*"))

    layout = RunLayout(run_path(bucket_root, DAG_ID, first.run_id))
    trained = read_json(layout.result("train"))
    assert trained["checkpoint"].startswith(layout.checkpoint_dir + "/ckpt-")
    checkpoints = storage.names(layout.checkpoint_dir)
    kept = {n.split(".")[0] for n in checkpoints} - {"checkpoint"}
    # the last keep_checkpoints (2) of the uploads queued (the first's, the last's, paced ones between): all there,
    # however far the uploads lag behind the training
    state = kept_checkpoints(storage.read_bytes(storage.join(layout.checkpoint_dir, CHECKPOINT_STATE)).decode())
    assert len(kept) == 2 and set(state) == kept and state[-1] == os.path.basename(trained["checkpoint"])
    assert read_json(layout.progress_file)["step"] == trained["final_step"]
    assert storage.names(layout.tensorboard("train"))
    evaluated = read_json(layout.result("evaluate"))
    assert evaluated["checkpoint"] == trained["checkpoint"] and evaluated["blessed"]
    published = read_json(layout.result("export"))
    version, model_dir = published["version"], storage.join(bucket_root, "models", DAG_ID)
    assert published["path"] == f"{model_dir}/{version}"
    metadata = read_json(registry.metadata_file(published["path"]))
    assert metadata["serving_eval_metrics"]["accuracy"] == pytest.approx(evaluated["metrics"]["accuracy"], abs=1e-6)
    copied = str(tmp_path / "copied")
    storage.download_tree(published["path"], os.path.join(copied, "model"))
    storage.download_tree(layout.data_dir, os.path.join(copied, "data"))
    assert served_accuracy(copied) == pytest.approx(evaluated["metrics"]["accuracy"], abs=1e-6)

    night = RunLayout(run_path(bucket_root, DAG_ID, second.run_id))
    assert read_json(night.warm_start_file)["parent"]["version"] == version
    assert read_json(night.blessing_file)["baseline"]["version"] == version
    live = registry.live(model_dir)
    assert live is not None and live > version
    assert f"versions: {live}" in storage.read_bytes(storage.join(model_dir, registry.SERVING_CONFIG)).decode()
    assert [m.version for m in registry.versions(model_dir)] == [
        version,
        live,
    ]  # keep_versions 1 spared the baseline
    assert not storage.names(storage.join(model_dir, registry.READERS_DIR))  # the warm start's, the gate's: released
    assert registry.prune(model_dir, 1, set()) == [version] and str(version) not in storage.names(model_dir)
