"""Whole DAG runs on Kubernetes: ``airflow dags test`` (the real task runner, deferral to the trigger run
in line, XCom, the task state store) against the stand-in cluster of tests/k8s_standin.py, in the parameter-
server and Horovod modes. The Airflow process runs in a mount namespace where the artifact root is an empty tmpfs: every file
of the run is written and read by the pods, and results come back as termination messages. What the
stand-in does not model is listed in its docstring; needs root."""

from __future__ import annotations

import json
import os
import re

import pytest

from tfdist.operators.demo import airflow_dags_test
from tfdist.operators.launchers.k8s_objects import object_name
from tests.conftest import DAY, STANDIN_NEEDS_ROOT, make_spec, needs_root
from tests.k8s_standin import Cluster
from tfdist.trainer.contract import read_json, registry, run_path

pytestmark = [pytest.mark.e2e, needs_root(STANDIN_NEEDS_ROOT, "ip")]
CONNECTION = "k8s_dag_standin"
MODES = {  # MultiWorkerMirrored pods run in the launcher tests (kill, eviction, crash and retry, TFJob)
    "parameter_server": {"strategy": "parameter_server", "num_ps": 1, "num_workers": 1},
    "horovod": {"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo", "slots_per_worker": 1}},
}


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory, digits_root):
    """The stand-in cluster, and a DAGs folder with one pipeline per mode on it (launcher kubernetes)."""
    cluster = Cluster(str(tmp_path_factory.mktemp("standin"))).start()
    dags = tmp_path_factory.mktemp("k8s_dags")
    kubernetes = {"namespace": "ml", "connection_id": CONNECTION, "pods": {"image": "tfdist-worker:test", "cpu": "1"},
                  "artifact_volume": {"claim_name": "tfdist-artifacts"}, "startup_timeout_seconds": 60,
                  "log_members": "all"}
    specs = [make_spec(digits_root, name=f"k8s_{mode}", kubernetes=kubernetes,
                       training={"launcher": "kubernetes", "epochs": 3, **training},
                       validation={"thresholds": {"accuracy": {"lower": 0.8}}}, export={"model_name": f"k8s_{mode}"})
             for mode, training in MODES.items()]
    (dags / "k8s_pipelines.py").write_text(
        '"""Airflow DAGs of the Kubernetes tests."""\nfrom tfdist.operators import build_dag\n\n'
        f"for spec in {specs!r}:\n    globals()[spec['name']] = build_dag(spec)\n")
    saved = {k: os.environ.get(k) for k in ("AIRFLOW__CORE__DAGS_FOLDER", f"AIRFLOW_CONN_{CONNECTION.upper()}")}
    os.environ.update({"AIRFLOW__CORE__DAGS_FOLDER": str(dags), f"AIRFLOW_CONN_{CONNECTION.upper()}": json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(cluster.kubeconfig)}})})
    yield cluster, digits_root
    cluster.close()
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@pytest.mark.parametrize("mode", MODES)
def test_the_dag_runs_on_kubernetes_published_and_blessed_without_touching_the_volume(pipelines, mode, tmp_path):
    cluster, root = pipelines
    dag_id = f"k8s_{mode}"
    hidden = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs tfdist-hidden "$0" && exec "$@"', root)
    outcome = airflow_dags_test(dag_id, DAY, str(tmp_path / "dags-test.log"), echo=False, wrapper=hidden)
    log = open(outcome.log_path).read()
    assert outcome.state == "success", log[-6000:]
    for task_id in ("prepare_data", "train", "evaluate", "export"):  # each task deferred, then resumed
        name = object_name(dag_id, outcome.run_id, task_id)
        assert ("Job", name) in cluster.created, task_id
    assert log.count("[DAG TEST] running trigger in line") == 4
    every_member = {"parameter_server": [r"\[chief-0\] .*step \d+", r"\[ps-0\] ps-0: serving", r"\[worker-0\] worker-0: serving"],
                    "horovod": [r"\[rank-0\] .*step \d+", r"\[rank-1\] .*step \d+"]}[mode]
    for line in every_member:  # each pod's log in the task log, with its member's prefix
        assert re.search(line, log), f"no line {line}"
    if mode == "horovod":  # 2 pods meeting through pod 0's rendezvous server: every rank ends alike
        found = dict(re.findall(r"\[(rank-\d)\] [\w-]+: done at step \d+; weights sha256 (\w+)", log))
        assert set(found) == {"rank-0", "rank-1"} and len(set(found.values())) == 1, found
    published, = registry.versions(os.path.join(root, "models", dag_id))
    assert published["run_id"] == outcome.run_id and published["metrics"]["accuracy"] >= 0.8
    run_dir = run_path(root, dag_id, outcome.run_id)
    assert read_json(os.path.join(run_dir, "run.json"))["run_id"] == outcome.run_id  # recorded by the pods
    assert not [key for key in cluster.objects if key[2].startswith(f"tfd-k8s-{mode.replace('_', '-')}")]
