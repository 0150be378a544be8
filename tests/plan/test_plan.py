"""The plan: pure data, argv lists, run-scoped paths, TF_CONFIG per worker, the printed plan."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import fields

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.launch import HOST_DISCOVERY_SCRIPT
from tfdist.contract.layout import run_key, run_path
from tfdist.operators import plan as plan_module
from tfdist.operators.launchers import processes as processes_module
from tfdist.operators.launchers.processes import local_processes
from tfdist.operators.plan import RunContext, StagePlan, build_plan, version_base
from tfdist.spec import ROLES, KubernetesSpec, PodSettings, Spec, load_spec
from tfdist.trainer.runtime import inter_op_threads

UTC = dt.UTC
CTX = RunContext(
    "digits_test",
    "scheduled__2026-11-20T00:00:00+00:00",
    dt.datetime(2026, 11, 20, tzinfo=UTC),
    dt.datetime(2026, 11, 21, tzinfo=UTC),
)


def one_argv(spec, stage: StagePlan, python: str = "python") -> list[str]:
    """The argv of the stage's one process, as the local launcher starts it."""
    (process,) = local_processes(stage, python=python)
    return list(process.argv)


def test_stages_and_run_scoped_paths(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    plan = build_plan(spec, CTX)
    assert [s.task_id for s in plan.stages] == ["prepare_data", "validate_data", "train", "evaluate", "export"]
    assert plan.layout.run_dir == f"{tmp_path}/digits_test/runs/{run_key(CTX.run_id)}"
    assert run_key(CTX.run_id).startswith("scheduled__2026-11-20T00_00_00_00_00-")
    for stage in plan.stages:
        for process in local_processes(stage, python="python"):
            assert isinstance(process.argv, tuple) and all(isinstance(a, str) for a in process.argv)
            assert process.argv[:2] == ("python", "-m")
            assert plan.layout.spec_file in process.argv
        assert type(stage.args).parse(stage.args.to_argv()) == stage.args  # what the stage's entry point reads
    prepare = one_argv(spec, plan.stage("prepare_data"))
    assert prepare[prepare.index("--source") + 1] == f"{tmp_path}/raw/digits/2026-11-20/*.csv"
    export = one_argv(spec, plan.stage("export"))
    assert export[export.index("--version-base") + 1] == "20261121000000" == str(version_base(CTX))


def test_window_lists_each_partition(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), data={"window": 3}))
    assert [s.split("/")[-2] for s in build_plan(spec, CTX).stage("prepare_data").args.source] == [
        "2026-11-18",
        "2026-11-19",
        "2026-11-20",
    ]


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


PARTITIONS = [  # schedule, source's partition path, data interval, window → the partitions read
    ("@hourly", "{date}/{hour}", (at(2026, 11, 20, 23), at(2026, 11, 21)), None, ["2026-11-20/23"]),
    (
        "@hourly",
        "{date}/{hour}",
        (at(2026, 11, 21, 1), at(2026, 11, 21, 2)),
        3,
        ["2026-11-20/23", "2026-11-21/00", "2026-11-21/01"],
    ),
    ("@hourly", "{date}", (at(2026, 11, 20, 5), at(2026, 11, 20, 6)), None, ["2026-11-20"]),
    ("@weekly", "{date}", (at(2026, 11, 15), at(2026, 11, 22)), None, [f"2026-11-{d}" for d in range(15, 22)]),
    ("@daily", "{year}/{month}/{day}", (at(2026, 12, 31), at(2027, 1, 1)), 2, ["2026/12/30", "2026/12/31"]),
    ("@monthly", "{year}-{month}", (at(2026, 11, 1), at(2026, 12, 1)), 3, ["2026-09", "2026-10", "2026-11"]),
    ("@daily", "all", (at(2026, 11, 20), at(2026, 11, 21)), 3, ["all"]),
]


@pytest.mark.parametrize("schedule, partition, interval, window, expected", PARTITIONS)
def test_a_run_reads_exactly_the_partitions_of_its_window_in_the_schedules_periods(
    tmp_path, schedule, partition, interval, window, expected
):
    spec = load_spec(
        make_spec(
            str(tmp_path),
            schedule=schedule,
            data={"source": f"{{artifact_root}}/raw/{partition}/part.csv", "window": window},
        )
    )
    sources = build_plan(spec, RunContext("d", "r", *interval)).stage("prepare_data").args.source
    assert list(sources) == [f"{tmp_path}/raw/{p}/part.csv" for p in expected]


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


AIRFLOW_RUN_IDS = st.from_regex(r"\A[A-Za-z0-9_.~:+-]{1,250}\Z")
"""Run ids Airflow's default ``allowed_run_id_pattern`` accepts (a run id is at most 250 characters)."""


def inside_runs_root(run_id: str) -> bool:
    root = os.path.join(os.sep, "artifacts", "dag", "runs")
    path = run_path(os.path.join(os.sep, "artifacts"), "dag", run_id)
    return os.path.dirname(os.path.normpath(path)) == root and os.path.basename(path) == run_key(run_id)


def test_run_key_keeps_a_readable_prefix_and_no_run_id_escapes_or_shares_a_directory():
    assert run_key("manual__2026-11-22T03:19:01.713668+00:00").startswith("manual__2026-11-22T03_19_01_713668_00_00-")
    for escape in ("..", ".", "../../x", "~"):  # a trigger chooses the run id
        assert run_key(escape) not in ("", ".", "..") and inside_runs_root(escape)
    # the scheduled run's id, and a triggered id that read the same once sanitized
    assert run_key("scheduled__2026-11-20T00:00:00+00:00") != run_key("scheduled__2026-11-20T00_00_00_00_00")


@pytest.mark.e2e
@settings(max_examples=500, deadline=None)
@given(AIRFLOW_RUN_IDS, AIRFLOW_RUN_IDS)
def test_distinct_run_ids_get_distinct_keys_inside_the_runs_directory(first, second):
    assert inside_runs_root(first) and len(run_key(first)) <= 255  # a file name's limit
    twin = re.sub(r"[^A-Za-z0-9_-]", "_", first)  # the same readable prefix as ``first``
    for other in (second, twin):
        assert (run_key(first) == run_key(other)) == (first == other)


@pytest.mark.e2e
def test_plan_command_prints_every_process_without_running_anything(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(make_spec(str(tmp_path))))
    out = subprocess.run(
        [sys.executable, "-m", "tfdist.operators.cli", "plan", str(spec_path), "--logical-date", "2026-11-20"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "data interval 2026-11-20T00:00:00+00:00 → 2026-11-21T00:00:00+00:00" in out
    assert '[worker-1] env TF_CONFIG={"cluster": {"worker": ["127.0.0.1:<free port>", "127.0.0.1:<free port>"]}' in out
    assert "task export: 1 process(es)" in out
    assert not (tmp_path / "digits_test").exists()


@pytest.mark.e2e
def test_validate_command_reports_field_errors(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(make_spec(str(tmp_path), training={"num_workers": 0})))
    result = subprocess.run(
        [sys.executable, "-m", "tfdist.operators.cli", "validate", str(spec_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "training.num_workers: Input should be greater than or equal to 1 (got 0)" in result.stderr


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


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "schedule, logical_date, interval",
    [
        ("@hourly", "2026-11-20T05:00", ("2026-11-20T05:00", "2026-11-20T06:00")),
        ("@weekly", "2026-11-15T00:00", ("2026-11-15T00:00", "2026-11-22T00:00")),  # Sunday to Sunday
        ("0 2 * * 1-5", "2026-11-20T02:00", ("2026-11-20T02:00", "2026-11-23T02:00")),  # Friday to Monday
        ("@daily", "2026-11-20T00:00", ("2026-11-20T00:00", "2026-11-21T00:00")),
    ],
)
def test_scheduled_interval_ends_at_the_next_tick(schedule, logical_date, interval):
    assert plan_module.scheduled_interval(schedule, at(logical_date), UTC) == (at(interval[0]), at(interval[1]))


@pytest.mark.parametrize(
    "schedule, run_after, interval",
    [
        ("@hourly", "2026-11-20T05:30", ("2026-11-20T04:00", "2026-11-20T05:00")),
        ("@hourly", "2026-11-20T05:00", ("2026-11-20T04:00", "2026-11-20T05:00")),
        ("@weekly", "2026-11-18T10:00", ("2026-11-08T00:00", "2026-11-15T00:00")),  # a Wednesday
        ("0 2 * * 1-5", "2026-11-21T12:00", ("2026-11-19T02:00", "2026-11-20T02:00")),  # a Saturday: Thu → Fri
        ("0 2 * * 1-5", "2026-11-23T01:00", ("2026-11-19T02:00", "2026-11-20T02:00")),  # Monday before 02:00
        (None, "2026-11-20T15:00", ("2026-11-19T00:00", "2026-11-20T00:00")),  # manual only: the last whole day
    ],
)
def test_manual_run_trains_on_the_last_complete_interval_as_airflow_infers_it(schedule, run_after, interval):
    expected = (at(interval[0]), at(interval[1]))
    assert plan_module.manual_interval(schedule, at(run_after), UTC) == expected
    if schedule:
        import pendulum
        from airflow.timetables.interval import CronDataIntervalTimetable

        timetable = CronDataIntervalTimetable(schedule, timezone="UTC")
        airflow = timetable.infer_manual_data_interval(run_after=pendulum.instance(at(run_after)))
        assert (airflow.start, airflow.end) == expected


def test_rank_tags_of_mpirun_and_horovodrun_output_are_split_per_rank():
    from tfdist.contract.launch import split_rank_tags

    assert split_rank_tags("mpirun-0", "[1,0]<stdout>:rank-0: step 10/88") == [("rank-0", "rank-0: step 10/88")]
    assert split_rank_tags("mpirun-0", "[1,1]<stderr>:warning[1,0]<stdout>:done") == [
        ("rank-1", "warning"),
        ("rank-0", "done"),
    ]
    assert split_rank_tags("horovodrun-0", "[0]<stdout>:rank-0: saved") == [("rank-0", "rank-0: saved")]
    assert split_rank_tags("mpirun-0", "mpirun noticed that process rank 1 exited") == [
        ("mpirun-0", "mpirun noticed that process rank 1 exited")
    ]
    assert split_rank_tags("mpirun-0", "[1,12]<stdout>:") == []


def test_an_elastic_tf_cluster_stage_carries_its_allowed_sizes_and_restart_bound(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), training={"num_workers": 4, "min_workers": 2, "max_restarts": 5}))
    stage = build_plan(spec, CTX).stage("train")
    assert (stage.elastic.sizes, stage.elastic.max_restarts) == ((4, 2), 5)
    assert stage.checkpoint_dir == build_plan(spec, CTX).layout.checkpoint_dir
    assert build_plan(load_spec(make_spec(str(tmp_path))), CTX).stage("train").elastic is None
    assert stage.with_workers(2).workers == 2 and [m.name for m in stage.with_workers(2).members] == [
        "worker-0",
        "worker-1",
    ]


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


IMAGE = "registry.example.com/tfdist-worker:2.21"
RESOLVED = {"pods", "roles", "artifact_volume"}
"""The kubernetes fields the plan resolves: pods and roles into each role's pods, the volume into its claim."""


def plain(value):
    """A plan's tuple or mapping as the spec's list or dict."""
    return list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value


def kubernetes_settings(spec: Spec) -> tuple[dict, dict]:
    """(the plan's Kubernetes settings by name, the following's among them; each role's pods' settings)."""
    placement = build_plan(spec, CTX).stage("train").kubernetes
    settings = {f.name: plain(getattr(placement, f.name)) for f in fields(placement) if f.name != "following"}
    settings |= {f.name: getattr(placement.following, f.name) for f in fields(placement.following)}
    pods = {role: {f.name: plain(getattr(p, f.name)) for f in fields(p)} for role, p in settings.pop("pods").items()}
    return settings, pods


def defaults(model) -> dict:
    return {name: f.get_default(call_default_factory=True) for name, f in model.model_fields.items()}


def test_each_kubernetes_setting_the_spec_leaves_out_is_the_spec_models_default_in_the_plan():
    """The spec model's field defaults are the only ones: a kubernetes section giving only the image plans every
    setting, and every role's pods, as the model's defaults (an artifact root in a bucket: no claim)."""
    spec = load_spec(make_spec("s3://ml-artifacts/tfdist", kubernetes={"pods": {"image": IMAGE}}))
    settings, pods = kubernetes_settings(spec)
    unresolved = {name: value for name, value in defaults(KubernetesSpec).items() if name not in RESOLVED}
    assert settings == {**unresolved, "artifact_claim": None, "artifact_root": "s3://ml-artifacts/tfdist"}
    assert pods == {role: {**defaults(PodSettings), "image": IMAGE} for role in ROLES}


EVERY_SETTING = {
    "connection_id": "k8s_ml",
    "namespace": "ml",
    "pods": {"image": IMAGE, "cpu": "4", "memory": "8Gi", "node_selector": {"pool": "cpu"}},
    "roles": {"worker": {"cpu": "8", "tolerations": [{"key": "gpu", "operator": "Exists"}], "affinity": {"a": 1}}},
    "image_pull_policy": "Always",
    "image_pull_secrets": ["registry"],
    "service_account": "tfdist-runner",
    "priority_class": "batch-high",
    "scheduler_name": "volcano",
    "labels": {"team": "ml"},
    "annotations": {"owner": "ml-platform"},
    "artifact_volume": {"claim_name": "tfdist-artifacts"},
    "credentials_secret": "store-credentials",
    "operator": "kubeflow",
    "startup_timeout_seconds": 60,
    "ttl_seconds_after_finished": 120,
    "log_members": 1,
}
"""A value other than the default for every field of the spec's kubernetes section."""


def test_the_plan_carries_every_kubernetes_setting_the_spec_gives(tmp_path):
    """Each setting reaches the plan as given ('log_members: all' as None), the roles' pods over 'pods'."""
    assert set(EVERY_SETTING) == set(KubernetesSpec.model_fields), "a value for every field"
    given = {name: value for name, value in EVERY_SETTING.items() if name not in RESOLVED}
    spec = load_spec(make_spec(str(tmp_path), kubernetes=EVERY_SETTING))
    settings, pods = kubernetes_settings(spec)
    assert settings == {**given, "artifact_claim": "tfdist-artifacts", "artifact_root": str(tmp_path)}
    everyone = {**defaults(PodSettings), **EVERY_SETTING["pods"]}
    assert pods == {role: {**everyone, **EVERY_SETTING["roles"].get(role, {})} for role in ROLES}
    every_log = load_spec(make_spec(str(tmp_path), kubernetes={**EVERY_SETTING, "log_members": "all"}))
    assert kubernetes_settings(every_log)[0]["log_members"] is None
