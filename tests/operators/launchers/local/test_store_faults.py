"""Faults of the object store under a run on the local launcher (moto's S3 server behind a TCP relay the tests cut
or slow down): the store unreachable for 30 s while training, an export killed mid-upload and retried, and
credentials the store refuses."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from tests.publishing.versions import published_metadata
from tests.support.dags import dags_folder
from tests.support.logs import collecting_logger
from tests.support.object_store import S3Server, StoreProxy, airflow_connection
from tests.support.plans import plan_for
from tests.support.specs import DAY, make_spec
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators import artifact_store
from tfdist.operators.cli import main as cli
from tfdist.operators.demo import airflow_dags_test
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry

pytestmark = pytest.mark.e2e
OUTAGE_SECONDS = 30


@pytest.fixture
def connected_through(s3, monkeypatch):
    """``connect_to(endpoint)``: the Airflow connection aws_default (this process's, and the stage processes') to
    ``endpoint``; afterwards this process reaches the S3 server directly again."""

    def connect_to(endpoint: str) -> None:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", airflow_connection(endpoint))
        artifact_store._connected.clear()

    yield connect_to
    artifact_store._connected.clear()
    storage.configure("s3", s3.options)


@pytest.fixture
def bucket_root(s3, digits_root) -> str:
    root = f"s3://{s3.new_bucket()}/tfdist"
    storage.upload_tree(os.path.join(digits_root, "raw"), storage.join(root, "raw"))
    return root


def run_stage(plan, task_id: str, launcher: LocalLauncher | None = None):
    logger, lines = collecting_logger(task_id)
    launcher = launcher or LocalLauncher(plan)
    return launcher.run(plan.stage(task_id), logger), lines.lines


@pytest.mark.extended
def test_the_store_unreachable_for_30_s_while_training_delays_the_uploads_not_the_steps(
    s3, bucket_root, connected_through
):
    proxy = StoreProxy(s3.port)
    connected_through(proxy.endpoint)
    plan = plan_for(bucket_root, "outage", training={"epochs": 20, "checkpoint_every_steps": 20, "num_workers": 2})
    run_stage(plan, "prepare_data")
    checkpoints = plan.layout.checkpoint_dir
    trained: list = []
    training = threading.Thread(target=lambda: trained.extend(run_stage(plan, "train")))
    training.start()
    try:
        deadline = time.monotonic() + 300
        while "checkpoint" not in storage.names(checkpoints):  # the first upload made it: cut the store off
            assert training.is_alive() and time.monotonic() < deadline, "no checkpoint reached the store"
            time.sleep(0.1)
        proxy.cut()
        cut_at = time.monotonic()
        assert training.is_alive(), "the training ended before the store was cut off"
        time.sleep(OUTAGE_SECONDS)
        proxy.mend()
        training.join(600)
    finally:
        proxy.close()
        storage.configure("s3", s3.options)  # this process's reads: directly again
    result, lines = trained
    progress = read_json(plan.layout.progress_file)
    assert progress["step"] == progress["total_steps"] == result["final_step"]
    assert result["checkpoint"] == f"{checkpoints}/ckpt-{result['final_step']}"
    assert f"ckpt-{result['final_step']}.index" in storage.names(checkpoints)
    retries = [line for line in lines if "trying again in" in line]
    assert retries, "no upload was retried"
    # every step ran while the store was unreachable: the last one was logged before the relay was mended
    done = [i for i, line in enumerate(lines) if f"done at step {result['final_step']}" in line]
    assert done and done[0] < lines.index(retries[-1]), "training waited for the store"
    assert time.monotonic() - cut_at >= OUTAGE_SECONDS


@pytest.mark.extended
def test_an_export_killed_mid_upload_leaves_no_version_visible_and_its_retry_publishes_once(
    s3, bucket_root, connected_through
):
    connected_through(s3.endpoint)
    plan = plan_for(bucket_root, "killed-export", validation={"thresholds": {"accuracy": {"lower": 0.5}}})
    for task_id in ("prepare_data", "validate_data", "train", "evaluate"):
        run_stage(plan, task_id)
    model_dir = plan.model_dir
    slow = StoreProxy(s3.port, delay=0.3)  # slow enough to be caught mid-upload
    connected_through(slow.endpoint)
    launcher, failed, seen = LocalLauncher(plan), [], []
    storage.configure("s3", s3.options)  # the export's processes go through the relay, this process's reads not
    exporting = threading.Thread(target=lambda: failed.append(_failure(plan, launcher)))
    exporting.start()
    try:
        fs, path = storage.filesystem(model_dir)
        uploaded: list[str] = []
        while exporting.is_alive() and not uploaded:
            seen += registry.versions(model_dir)  # what a reader polling the store sees meanwhile
            uploaded = [f for f in fs.find(path) if f[len(path) + 1 :].split("/", 1)[0].isdigit()]
            time.sleep(0.02)
        assert uploaded, "the export ended before any of its version was uploaded"
        for process in launcher.processes.values():
            for victim in [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]:
                victim.send_signal(signal.SIGKILL)
        exporting.join(120)
    finally:
        slow.close()
    assert failed == [True] and seen == []
    assert registry.versions(model_dir) == [] and registry.live(model_dir) is None
    assert not storage.exists(storage.join(model_dir, registry.SERVING_CONFIG))

    connected_through(s3.endpoint)
    published, _ = run_stage(plan, "export")  # the task's retry
    (version,) = published_metadata(model_dir)
    assert version["version"] == published["version"] and registry.live(model_dir) == published["version"]
    assert [n for n in storage.names(model_dir) if n.isdigit()] == [str(published["version"])]
    assert (
        f"versions: {published['version']}"
        in storage.read_bytes(storage.join(model_dir, registry.SERVING_CONFIG)).decode()
    )


def _failure(plan, launcher: LocalLauncher) -> bool:
    """Whether the export stage failed (killed)."""
    try:
        run_stage(plan, "export", launcher)
    except StageFailed:
        return True
    return False


@pytest.fixture(scope="module")
def refusing_store():
    """An S3 server that refuses every key (no IAM user has one), with one bucket; its artifact root."""
    server = S3Server(open_requests=1).start()
    yield server, f"s3://{server.new_bucket()}/tfdist"
    server.stop()


def test_credentials_the_store_refuses_fail_the_first_task_naming_the_connection_before_any_work(
    refusing_store, connected_through, tmp_path, monkeypatch, capsys
):
    server, root = refusing_store
    connected_through(server.endpoint)
    spec = make_spec(root, name="refused_store", retries={"prepare_data": 0})
    with dags_folder(tmp_path / "dags", [spec], "The Airflow DAG of the refused-credentials test."):
        outcome = airflow_dags_test("refused_store", DAY, str(tmp_path / "dags-test.log"), echo=False)
    log = open(outcome.log_path).read()
    assert outcome.state == "failed"
    assert f"cannot reach {root} with the Airflow connection 'aws_default' ([tfdist] aws_conn_id)" in log
    assert "does not exist in our records" in log and "starting prepare" not in log

    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", root)
    assert cli(["runs", "refused_store"]) == 2
    assert "the Airflow connection 'aws_default'" in capsys.readouterr().err
