"""The Kubernetes objects of a run (``tfdist plan --launcher kubernetes``) and the training pods' entrypoint.

No Kubernetes API server can be had here: the objects are checked offline against the Kubernetes API's own
schemas in strict mode (kubernetes-validate, any misspelt or misplaced key fails) and Kubeflow's TFJob and
MPIJob CRD schemas (tests/fixtures/k8s-schemas, additional properties refused). Not modelled: admission,
the Job controller's behaviour (success and pod failure policies are asserted as written, not run).

The objects run for real on the stand-in cluster in tests/operators/launchers/kubernetes/test_kubernetes_launcher.py."""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.processes import wait_for
from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract import launch, progress
from tfdist.contract.launch import SCRATCH_ENV
from tfdist.contract.records import read_record
from tfdist.contract.train_records import RunRecord
from tfdist.infra import stopping
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.cli import main as cli
from tfdist.operators.launchers.kubernetes.objects import (
    NAME_MAX,
    SCRATCH_MOUNT,
    label_value,
    object_name,
    stage_objects,
)
from tfdist.operators.plan import RunContext, build_plan
from tfdist.spec import Spec, SpecError, load_spec, override_refusal
from tfdist.trainer import pod

KUBERNETES = {
    "namespace": "ml",
    "pods": {"image": "registry.example.com/tfdist-worker:2.21", "cpu": "4", "memory": "8Gi"},
    "roles": {"worker": {"node_selector": {"gpu": "yes"}, "cpu": "8"}},
    "artifact_volume": {"claim_name": "tfdist-artifacts"},
    "service_account": "tfdist-runner",
    "image_pull_secrets": ["registry"],
    "labels": {"team": "ml"},
}
MODES = {
    "mirrored": {"num_workers": 4},
    "parameter_server": {"strategy": "parameter_server", "num_ps": 2, "num_workers": 2, "gpus_per_worker": 1},
    "horovod_gloo": {"backend": "mpi", "num_workers": 2, "mpi": {"controller": "gloo", "slots_per_worker": 2}},
    "horovod_mpi": {
        "backend": "mpi",
        "num_workers": 2,
        "gpus_per_worker": 2,
        "mpi": {"slots_per_worker": 2, "extra_args": ["-x", "NCCL_DEBUG=INFO"]},
    },
}
RUN_ID = "scheduled__2026-11-20T00:00:00+00:00"
IN_THE_BUCKET = {**KUBERNETES, "artifact_volume": None, "credentials_secret": "store-credentials"}
"""The artifact root in an object store: no volume, the store's credentials from a Secret."""
SCHEMAS = os.path.join(REPO, "tests", "fixtures", "k8s-schemas")


def plan_of(spec: Spec):
    """The plan of RUN_ID, the run of 2026-11-20."""
    start = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    return build_plan(spec, RunContext(spec.name, RUN_ID, start, start + dt.timedelta(days=1)))


def k8s_plan(tmp_path, mode: str):
    spec = load_spec(make_spec("/mnt/tfdist", training=MODES[mode], kubernetes=KUBERNETES))
    return spec, plan_of(spec)


def closed(schema: dict) -> dict:
    """The schema with additional properties refused wherever it lists properties (the CRD schemas allow
    them, so a misspelt key would pass)."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [closed(v) for v in schema]
    return schema


def crd_errors(obj: dict) -> list[str]:
    name = {"TFJob": "tfjob-v1", "MPIJob": "mpijob-v2beta1"}[obj["kind"]]
    with open(os.path.join(SCHEMAS, f"{name}.schema.json")) as f:
        schema = closed(json.load(f))
    return [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]


@pytest.mark.e2e
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers", [1, 8])
def test_every_object_of_every_stage_passes_the_kubernetes_schemas_in_strict_mode(tmp_path, mode, workers):
    """For Kubernetes 1.31 (the oldest with every feature used GA) and the newest schemas bundled."""
    spec = load_spec(
        make_spec(
            "/mnt/tfdist",
            training={**MODES[mode], "num_workers": workers},
            kubernetes=KUBERNETES,
            data={"num_shards": 16},
        )
    )
    plan = plan_of(spec)
    for stage in plan.stages:
        for kubeflow in (False, True):
            for obj in stage_objects(plan, stage, kubeflow=kubeflow):
                if obj["kind"] in ("TFJob", "MPIJob"):
                    assert crd_errors(obj) == [], (stage.task_id, obj["kind"])
                    continue
                for version in ("1.31", kubernetes_validate.latest_version()):
                    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("mode", ["parameter_server", "horovod_mpi"])
def test_with_a_bucket_root_pods_mount_only_their_scratch_and_take_credentials_from_the_secret(mode):
    """No artifact volume: every pod (each stage's, the TFJob's or MPIJob's) has an emptyDir scratch, the Secret's
    keys as its environment, TFDIST_SCRATCH naming the scratch (an MPIJob's launcher hands it on to the ranks with the
    rest of its environment); the objects pass the schemas in strict mode."""
    spec = load_spec(
        make_spec(
            "s3://ml-artifacts/tfdist", training=MODES[mode], kubernetes={**IN_THE_BUCKET, "operator": "kubeflow"}
        )
    )
    plan = plan_of(spec)
    templates = []
    for stage in plan.stages:
        for obj in stage_objects(plan, stage):
            if obj["kind"] == "Job":
                kubernetes_validate.validate(obj, "1.31", strict=True)
                templates.append(obj["spec"]["template"]["spec"])
    (kubeflow,) = stage_objects(plan, plan.stage("train"), kubeflow=True)
    assert crd_errors(kubeflow) == []
    replicas = kubeflow["spec"].get("tfReplicaSpecs") or kubeflow["spec"]["mpiReplicaSpecs"]
    templates += [r["template"]["spec"] for r in replicas.values()]
    for template in templates:
        (container,) = template["containers"]
        assert template["volumes"] == [{"name": "scratch", "emptyDir": {}}] and "securityContext" not in template
        assert container["volumeMounts"] == [{"name": "scratch", "mountPath": SCRATCH_MOUNT}]
        assert container["envFrom"] == [{"secretRef": {"name": "store-credentials"}}]
        if container["name"] != "worker":  # an MPIJob's workers run sshd alone
            assert {"name": SCRATCH_ENV, "value": SCRATCH_MOUNT} in container["env"]


def test_strict_validation_catches_a_misspelt_key(tmp_path):
    _spec, plan = k8s_plan(tmp_path, "parameter_server")
    _service, job = stage_objects(plan, plan.stage("train"))
    job["spec"]["sucessPolicy"] = job["spec"].pop("successPolicy")
    with pytest.raises(kubernetes_validate.ValidationError, match="sucessPolicy"):
        kubernetes_validate.validate(job, "1.33", strict=True)
    (tfjob,) = stage_objects(plan, plan.stage("train"), kubeflow=True)
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["replica"] = 2
    assert any("replica" in e for e in crd_errors(tfjob))


def test_parameter_server_job_succeeds_with_the_chief_and_each_index_knows_its_role(tmp_path):
    spec, plan = k8s_plan(tmp_path, "parameter_server")
    service, job = stage_objects(plan, plan.stage("train"))
    name = job["metadata"]["name"]
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 5 and job["spec"]["completionMode"] == "Indexed"
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["subdomain"] == service["metadata"]["name"] == name and pod_spec["restartPolicy"] == "Never"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}
    command = pod_spec["containers"][0]["command"]
    cluster = command[command.index("--cluster") + 1]
    roles = [json.loads(pod.pod_tf_config(name, cluster, k))["task"] for k in range(5)]
    assert roles == [
        {"type": "chief", "index": 0},
        {"type": "ps", "index": 0},
        {"type": "ps", "index": 1},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    config = json.loads(pod.pod_tf_config(name, cluster, 3))
    assert config["cluster"]["worker"] == [f"{name}-3.{name}:2222", f"{name}-4.{name}:2222"]
    # the pod runs the same training command as a local cluster member, through tfdist.trainer.pod, watching for hangs
    assert command[command.index("--") + 1 :] == plan.stage("train").args.command("python")
    assert command[command.index("--heartbeats") :][:4] == [
        "--heartbeats",
        plan.layout.heartbeat_dir,
        "--hang-timeout",
        str(spec.training.hang_timeout_seconds),
    ]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onPodConditions"][0]["type"] == "DisruptionTarget" and rules[1]["action"] == "FailJob"
    resources = pod_spec["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": 1}
    assert pod_spec["nodeSelector"] == {"gpu": "yes"}


def test_single_process_stages_are_one_pod_jobs_without_a_service(tmp_path):
    """Each pod records the run itself (spec and run record from its environment) and hands its result
    record back as the termination message: the Airflow side never touches the volume."""
    spec, plan = k8s_plan(tmp_path, "mirrored")
    for task_id in ("prepare_data", "evaluate", "export"):
        stage = plan.stage(task_id)
        (job,) = stage_objects(plan, stage)
        assert job["spec"]["completions"] == 1 and "successPolicy" not in job["spec"]
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == [
            "python",
            "-m",
            "tfdist.trainer.pod",
            "--run-dir",
            plan.layout.run_dir,
            "--result",
            stage.result_file,
            "--",
            *stage.args.command("python"),
        ]
        assert stage.result_file == plan.layout.result(task_id)
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["volumeMounts"] == [{"name": "artifacts", "mountPath": "/mnt/tfdist"}]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TFDIST_THREADS"] == "4" and "TFDIST_CORES" not in env  # the pod's CPUs, not this machine's
        assert json.loads(env["TFDIST_SPEC"]) == spec.to_json_dict()
        assert json.loads(env["TFDIST_RUN"]) == plan.run_record().payload()


def test_horovod_pods_start_their_ranks_themselves_and_kubeflow_mpijob_runs_mpirun(tmp_path):
    _spec, plan = k8s_plan(tmp_path, "horovod_mpi")
    stage = plan.stage("train")
    _service, job = stage_objects(plan, stage)
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["python", "-m", "tfdist.trainer.pod"] and "mpirun" not in command
    assert command[command.index("--horovod-slots") + 1] == "2" and command[command.index("--pods") + 1] == "2"
    assert command[command.index("--") + 1 :] == stage.args.command("python")
    assert job["spec"]["completions"] == 2 and container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {e["name"]: e["value"] for e in container["env"]}["TFDIST_THREADS"] == "4"  # 8 CPUs, 2 ranks
    (mpijob,) = stage_objects(plan, stage, kubeflow=True)
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    mpirun = launcher["command"][launcher["command"].index("--") + 1 :]
    assert mpirun[:3] == ["mpirun", "-np", "4"] and "NCCL_DEBUG=INFO" in mpirun
    assert mpijob["spec"]["slotsPerWorker"] == 2 and mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    # mpirun waits for the workers' names; the launcher pod hands the ranks its environment (sshd gives them none)
    assert launcher["command"][launcher["command"].index("--hostfile") + 1] == "/etc/mpi/hostfile"
    assert [mpirun[i + 1] for i, arg in enumerate(mpirun) if arg == "-x"] == ["NCCL_DEBUG=INFO"]  # the spec's own
    assert {"TFDIST_THREADS", "PYTHONUNBUFFERED", "TFDIST_SPEC"} <= {e["name"] for e in launcher["env"]}
    # the workers' sshd runs as the image's user, with its config; the job's key pair goes to its ~/.ssh
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["/usr/sbin/sshd", "-De", "-f", "/home/tfdist/.sshd_config"]
    assert launcher["securityContext"] == worker["securityContext"] == {"runAsUser": 1000}
    with open(os.path.join(REPO, "docker", "sshd_config")) as f:
        sshd = dict(line.split(None, 1) for line in f.read().splitlines() if line and not line.startswith("#"))
    assert sshd["HostKey"] == f"{mpijob['spec']['sshAuthMountPath']}/id_rsa" and sshd["StrictModes"] == "no"
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# comment\njob-worker-0.job.ml.svc slots=2\n\njob-worker-1.job.ml.svc slots=2\n")
    assert pod.hostfile_hosts(str(hostfile)) == ["job-worker-0.job.ml.svc", "job-worker-1.job.ml.svc"]


def test_tfjob_replicas_follow_the_cluster_roles(tmp_path):
    _spec, plan = k8s_plan(tmp_path, "parameter_server")
    (tfjob,) = stage_objects(plan, plan.stage("train"), kubeflow=True)
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "PS": 2, "Worker": 2}
    assert {v["template"]["spec"]["containers"][0]["name"] for v in replicas.values()} == {"tensorflow"}
    assert "nvidia.com/gpu" not in replicas["PS"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    # finished pods stay until the stage is followed to its end: the chief's holds the result record
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_names_are_dns_labels_stable_per_stage_and_distinct_per_run():
    long_dag, odd_run = "Team_A." + "x" * 200, "manual__2026-11-20T10:11:12.123456+00:00/../Ω"
    names = {
        object_name(dag, run, task)
        for dag in (long_dag, "digits")
        for run in (odd_run, RUN_ID)
        for task in ("prepare_data", "validate_data", "train", "evaluate", "export")
    }
    assert len(names) == 20
    for name in names:
        assert len(name) <= NAME_MAX and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
        assert len(f"{name}-63") <= 63  # each pod's host name
    assert object_name("digits", RUN_ID, "train") == object_name("digits", RUN_ID, "train")
    for value in (long_dag, odd_run, RUN_ID, "digits"):
        label = label_value(value)
        assert len(label) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", label)
    assert label_value("digits") == "digits" and label_value(RUN_ID) != label_value(RUN_ID.replace("+", "-"))


def test_kubernetes_section_is_validated_and_never_overridable():
    with pytest.raises(SpecError, match=r"kubernetes\.pods\.image: required"):
        load_spec(make_spec("/mnt/tfdist", kubernetes={**KUBERNETES, "pods": {"cpu": "2"}}))
    with pytest.raises(SpecError, match=r"data\.source: pods on Kubernetes see only the artifact volume"):
        load_spec(make_spec("/mnt/tfdist", kubernetes=KUBERNETES, data={"source": "/elsewhere/{date}.csv"}))
    with pytest.raises(SpecError, match=r"kubernetes\.pods\.cpu: String should match pattern"):
        load_spec(make_spec("/mnt/tfdist", kubernetes={**KUBERNETES, "pods": {"image": "x", "cpu": "four"}}))
    assert "where, as whom and from which image" in override_refusal(Spec, "kubernetes.pods.image")


def test_plan_command_prints_the_objects_as_yaml_documents(tmp_path, capsys):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec("/mnt/tfdist", training=MODES["mirrored"], kubernetes=KUBERNETES)))
    assert cli(["plan", str(spec_file), "--launcher", "kubernetes", "--logical-date", "2026-11-20"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    _spec, plan = k8s_plan(tmp_path, "mirrored")
    expected = [obj for stage in plan.stages for obj in stage_objects(plan, stage)]
    assert documents == expected and [d["kind"] for d in documents] == ["Job", "Job", "Service", "Job", "Job", "Job"]
    spec_file.write_text(yaml.safe_dump(make_spec("/mnt/tfdist")))
    assert cli(["plan", str(spec_file), "--launcher", "kubernetes"]) == 2
    assert "kubernetes: required to plan a run on Kubernetes" in capsys.readouterr().err


def test_an_mpijob_launcher_passes_its_environment_on_to_the_ranks_but_not_its_host_nor_the_runs_records():
    environ = {
        "PATH": "/usr/bin",
        "TFDIST_THREADS": "4",
        "AWS_ROLE_ARN": "arn:aws:iam::1:role/tfdist",
        "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
        "HOSTNAME": "train-launcher",
        "TFDIST_SPEC": "{}",
        "TFDIST_RUN": "{}",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    }
    argv = pod.forwarding_environment(["mpirun", "-np", "4", "python", "-m", "tfdist.trainer.train"], environ)
    assert argv == [
        "mpirun",
        *("-x", "AWS_ROLE_ARN", "-x", "AWS_WEB_IDENTITY_TOKEN_FILE", "-x", "PATH", "-x", "TFDIST_THREADS"),
        *("-np", "4", "python", "-m", "tfdist.trainer.train"),
    ]


def test_an_mpijob_launcher_reading_beats_over_ssh_counts_a_worker_it_cannot_reach_as_none():
    assert pod.remote_beats(["worker-0.nowhere.invalid", "worker-1.nowhere.invalid"], "/tmp/heartbeats")() == {}


def test_a_pod_whose_peers_never_resolve_fails_naming_them():
    with pytest.raises(SystemExit):
        pod.wait_for_peers(["localhost", "peer-1.nowhere.invalid"], timeout=0.5)


def test_a_training_pod_reports_its_stopped_process_or_the_member_silent_longest(tmp_path, monkeypatch):
    """tfdist.trainer.pod's HangWatch: a process of its own stopped (SIGSTOP) for STOPPED_SECONDS; else, once no
    member of the stage has stepped for the hang timeout, the one silent longest."""
    monkeypatch.setattr(pod, "STOPPED_SECONDS", 0.5)
    heartbeats = str(tmp_path / "heartbeats")
    os.makedirs(heartbeats)
    watch = pod.HangWatch(functools.partial(progress.last_beats, heartbeats), timeout=10)
    watch.since -= 60
    for member, age in (("worker-0", 12), ("worker-1", 15)):
        progress.beat(heartbeats, member, 40)
        os.utime(os.path.join(heartbeats, member), (time.time() - age,) * 2)
    assert watch.hung({"worker-0": os.getpid()})
    assert watch.report == (
        "worker-1 made no training progress for 10 s (training.hang_timeout_seconds): the others "
        "wait for it: worker-0 last stepped 12 s ago, worker-1 last stepped 15 s ago"
    )
    progress.beat(heartbeats, "worker-0", 41)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        watch = pod.HangWatch(functools.partial(progress.last_beats, heartbeats), timeout=10)
        assert not watch.hung({"worker-1": sleeper.pid})
        sleeper.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopping.is_stopped(sleeper.pid), 5, "the signal to stop it")
        assert not watch.hung({"worker-1": sleeper.pid})  # seen stopped from now on
        time.sleep(0.6)
        assert watch.hung({"worker-1": sleeper.pid})
        assert watch.report == f"worker-1 is stopped: its process {sleeper.pid} has been stopped (SIGSTOP) for 0.5 s"
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.e2e
def test_the_pod_entrypoint_records_the_run_and_hands_back_the_result_record(tmp_path):
    """tfdist.trainer.pod writes spec.json and run.json from its environment, runs the command, and writes the
    stage's result record as the termination message; a run directory of another spec is refused."""
    spec, plan = k8s_plan(tmp_path, "mirrored")
    run_dir, message = str(tmp_path / "run"), tmp_path / "termination-log"
    result = os.path.join(run_dir, "train", "result.json")
    write = (
        f"import json, os; os.makedirs({os.path.dirname(result)!r}); "
        f"json.dump({{'final_step': 7}}, open({result!r}, 'w'))"
    )
    run = json.dumps(plan.run_record().payload())
    env = {**os.environ, "TFDIST_SPEC": json.dumps(spec.to_json_dict()), "TFDIST_RUN": run}
    argv = launch.pod_argv(sys.executable, run_dir, result, [sys.executable, "-c", write])
    done = subprocess.run([*argv[:3], "--message", str(message), *argv[3:]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(message.read_text()) == {"final_step": 7}
    assert read_json(os.path.join(run_dir, "spec.json")) == spec.to_json_dict()
    assert read_record(os.path.join(run_dir, "run.json"), RunRecord) == plan.run_record()
    other = {**env, "TFDIST_SPEC": json.dumps({**spec.to_json_dict(), "name": "other"})}
    refused = subprocess.run(argv, env=other, capture_output=True, text=True)
    assert refused.returncode == launch.EXIT_REFUSED and "produced from a different spec" in refused.stderr
    with pytest.raises(ValueError, match="exceeds 4096"):
        launch.encode_result({"x": "y" * 5000})


def test_ps_pods_without_a_memory_are_sized_by_their_tables():
    """A TFJob's PS pods get, as request and limit, twice a ps task's share of the tables (at least the largest piece
    it holds whole) plus 1 GiB; a memory given is kept, one too small for the tables refused naming the field."""
    user = {"name": "user", "kind": "categorical", "hash_buckets": 100_000, "embedding_dim": 16}
    item = {"name": "item", "kind": "categorical", "hash_buckets": 2_000_000, "embedding_dim": 8}
    pods = {"image": "registry.example.com/tfdist-worker:2.21", "cpu": "4"}

    def ps_resources(features: list[dict], roles: dict) -> dict:
        spec = load_spec(
            make_spec(
                "/mnt/tfdist",
                data={"features": [{"name": "pixel", "shape": [64]}, *features]},
                model={"family": "wide_deep", "embedding_optimizer": "lazy_adam"},
                training=MODES["parameter_server"],  # 2 ps
                kubernetes={**KUBERNETES, "pods": pods, "roles": roles},
            )
        )
        plan = plan_of(spec)
        (tfjob,) = stage_objects(plan, plan.stage("train"), kubeflow=True)
        replicas = tfjob["spec"]["tfReplicaSpecs"]
        assert "memory" not in replicas["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        return replicas["PS"]["template"]["spec"]["containers"][0]["resources"]

    def sized(share: int) -> dict:
        memory = f"{-(-(2 * share + 2**30) // 2**20)}Mi"
        return {"requests": {"cpu": "4", "memory": memory}, "limits": {"cpu": "4", "memory": memory}}

    def table(ids: int, width: int) -> int:
        return ids * width * 12  # the float32 weight and Adam's 2 slots

    # ids × 16 (6.4 MB of weights, under twice shard_min_bytes: one piece) and wide_deep's ids × 10 classes
    assert ps_resources([user], {}) == sized(table(100_000, 16)) == sized(19_200_000)
    # item's tables are split in 2 (a shard on each ps): an even share is the most a ps holds, under item's wide table
    tables = table(100_000, 16) + table(100_000, 10) + table(2_000_000, 8) + table(2_000_000, 10)
    assert ps_resources([user, item], {}) == sized(tables // 2) == sized(231_600_000)
    assert ps_resources([user], {"ps": {"memory": "2Gi"}})["limits"]["memory"] == "2Gi"
    with pytest.raises(SpecError, match=r"kubernetes\.roles\.ps\.memory"):
        ps_resources([user], {"ps": {"memory": "32Mi"}})
