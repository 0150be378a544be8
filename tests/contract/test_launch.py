"""How a stage's processes are started and report back (tfdist.contract.launch): a member's TF_CONFIG, rank tags,
the mpirun argv, the pod's argv and its termination message."""

from __future__ import annotations

import json

import pytest

from tfdist.contract.launch import (
    RESULT_MAX_BYTES,
    encode_result,
    mpirun_argv,
    pod_argv,
    rank_tag,
    split_rank_tags,
    tf_config,
)


def test_a_members_tf_config_names_every_member_and_its_own_task():
    cluster = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]}
    assert json.loads(tf_config(cluster, "worker", 1)) == {"cluster": cluster, "task": {"type": "worker", "index": 1}}


def test_a_rank_tag_is_split_back_to_its_rank():
    line = f"{rank_tag(3)}step 5{rank_tag(0)}saved"
    assert rank_tag(3) == "[3]<stdout>:"
    assert split_rank_tags("horovodrun-0", line) == [("rank-3", "step 5"), ("rank-0", "saved")]
    assert split_rank_tags("mpirun-0", "  ") == []


def test_mpirun_starts_the_ranks_unbound_tagged_with_extra_args_before_the_command():
    assert mpirun_argv(2, ["py", "-m", "x"]) == [
        "mpirun", "-np", "2", "--bind-to", "none", "--map-by", "slot", "--tag-output", "py", "-m", "x",
    ]  # fmt: skip
    assert mpirun_argv(4, ("c",), hosts="a:2,b:2", extra_args=("--mca", "btl", "self"), as_root=True) == [
        "mpirun", "-np", "4", "-H", "a:2,b:2", "--bind-to", "none", "--map-by", "slot", "--tag-output",
        "--allow-run-as-root", "--mca", "btl", "self", "c",
    ]  # fmt: skip


def test_a_result_record_is_one_compact_line_and_one_too_long_for_a_termination_message_is_refused():
    assert encode_result({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    fits = {"x": "y" * (RESULT_MAX_BYTES - len('{"x":""}'))}
    assert len(encode_result(fits)) == RESULT_MAX_BYTES
    with pytest.raises(ValueError, match=f"^result record of {RESULT_MAX_BYTES + 1} bytes exceeds {RESULT_MAX_BYTES}"):
        encode_result({"x": "y" * (RESULT_MAX_BYTES + 1 - len('{"x":""}'))})


def test_a_pods_argv_records_the_run_then_runs_the_command_as_a_member_or_as_ranks():
    base = ["py", "-m", "tfdist.trainer.pod", "--run-dir", "/r", "--result", "/r/train/result.json"]
    assert pod_argv("py", "/r", "/r/train/result.json", ["cmd"]) == [*base, "--", "cmd"]
    as_member = pod_argv(
        "py", "/r", "/r/train/result.json", ("cmd", "-x"), job="j", cluster={"chief": 1, "worker": 2},
        heartbeats="/r/train/heartbeats", hang_timeout=60, hostfile="/etc/mpi/hostfile",
    )  # fmt: skip
    assert as_member == [
        *base, "--heartbeats", "/r/train/heartbeats", "--hang-timeout", "60", "--hostfile", "/etc/mpi/hostfile",
        "--job", "j", "--cluster", "chief=1,worker=2", "--", "cmd", "-x",
    ]  # fmt: skip
    as_ranks = pod_argv("py", "/r", "/res", ["cmd"], job="j", horovod_slots=2, pods=3, heartbeats="/h")
    assert as_ranks[-8:] == ["--job", "j", "--horovod-slots", "2", "--pods", "3", "--", "cmd"]
    assert "--heartbeats" not in as_ranks  # no hang timeout, no watch
