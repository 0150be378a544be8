"""The memory guard (trainer/memory_guard.py): a training whose tables would not fit the memory of its processes on
this host is refused before TensorFlow starts; the processes sharing a host counted from TF_CONFIG or Horovod."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tests.trainer import prepared_tables as tabular
from tests.trainer.test_tabular_training import MLP
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.operators.launchers import StageFailed
from tfdist.spec.sizing import EMBEDDING_BYTES_PER_VALUE
from tfdist.trainer.memory_guard import processes_on_this_host, refuse_tables_over_memory
from tfdist.trainer.runtime import memory_limit

HOROVOD_LOCAL_SIZES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE")


def cluster(workers: list[str], index: int = 0, role: str = "worker") -> dict:
    return {"cluster": {role: workers}, "task": {"type": role, "index": index}}


@pytest.mark.parametrize(
    ("config", "sharing"),
    [
        ({}, 1),  # a process alone
        (cluster(["10.0.0.1:2222", "10.0.0.2:2222"]), 1),
        (cluster(["127.0.0.1:2222", "127.0.0.1:2223", "10.0.0.2:2222"], index=1), 2),
        (cluster(["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.2:2223"], index=2, role="ps"), 2),
    ],
)
def test_the_processes_of_a_role_on_this_host_are_its_cluster_members_at_its_host(monkeypatch, config, sharing):
    for name in HOROVOD_LOCAL_SIZES:
        monkeypatch.delenv(name, raising=False)
    assert processes_on_this_host(config) == sharing


@pytest.mark.parametrize("name", HOROVOD_LOCAL_SIZES)
def test_horovods_local_ranks_share_the_host_whatever_the_tf_config(monkeypatch, name):
    for other in HOROVOD_LOCAL_SIZES:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "3")
    assert processes_on_this_host(cluster(["10.0.0.1:2222"])) == 3


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_with_parameter_servers_each_ps_is_refused_only_past_its_share_and_no_other_role_is_checked(
    tmp_path, monkeypatch, capsys
):
    """Hashed device ids sized to 70% of the memory with Adam's slots: each of 2 ps (on hosts of their own) holds
    half, and fits; 1 ps would hold them all. The chief and the workers hold no table. In process."""
    buckets = int(0.7 * memory_limit()[0] / (64 * EMBEDDING_BYTES_PER_VALUE))
    device = {"name": "device", "kind": "categorical", "hash_buckets": buckets, "embedding_dim": 64}
    sections = {
        "data": tabular.data_section("binary", [*tabular.FEATURES[:3], device]),
        "model": {**MLP, "embedding_optimizer": "lazy_adam"},  # a split table needs a sparse one
        "training": {"strategy": "parameter_server", "num_ps": 2, "num_workers": 1},
        "validation": tabular.VALIDATION["binary"],
    }
    plan = plan_for(str(tmp_path), "ps_share", DAY, **sections)
    manifest = tabular.prepare(plan, 400)
    for name in HOROVOD_LOCAL_SIZES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster(["10.0.0.1:2222", "10.0.0.2:2222"], role="ps")))
    refuse_tables_over_memory(plan.spec, manifest)
    one_ps = plan.spec.model_copy(update={"training": plan.spec.training.model_copy(update={"num_ps": 1})})
    for role in ("chief", "worker"):
        monkeypatch.setenv("TF_CONFIG", json.dumps(cluster(["10.0.0.1:2222"], role=role)))
        refuse_tables_over_memory(one_ps, manifest)
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster(["10.0.0.1:2222"], role="ps")))
    with pytest.raises(SystemExit) as refused:
        refuse_tables_over_memory(one_ps, manifest)
    assert refused.value.code == EXIT_REFUSED
    message = capsys.readouterr().err
    assert "in this ps process" in message and "add parameter servers (training.num_ps)" in message, message
