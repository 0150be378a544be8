"""Whole DAG runs on Kubernetes: ``airflow dags test`` (the real task runner, deferral to the trigger run
in line, XCom, the task state store) against the stand-in cluster of tests/k8s_standin/, in the parameter-
server and Horovod modes, their artifacts in a bucket (S3 and GCS: no artifact volume). The Airflow process runs
in a mount namespace where the local artifact root is an empty tmpfs: every file of the run is written and read by
the pods or through the Airflow connection, and results come back as termination messages.
What the stand-in does not model is listed in its docstring; needs root."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.k8s_standin import StandInCluster
from tests.operators.launchers.kubernetes import store_secret
from tests.publishing.versions import published_metadata
from tests.support.object_store import gcs_connection, new_bucket_url
from tests.support.processes import wait_for
from tests.support.roots import STANDIN_NEEDS_ROOT, needs_root
from tests.support.specs import DAY, make_spec
from tfdist.contract.layout import RunLayout, run_path
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import airflow_dags_test
from tfdist.operators.launchers.kubernetes.objects import object_name

pytestmark = [pytest.mark.e2e, needs_root(STANDIN_NEEDS_ROOT)]
CONNECTION = "k8s_dag_standin"
MODES = {  # MultiWorkerMirrored pods run in the launcher tests (kill, eviction, crash and retry, TFJob)
    "parameter_server": {"strategy": "parameter_server", "num_ps": 1, "num_workers": 1},
    "horovod": {"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo", "slots_per_worker": 1}},
}


STAGES = ("prepare_data", "validate_data", "train", "evaluate", "export")
IN_A_BUCKET = {"parameter_server": "s3", "horovod": "gs"}
"""The store each mode's pipeline keeps its artifacts in (no artifact volume; credentials from a Secret); its
prepare_data runs as 2 pods meeting there, each writing one of the day's two input files."""


def upload_in_halves(local_raw: str, url: str) -> None:
    """The raw partitions uploaded under ``url``, each day's CSV as two objects (``<name>-0.csv``, ``-1.csv``)."""
    for relative in storage.files_under(local_raw):
        with open(os.path.join(local_raw, relative)) as f:
            header, *rows = f.readlines()
        half, stem = len(rows) // 2, storage.join(url, relative.removesuffix(".csv"))
        for k, part in enumerate((rows[:half], rows[half:])):
            storage.write_bytes(f"{stem}-{k}.csv", (header + "".join(part)).encode())


@pytest.fixture(scope="module")
def pipelines(request, tmp_path_factory, digits_root, s3, gcs, token_server):
    """The stand-in cluster, and a DAGs folder with one pipeline per mode on it (launcher kubernetes); the
    artifact root of each: IN_A_BUCKET's in its bucket, the evicted pipeline's on the artifact volume."""
    cluster = StandInCluster(str(tmp_path_factory.mktemp("standin"))).start()
    dags = tmp_path_factory.mktemp("k8s_dags")
    kubernetes = {
        "namespace": "ml",
        "connection_id": CONNECTION,
        "pods": {"image": "tfdist-worker:test", "cpu": "1"},
        "artifact_volume": {"claim_name": "tfdist-artifacts"},
        "startup_timeout_seconds": 60,
        "log_members": "all",
    }
    host = f"{cluster.subnet}.1"  # this machine, seen from the pods' network
    gcs_key = json.dumps(token_server.service_account_key(host))
    pods_env = {"s3": s3.env_at(host), "gs": {**gcs.env_at(host), storage.GCS_KEY_ENV: gcs_key}}
    roots, in_a_bucket = {"evicted": digits_root}, {}
    for mode, scheme in IN_A_BUCKET.items():
        roots[mode] = new_bucket_url(request, scheme, "tfdist")
        upload_in_halves(os.path.join(digits_root, "raw"), storage.join(roots[mode], "raw"))
        secret = store_secret(cluster, f"{scheme}-credentials", pods_env[scheme])
        in_a_bucket[mode] = {**kubernetes, "artifact_volume": None, "credentials_secret": secret}
    specs = [
        make_spec(
            roots[mode],
            name=f"k8s_{mode}",
            kubernetes=in_a_bucket.get(mode, kubernetes),
            data={"prepare_processes": 2} if mode in IN_A_BUCKET else {},
            training={"launcher": "kubernetes", "epochs": 3, **training},
            validation={"thresholds": {"accuracy": {"lower": 0.8}}},
            export={"model_name": f"k8s_{mode}"},
        )
        for mode, training in {**MODES, "evicted": MODES["parameter_server"]}.items()
    ]
    (dags / "k8s_pipelines.py").write_text(
        '"""Airflow DAGs of the Kubernetes tests."""\nfrom tfdist.operators import build_dag\n\n'
        f"for spec in {specs!r}:\n    globals()[spec['name']] = build_dag(spec)\n"
    )
    settings = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        f"AIRFLOW_CONN_{CONNECTION.upper()}": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(cluster.kubeconfig)}}
        ),
        "AIRFLOW_CONN_AWS_DEFAULT": s3.airflow_connection,
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": gcs_connection(key=token_server.service_account_key()),
    }
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    yield cluster, roots
    cluster.close()
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@pytest.mark.parametrize("mode", MODES)
def test_the_dag_runs_on_kubernetes_published_and_blessed_without_touching_the_volume(pipelines, mode, tmp_path):
    cluster, roots = pipelines
    dag_id, root, local_root = f"k8s_{mode}", roots[mode], roots["evicted"]
    hidden = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs tfdist-hidden "$0" && exec "$@"', local_root)
    outcome = airflow_dags_test(dag_id, DAY, str(tmp_path / "dags-test.log"), echo=False, wrapper=hidden)
    log = open(outcome.log_path).read()
    assert outcome.state == "success", log[-6000:]
    for task_id in STAGES:  # each task deferred, then resumed
        name = object_name(dag_id, outcome.run_id, task_id)
        assert ("Job", name) in cluster.created, task_id
    failures = re.findall(r"^tfdist\.\S+: .*(?:\n(?!\d{4}-).*)*", log, re.MULTILINE)  # a try failed, was retried
    assert log.count("[DAG TEST] running trigger in line") == len(STAGES), "\n".join(failures)[-4000:]
    assert re.search(r"\[prepare-0\] read \d+ rows from 2 file\(s\) by 2 writer\(s\) \(pods\)", log)
    assert "[validate-0] no baseline: nothing published as of this data interval" in log  # the data gate's pod
    every_member = {
        "parameter_server": [r"\[chief-0\] .*step \d+", r"\[ps-0\] ps-0: serving", r"\[worker-0\] worker-0: serving"],
        "horovod": [r"\[rank-0\] .*step \d+", r"\[rank-1\] .*step \d+"],
    }[mode]
    for line in every_member:  # each pod's log in the task log, with its member's prefix
        assert re.search(line, log), f"no line {line}"
    if mode == "horovod":  # 2 pods meeting through pod 0's rendezvous server: every rank ends alike
        found = dict(re.findall(r"\[(rank-\d)\] [\w-]+: done at step \d+; weights sha256 (\w+)", log))
        assert set(found) == {"rank-0", "rank-1"} and len(set(found.values())) == 1, found
    (published,) = published_metadata(storage.join(root, "models", dag_id))
    assert published["run_id"] == outcome.run_id and published["metrics"]["accuracy"] >= 0.8
    run_dir = run_path(root, dag_id, outcome.run_id)
    assert read_json(storage.join(run_dir, "run.json"))["run_id"] == outcome.run_id  # recorded by the pods
    assert not os.path.exists(os.path.join(local_root, dag_id))  # the pods had no artifact volume: nothing of the
    assert storage.names(RunLayout(run_dir).checkpoint_dir)  # run is on this machine's disk
    assert not [key for key in cluster.objects if key[2].startswith(f"tfd-k8s-{mode.replace('_', '-')}")]


@pytest.mark.extended
@pytest.mark.parametrize("by", ["its worker", "a user"])
def test_sigterm_to_the_task_leaves_its_job_running_unless_a_user_ended_the_task(pipelines, by, tmp_path):
    """The real task runner (``airflow dags test`` runs each task in its process, its state in the metadata
    DB) gets SIGTERM while the train task creates its Job (the stand-in answers creates late). Its worker
    shutting down or evicted: the task still runs, so on_kill leaves the Job for the task to follow (here the
    same try goes on, defers and succeeds). A user marking the task failed (the API server's write to the DB,
    then the supervisor's SIGTERM): on_kill deletes the Job and the try fails."""
    cluster, _ = pipelines
    dag_id, log = "k8s_evicted", tmp_path / "dags-test.log"
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    subprocess.run([airflow, "db", "migrate"], check=True, capture_output=True)
    created, cluster.create_delay = len(cluster.created), 3
    with open(log, "w") as out:
        proc = subprocess.Popen([airflow, "dags", "test", dag_id, DAY.isoformat()], stdout=out, stderr=out)
    try:
        (job,) = wait_for(
            lambda: [n for k, n in cluster.created[created:] if k == "Job" and "-train-" in n],
            120,
            "the train Job to be created",
        )
        if by == "a user":
            with sqlite3.connect(os.path.join(os.environ["AIRFLOW_HOME"], "airflow.db")) as db:
                db.execute(
                    "UPDATE task_instance SET state = 'failed' WHERE dag_id = ? AND task_id = 'train' "
                    "AND state = 'running'",
                    (dag_id,),
                )
        proc.send_signal(signal.SIGTERM)
        time.sleep(cluster.create_delay + 1)
        cluster.create_delay = 0
        assert (("Job", "ml", job) in cluster.objects) == (by == "its worker")
        if by == "a user":
            wait_for(
                lambda: "train stopped while its Kubernetes objects were created" in log.read_text(),
                60,
                "the try to fail",
            )
        else:
            proc.wait(300)
            assert re.search(r"DagRun Finished: .*state=success", log.read_text()), log.read_text()[-4000:]
            assert [n for k, n in cluster.created[created:] if k == "Job" and "-train-" in n] == [job]
    finally:
        cluster.create_delay = 0
        proc.kill()
        proc.wait()
        for kind, namespace, name in [k for k in cluster.objects if k[0] == "Job" and "-evicted-" in k[2]]:
            cluster.delete(kind, namespace, name, "Background")  # what a killed retry may have left
    left = "told to stop while the task still runs (its worker shuts down, or was evicted)"
    assert (left in log.read_text()) == (by == "its worker"), log.read_text()[-4000:]
