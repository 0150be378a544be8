"""Binary and regression tasks with numeric (some missing), string, int64, hashed and list categorical features,
trained for real in every mode through the local launcher: MultiWorkerMirrored, parameter server, Horovod (fixed
and elastic), the tables by the Keras optimizer or a sparse one (``model.embedding_optimizer``). The data:
tests/trainer/prepared_tables.py, rows with a planted signal prepared by prepare_data."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.conftest import DAY, plan_for, run
from tests.trainer import prepared_tables as tabular
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.progress import TrainProgress, read_curve
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.spec.model import EMBEDDING_BYTES_PER_VALUE
from tfdist.trainer.runtime import memory_limit
from tfdist.trainer.train import refuse_tables_over_memory

pytestmark = pytest.mark.e2e

WIDE_DEEP = {
    "family": "wide_deep",
    "hidden_units": [32],
    "learning_rate": 0.01,
    "crosses": [{"features": ["country", "device"], "hash_buckets": 64}, {"features": ["store", "recent"]}],
}
MLP = {"family": "mlp", "hidden_units": [32], "learning_rate": 0.01}
MODES = {
    "mirrored": {"num_workers": 2},
    "parameter server": {"strategy": "parameter_server", "num_ps": 1, "num_workers": 2},
    "horovod": {"backend": "mpi", "mpi": {"controller": "gloo"}},
    "horovod elastic": {"backend": "mpi", "min_workers": 1},
}
METRICS = {"binary": ["accuracy", "auc"], "regression": ["rmse"]}
DIGEST = re.compile(r"^\[(rank-\d+)\] rank-\d+: done at step \d+; weights sha256 (\w+);")


def tabular_plan(root: str, run_id: str, task: str, training: dict, model: dict, n: int = 3000, seed: int = 0):
    """A run's plan with ``n`` rows of ``task`` prepared as its data."""
    sections = {
        "data": tabular.data_section(task),
        "model": model,
        "training": {"epochs": 6, "summary_every_steps": 20, **training},
        "validation": tabular.VALIDATION[task],
    }
    plan = plan_for(root, run_id, DAY, **sections)
    tabular.prepare(plan, n, seed)
    return plan


@pytest.mark.extended
@pytest.mark.parametrize(
    ("mode", "task", "model"),
    [
        ("mirrored", "binary", {**WIDE_DEEP, "embedding_optimizer": "lazy_adam"}),
        ("mirrored", "regression", MLP),
        ("parameter server", "binary", MLP),
        ("parameter server", "regression", {**WIDE_DEEP, "embedding_optimizer": "adagrad"}),
        ("horovod", "binary", {**MLP, "embedding_optimizer": "lazy_adam"}),
        ("horovod", "regression", WIDE_DEEP),
        ("horovod elastic", "binary", {**WIDE_DEEP, "embedding_optimizer": "lazy_adam"}),
    ],
)
def test_each_mode_trains_binary_and_regression_tasks_on_categorical_features(tmp_path, mode, task, model):
    plan = tabular_plan(str(tmp_path), f"{task}_{mode.replace(' ', '_')}", task, MODES[mode], model)
    _launcher, lines = run(plan, "train")
    result = read_json(plan.layout.result("train"))
    metrics = result["metrics"]
    assert sorted(metrics) == sorted(["loss", *METRICS[task]])
    if task == "binary":
        assert metrics["auc"] > 0.8 and metrics["accuracy"] > 0.7, metrics
    else:  # the target's deviation is about 20; the noise's 0.6
        assert metrics["rmse"] < 5, metrics
    assert result["loss_per_epoch"][-1] < result["loss_per_epoch"][0]

    progress = read_record(plan.layout.progress_file, TrainProgress)
    assert progress.step == result["final_step"] and sorted(progress.metrics) == METRICS[task]
    curve = read_curve(plan.layout.curve_file)
    assert [list(p.model_dump()) for p in curve[:1]] == [
        ["step", "loss", *METRICS[task], "examples_per_sec", "learning_rate"]
    ]
    assert curve[-1].step == result["final_step"]
    digests = dict(m.groups() for m in map(DIGEST.match, lines) if m)
    assert len(set(digests.values())) <= 1, f"ranks diverged: {digests}"


@pytest.mark.skipif(memory_limit()[0] >= 96 * 2**30, reason="the machine has room for 48 GiB of tables")
def test_tables_too_large_for_the_memory_are_refused_before_training(tmp_path):
    """2^26 hash buckets of 64 values, weights and Adam's slots: 48 GiB, over half of this machine's memory."""
    features = [*tabular.FEATURES[:3], {"name": "device", "kind": "categorical", "hash_buckets": 2**26}]
    sections = {
        "data": tabular.data_section("binary", features),
        "model": MLP,
        "training": {"num_workers": 1},
        "validation": tabular.VALIDATION["binary"],
    }
    plan = plan_for(str(tmp_path), "too_large", DAY, **sections)
    tabular.prepare(plan, 400)
    with pytest.raises(StageFailed) as refused:
        run(plan, "train")
    assert refused.value.returncode == EXIT_REFUSED
    message = str(refused.value)
    assert "the tables of the categorical features need 49,152 MiB in this worker process" in message
    assert "(device 49,152 MiB, country 0 MiB)" in message
    assert "Lower vocabulary.max_tokens, hash_buckets or embedding_dim of data.features device, country" in message
    assert "or split the tables over parameter servers (training.strategy parameter_server)" in message
    assert not os.path.exists(plan.layout.checkpoint_dir)


@pytest.mark.parametrize("workers", ["TF_CONFIG", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_tables_that_fit_one_process_but_not_the_workers_on_one_host_are_refused(
    tmp_path, monkeypatch, capsys, workers
):
    """Hashed device ids sized to 35% of the memory in one process with Adam's slots; each of 2 workers (TF cluster
    members or Horovod ranks) on this host holds them all, 70% together. In process: a broken check would train."""
    available = memory_limit()[0]
    buckets = int(0.35 * available / (64 * EMBEDDING_BYTES_PER_VALUE))
    device = {"name": "device", "kind": "categorical", "hash_buckets": buckets, "embedding_dim": 64}
    sections = {
        "data": tabular.data_section("binary", [*tabular.FEATURES[:3], device]),
        "model": MLP,
        "training": {"num_workers": 2},
        "validation": tabular.VALIDATION["binary"],
    }
    plan = plan_for(str(tmp_path), "too_large_together", DAY, **sections)
    manifest = tabular.prepare(plan, 400)
    cluster = {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))  # one per host: fits
    refuse_tables_over_memory(plan.spec, manifest)
    if workers == "TF_CONFIG":
        cluster["cluster"]["worker"] = ["127.0.0.1:2222", "127.0.0.1:2223"]
        monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    else:
        monkeypatch.setenv(workers, "2")
    with pytest.raises(SystemExit) as refused:
        refuse_tables_over_memory(plan.spec, manifest)
    assert refused.value.code == EXIT_REFUSED
    each = round(buckets * 64 * EMBEDDING_BYTES_PER_VALUE / 2**20)
    message = capsys.readouterr().err
    found = re.search(
        r"need ([\d,]+) MiB in this worker process .*\(2 such processes on this host: ([\d,]+) MiB\)", message
    )
    assert found, message
    assert [int(n.replace(",", "")) for n in found.groups()] == pytest.approx([each, 2 * each], abs=1)
