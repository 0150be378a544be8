"""trainer/syncs/__init__.py's gradient_sync: which Sync a training spec gets in this process (mirrored and Horovod
in-process, as in their own tests), and a parameter-server cluster's ps and worker tasks, which serve instead (None),
in processes of their own (a TF server lives as long as its process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.support.specs import make_spec
from tfdist.operators.launchers.processes import free_ports
from tfdist.spec import load_spec
from tfdist.trainer.syncs import gradient_sync
from tfdist.trainer.syncs.elastic import ElasticHorovod
from tfdist.trainer.syncs.horovod import Horovod
from tfdist.trainer.syncs.mirrored import Mirrored
from tfdist.trainer.syncs.parameter_server import ParameterServer

MPI = {"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo", "slots_per_worker": 1}}


def training(root, **fields):
    return load_spec(make_spec(str(root), training=fields)).training


def test_a_tf_cluster_without_a_parameter_server_is_mirrored(tf, tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    sync = gradient_sync(tf, training(tmp_path), elastic=False)
    assert type(sync) is Mirrored and (sync.name, sync.workers, sync.is_chief) == ("worker-0", 1, True)


def test_backend_mpi_is_horovod_and_elastic_horovod_when_elastic(tf, tmp_path):
    fixed = gradient_sync(tf, training(tmp_path, **MPI), elastic=False)
    assert type(fixed) is Horovod and (fixed.name, fixed.workers, fixed.learning_rate_scale) == ("rank-0", 1, 2)
    elastic = gradient_sync(tf, training(tmp_path, **MPI, min_workers=1), elastic=True)
    assert type(elastic) is ElasticHorovod and elastic.is_chief


SERVE = """
import json
from tfdist.spec.training import TrainingSpec
from tfdist.trainer.runtime import import_tensorflow
from tfdist.trainer.syncs import gradient_sync

tf = import_tensorflow()
print(json.dumps(repr(gradient_sync(tf, TrainingSpec(strategy="parameter_server", num_ps=1, num_workers=1), False))))
"""


@pytest.mark.e2e  # a process of its own per task, TensorFlow imported in each
@pytest.mark.parametrize("task", ["ps", "worker"])
def test_a_parameter_server_clusters_ps_and_worker_tasks_serve_and_get_no_sync(task):
    chief, worker, ps = (f"127.0.0.1:{port}" for port in free_ports(3))
    cluster = {"chief": [chief], "worker": [worker], "ps": [ps]}
    task_config = {"cluster": cluster, "task": {"type": task, "index": 0}}
    env = {**os.environ, "TF_CONFIG": json.dumps(task_config)}
    with subprocess.Popen(
        [sys.executable, "-u", "-c", SERVE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as proc:
        stopper = threading.Timer(120, proc.kill)  # a task that never says it serves fails instead of hanging
        stopper.start()
        try:
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "serving at" in line:
                    break
            assert lines and lines[-1].startswith(f"{task}-0: serving at grpc://"), lines
            assert proc.poll() is None  # it serves until stopped, and so never gets a sync
        finally:
            stopper.cancel()
            proc.kill()


CHIEF = """
import json, os
from tfdist.spec.training import TrainingSpec
from tfdist.trainer.runtime import import_tensorflow
from tfdist.trainer.syncs import gradient_sync

tf = import_tensorflow()
cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
spec = tf.train.ClusterSpec(cluster)
servers = [tf.distribute.Server(spec, job, 0, protocol="grpc") for job in ("worker", "ps")]
sync = gradient_sync(tf, TrainingSpec(strategy="parameter_server", num_ps=1, num_workers=1), False)
print(json.dumps([type(sync).__name__, sync.name, sync.workers, sync.is_chief]))
os._exit(0)  # the servers would keep the process
"""


@pytest.mark.e2e  # a TF cluster in a process of its own
def test_a_parameter_server_clusters_chief_gets_the_parameter_server_sync():
    chief, worker, ps = (f"127.0.0.1:{port}" for port in free_ports(3))
    cluster = {"chief": [chief], "worker": [worker], "ps": [ps]}
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})}
    done = subprocess.run([sys.executable, "-c", CHIEF], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [ParameterServer.__name__, "chief-0", 1, True]
