"""operators/launchers/processes.py: the local processes of a stage (argv lists, TF_CONFIG, GPUs, threads, cores,
the mpirun/horovodrun process of a Horovod stage) and its helpers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.operators.plan.test_plan import CTX, one_argv
from tests.support.specs import make_spec
from tfdist.contract.launch import HOST_DISCOVERY_SCRIPT
from tfdist.operators.launchers import processes as processes_module
from tfdist.operators.launchers.processes import (
    available_cores,
    devices,
    free_ports,
    local_host_names,
    local_processes,
    threads_per_process,
)
from tfdist.operators.plan import StagePlan, build_plan
from tfdist.spec import load_spec
from tfdist.trainer.runtime import inter_op_threads


def test_train_stage_is_a_tf_cluster_with_one_config_per_worker(tmp_path):
    spec = load_spec(
        make_spec(str(tmp_path), training={"num_workers": 3, "global_batch_size": 96, "gpus_per_worker": 2})
    )
    stage: StagePlan = build_plan(spec, CTX).stage("train")
    assert stage.sync == "tf_cluster" and [m.name for m in stage.members] == ["worker-0", "worker-1", "worker-2"]
    assert all(m.gpus == 2 for m in stage.members)
    processes = local_processes(stage, addresses=[f"127.0.0.1:{9000 + k}" for k in range(3)])
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in processes] == ["0,1", "2,3", "4,5"]
    configs = [json.loads(p.env["TF_CONFIG"]) for p in processes]
    assert configs[2] == {
        "cluster": {"worker": ["127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"]},
        "task": {"type": "worker", "index": 2},
    }


def test_horovod_gloo_runs_every_rank_through_horovodrun(tmp_path):
    spec = load_spec(
        make_spec(str(tmp_path), training={"backend": "mpi", "mpi": {"controller": "gloo", "slots_per_worker": 2}})
    )
    stage = build_plan(spec, CTX).stage("train")
    (process,) = local_processes(stage, python="/venv/bin/python")
    assert process.rank_tagged and stage.sync == "horovod"
    assert process.argv[:7] == ("/venv/bin/horovodrun", "-np", "4", "-H", "localhost:4", "--gloo", "/venv/bin/python")
    assert process.argv[7:9] == ("-m", "tfdist.trainer.train")


@pytest.mark.parametrize(
    "mpi, mpirun, chosen",
    [
        ({}, "/usr/bin/mpirun", "mpirun"),
        ({}, None, "horovodrun"),
        ({"controller": "gloo"}, "/usr/bin/mpirun", "horovodrun"),
        ({"controller": "mpi"}, None, "mpirun"),
        ({"extra_args": ["--bind-to", "core"]}, None, "mpirun"),
    ],
)
def test_the_launcher_chooses_the_horovod_controller_the_spec_leaves_open(tmp_path, monkeypatch, mpi, mpirun, chosen):
    """Without ``mpi.controller``, the machine starting the ranks decides: mpirun where it has OpenMPI, else
    horovodrun over Gloo; mpirun arguments ask for mpirun."""
    spec = load_spec(make_spec(str(tmp_path), training={"backend": "mpi", "mpi": mpi}))
    monkeypatch.setattr("tfdist.operators.launchers.processes.shutil.which", lambda name: mpirun)
    (process,) = local_processes(build_plan(spec, CTX).stage("train"), python="/venv/bin/python")
    assert os.path.basename(process.argv[0]) == chosen


def test_horovod_mpi_passes_extra_args_as_separate_argv_items(tmp_path):
    extra = ["--mca", "btl_tcp_if_include", "lo", "-x", "NCCL_DEBUG=INFO"]
    spec = load_spec(
        make_spec(str(tmp_path), training={"backend": "mpi", "mpi": {"controller": "mpi", "extra_args": extra}})
    )
    argv = one_argv(spec, build_plan(spec, CTX).stage("train"))
    assert argv[:5] == ["mpirun", "-np", "2", "-H", "localhost:2"] and "--tag-output" in argv
    start = argv.index("--mca")
    assert argv[start : start + len(extra)] == extra and argv[start + len(extra) :][:3] == [
        "python",
        "-m",
        "tfdist.trainer.train",
    ]


def test_parameter_server_cluster_has_chief_ps_and_workers(tmp_path):
    spec = load_spec(
        make_spec(str(tmp_path), training={"strategy": "parameter_server", "num_ps": 1, "gpus_per_worker": 1})
    )
    stage = build_plan(spec, CTX).stage("train")
    assert [m.name for m in stage.members] == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert stage.servers == ("ps", "worker") and [m.gpus for m in stage.members] == [0, 0, 1, 1]
    processes = local_processes(stage, addresses=[f"h:{n}" for n in range(4)])
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in processes] == ["", "", "0", "1"]
    config = json.loads(processes[1].env["TF_CONFIG"])
    assert config == {
        "cluster": {"chief": ["h:0"], "ps": ["h:1"], "worker": ["h:2", "h:3"]},
        "task": {"type": "ps", "index": 0},
    }


def test_training_processes_get_their_own_cores_only_when_they_share_the_machine_evenly(tmp_path, monkeypatch):
    monkeypatch.setattr(processes_module, "available_cores", lambda: [0, 1, 2, 3])

    def cores(**training):
        spec = load_spec(make_spec(str(tmp_path), training=training))
        return [p.env["TFDIST_CORES"] for p in local_processes(build_plan(spec, CTX).stage("train"))]

    assert cores() == ["0,1", "2,3"]
    assert cores(strategy="parameter_server", num_ps=1) == ["0", "1", "2", "3"]  # chief, ps, 2 workers
    assert cores(backend="mpi") == ["0,1;2,3"]  # one mpirun: a block per local rank
    assert cores(cpus_per_worker=1) == ["", ""]  # the user sized the workers: not pinned
    assert cores(strategy="parameter_server", num_ps=2) == [""] * 5  # more processes than cores


def test_every_process_of_a_parameter_server_cluster_keeps_two_inter_op_threads(tmp_path, monkeypatch):
    """A ps task runs every worker's updates at once and a worker waits on ps reads between its ops: each gets two
    inter-op threads though its share of the cores is one; other clusters' processes get at most their share."""
    monkeypatch.setattr(processes_module, "available_cores", lambda: [0, 1])

    def inter_op(**training):
        spec = load_spec(make_spec(str(tmp_path), training=training))
        threads = []
        for process in local_processes(build_plan(spec, CTX).stage("train")):
            monkeypatch.setenv("TF_CONFIG", process.env["TF_CONFIG"])
            threads.append((int(process.env["TFDIST_THREADS"]), inter_op_threads(int(process.env["TFDIST_THREADS"]))))
        return threads

    assert inter_op(strategy="parameter_server", num_ps=2) == [(1, 2)] * 5  # chief, 2 ps, 2 workers on 2 cores
    assert inter_op(num_workers=2) == [(1, 1)] * 2  # multi-worker mirrored, a core each


def test_elastic_horovod_runs_horovodrun_over_gloo_with_one_local_host_name_per_worker(tmp_path):
    spec = load_spec(
        make_spec(
            str(tmp_path),
            training={
                "backend": "mpi",
                "num_workers": 2,
                "min_workers": 1,
                "max_restarts": 2,
                "mpi": {"controller": "mpi"},
            },
        )
    )
    (process,) = local_processes(build_plan(spec, CTX).stage("train"))
    assert process.argv[1:15] == (
        "--gloo",
        "-np",
        "2",
        "--min-np",
        "1",
        "--max-np",
        "2",
        "--host-discovery-script",
        HOST_DISCOVERY_SCRIPT,
        "--reset-limit",
        "4",
        "--blacklist-cooldown-range",
        "1",
        "300",
    )
    assert process.argv[15:17] == (sys.executable, "-m") and os.access(HOST_DISCOVERY_SCRIPT, os.X_OK)
    assert process.env["TFDIST_HOROVOD_HOSTS"] == "127.0.0.1:1,127.0.0.01:1"
    assert {socket.gethostbyname(h.split(":")[0]) for h in process.env["TFDIST_HOROVOD_HOSTS"].split(",")} == {
        "127.0.0.1"
    }
    printed = subprocess.run(
        [HOST_DISCOVERY_SCRIPT],
        env={"TFDIST_HOROVOD_HOSTS": process.env["TFDIST_HOROVOD_HOSTS"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.split() == ["127.0.0.1:1", "127.0.0.01:1"]


def test_free_ports_are_distinct_and_free_to_bind_on_127_0_0_1():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_the_cores_are_this_processs_cpu_set_and_a_lone_process_takes_them_all_and_no_gpu(tmp_path):
    assert available_cores() == sorted(os.sched_getaffinity(0))
    spec = load_spec(make_spec(str(tmp_path)))
    (process,) = local_processes(build_plan(spec, CTX).stage("evaluate"), python="python")
    assert process.env == {"TFDIST_THREADS": str(len(available_cores())), "CUDA_VISIBLE_DEVICES": ""}
    assert (process.name, process.rank_tagged) == ("evaluate-0", False)


def test_a_process_with_its_own_thread_count_keeps_it_whatever_the_cores(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), training={"cpus_per_worker": 3}))
    assert threads_per_process(build_plan(spec, CTX).stage("train"), 64) == {"TFDIST_THREADS": "3"}
    default = build_plan(load_spec(make_spec(str(tmp_path))), CTX).stage("train")
    assert threads_per_process(default, 10**6) == {"TFDIST_THREADS": "1"}  # never none


def test_each_worker_has_a_host_name_of_its_own_for_127_0_0_1_and_sees_its_own_gpus():
    assert local_host_names(3) == ["127.0.0.1", "127.0.0.01", "127.0.0.001"]
    assert {socket.inet_aton(h) for h in local_host_names(4)} == {socket.inet_aton("127.0.0.1")}
    assert devices(2, 2) == {"CUDA_VISIBLE_DEVICES": "2,3"} and devices(0, 0) == {"CUDA_VISIBLE_DEVICES": ""}
