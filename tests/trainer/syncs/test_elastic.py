"""Horovod elastic's choice and each rank's place on its machine (trainer/syncs/elastic.py), without a world; the
elastic training itself runs in tests/operators/launchers/local/test_faults_horovod_elastic.py and the tabular modes."""

from __future__ import annotations

import pytest

from tfdist.contract.launch import HOSTS_ENV
from tfdist.spec.training import TrainingSpec
from tfdist.trainer.syncs.elastic import elastic_run, elastic_slot

ELASTIC = {"backend": "mpi", "num_workers": 3, "min_workers": 1}


@pytest.mark.parametrize(
    ("training", "horovod_elastic", "elastic"),
    [
        (ELASTIC, "1", True),
        (ELASTIC, None, False),  # another launcher started the ranks: the fixed-size loop
        ({"backend": "mpi", "num_workers": 3}, "1", False),
        ({"num_workers": 3, "min_workers": 1}, "1", False),  # a TF cluster cannot resize
    ],
)
def test_a_rank_trains_elastic_when_the_spec_asks_and_horovodrun_started_it_elastic(
    monkeypatch, training, horovod_elastic, elastic
):
    if horovod_elastic is None:
        monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    else:
        monkeypatch.setenv("HOROVOD_ELASTIC", horovod_elastic)
    assert elastic_run(TrainingSpec(**training)) is elastic


@pytest.mark.parametrize(("hostname", "local_rank", "slot"), [("h0", 1, 1), ("h2", 0, 4), ("h2", 1, 5), ("h9", 1, 1)])
def test_an_elastic_ranks_slot_is_its_hosts_position_times_the_slots_plus_its_local_rank(
    monkeypatch, hostname, local_rank, slot
):
    """Each worker is a host of its own, 2 slots each; a host not in the list (another launcher's): the local rank."""
    monkeypatch.setenv(HOSTS_ENV, "h0:2,h1:2,h2:2")
    monkeypatch.setenv("HOROVOD_HOSTNAME", hostname)
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", str(local_rank))
    assert elastic_slot() == slot
