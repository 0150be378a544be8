"""Each parameter-server worker reads its own shards, as each MultiWorkerMirrored worker and Horovod rank does,
although TF's input context makes every worker's pipeline 0 of 1. On a real in-process TF cluster (2 workers, 1 ps)
in a process of its own (the coordinator's eager context joins the cluster for the rest of its process)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tfdist.operators.launchers.processes import free_ports

SHARDS, RECORDS = 4, 50
READ_BY_WORKER = f"""
import json, sys
from tfdist.spec.training import TrainingSpec
from tfdist.trainer.runtime import import_tensorflow
from tfdist.trainer.syncs.parameter_server import ParameterServer
from tfdist.trainer.train import shard_records

tf = import_tensorflow()
tf.keras.utils.set_random_seed(7)  # as the train stage does
files, ports = sys.argv[1:{SHARDS + 1}], sys.argv[{SHARDS + 1}:]
cluster = tf.train.ClusterSpec({{"worker": [f"127.0.0.1:{{p}}" for p in ports[:2]], "ps": [f"127.0.0.1:{{ports[2]}}"]}})
tasks = [("worker", 0), ("worker", 1), ("ps", 0)]
servers = [tf.distribute.Server(cluster, job, index, protocol="grpc") for job, index in tasks]
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
sync = ParameterServer(tf, TrainingSpec(strategy="parameter_server", num_ps=1, num_workers=2), resolver)


def read_from(shard_and_record):  # one record a step: [worker × shard] one-hot
    worker = tf.distribute.coordinator.experimental_get_current_worker_index()
    return tf.one_hot(worker * {SHARDS} + shard_and_record[0, 0], 2 * {SHARDS})


parse = lambda record: tf.strings.to_number(tf.strings.split(record, ":"), tf.int64)
run = sync.step_runner(read_from, 2 * {SHARDS}, lambda r, n, b: shard_records(tf, files, r, n, 7).map(parse).batch(1))
print(json.dumps(run({SHARDS * RECORDS}).reshape(2, {SHARDS}).tolist()))
"""


@pytest.mark.e2e  # 10-30 s: in make test, not in the fast set
def test_parameter_server_workers_read_their_own_shards(tmp_path):
    import tensorflow as tf

    files = []
    for shard in range(SHARDS):
        files.append(str(tmp_path / f"train-{shard}.tfrecord"))
        with tf.io.TFRecordWriter(files[-1]) as writer:
            for record in range(RECORDS):
                writer.write(f"{shard}:{record}".encode())
    done = subprocess.run(
        [sys.executable, "-c", READ_BY_WORKER, *files, *map(str, free_ports(3))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = np.array(json.loads(done.stdout.splitlines()[-1]))  # [worker, shard]: records read
    assert read.sum() == SHARDS * RECORDS
    assert (read[0, 1::2] == 0).all() and (read[1, 0::2] == 0).all(), read  # worker i: shards i, i + 2
    assert read[0].sum() and read[1].sum(), read  # both workers read
