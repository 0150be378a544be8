"""trainer/pod.py's pieces, in this process: a pod's place and TF_CONFIG from its completion index, peers waited
for by name, an MPI hostfile's hosts, the environment mpirun passes on, and the hang watch over heartbeats (the
pod's objects and its run as the entrypoint: tests/launchers/kubernetes/test_kubernetes_objects.py)."""

from __future__ import annotations

import json

import pytest

from tfdist.contract.progress import Beat
from tfdist.trainer import pod


def test_each_completion_index_has_its_role_and_every_peer_its_name_under_the_jobs_service():
    assert pod.members("chief=1,ps=1,worker=2") == [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    config = json.loads(pod.pod_tf_config("train", "chief=1,ps=1,worker=2", 3, port=2222))
    assert config == {
        "cluster": {
            "chief": ["train-0.train:2222"],
            "ps": ["train-1.train:2222"],
            "worker": ["train-2.train:2222", "train-3.train:2222"],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_peers_that_resolve_are_waited_for_no_longer_and_missing_ones_are_named(capsys):
    pod.wait_for_peers(["localhost"], timeout=0)
    with pytest.raises(SystemExit) as exit_:
        pod.wait_for_peers(["localhost", "no-such-peer.invalid"], timeout=0)
    assert exit_.value.code == 1
    assert "ERROR: peers not resolvable after 0 s: no-such-peer.invalid" in capsys.readouterr().err


def test_a_hostfiles_hosts_skip_its_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# the workers\nw-0.job slots=2\n\n  # w-9.job slots=2\nw-1.job slots=2\n")
    assert pod.hostfile_hosts(str(path)) == ["w-0.job", "w-1.job"]


def test_mpirun_passes_on_the_environment_by_name_but_the_pods_own_records_and_mpi_settings():
    environ = {"PATH": "/bin", "AWS_ROLE_ARN": "arn", "HOSTNAME": "launcher", "OMPI_MCA_x": "1", "KUBERNETES_PORT": "1"}
    argv = pod.forwarding_environment(["mpirun", "-np", "2", "python"], environ)
    assert argv == ["mpirun", "-x", "AWS_ROLE_ARN", "-x", "PATH", "-np", "2", "python"]
    assert "arn" not in argv  # names only: no value in argv


def test_the_hang_watch_reports_the_member_silent_longest_once_none_stepped_within_the_timeout():
    beats: dict[str, Beat] = {}
    watch = pod.HangWatch(lambda: beats, timeout=60, scan_seconds=0)
    assert not watch.hung({})  # no beat yet: a starting cluster is bounded by its own timeouts
    watch.since -= 100  # the stage started 100 s ago; its members last stepped 30 and 40 s ago
    beats.update({"worker-0": Beat(watch.since + 70, 1, 10), "worker-1": Beat(watch.since + 60, 2, 9)})
    beats["worker-2"] = Beat(watch.since - 1, 3, 0)  # a beat from before the stage started is not its own
    assert not watch.hung({}) and watch.report is None  # stepped within the minute
    watch.timeout = 20
    assert watch.hung({})
    assert watch.report.startswith("worker-1 made no training progress for 20 s (training.hang_timeout_seconds)")
    assert "worker-2" not in watch.report
