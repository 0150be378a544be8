"""operators/plan/stages.py: a stage's plan (members, elastic sizes, with_workers) and the Kubernetes placement
the plan resolves from the spec's kubernetes section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from tests.operators.plan.test_plan import CTX
from tests.support.specs import make_spec
from tfdist.operators.plan import build_plan
from tfdist.operators.plan.stages import PS_RUNTIME_BYTES, Horovod, kubernetes_placement, ps_memory
from tfdist.spec import ROLES, KubernetesSpec, PodSettings, Spec, load_spec
from tfdist.spec.sizing import tables_per_pod


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


def test_a_parameter_server_stage_has_a_serving_chief_and_ps_and_restarts_lost_workers_in_place(tmp_path):
    training = {"strategy": "parameter_server", "num_ps": 2, "num_workers": 3, "gpus_per_worker": 1, "max_restarts": 4}
    stage = build_plan(load_spec(make_spec(str(tmp_path), training=training)), CTX).stage("train")
    assert [m.name for m in stage.members] == ["chief-0", "ps-0", "ps-1", "worker-0", "worker-1", "worker-2"]
    assert (stage.sync, stage.servers, stage.worker_restarts) == ("tf_cluster", ("ps", "worker"), 4)
    assert (stage.workers, stage.gpus_per_worker) == (3, 1)
    assert [m.name for m in stage.with_workers(1).members] == ["chief-0", "ps-0", "ps-1", "worker-0"]


def test_a_horovod_stage_runs_slots_per_worker_ranks_and_mpirun_arguments_ask_for_mpirun(tmp_path):
    def train(mpi: dict, workers: int = 2):
        spec = load_spec(make_spec(str(tmp_path), training={"backend": "mpi", "num_workers": workers, "mpi": mpi}))
        return build_plan(spec, CTX).stage("train")

    stage = train({"slots_per_worker": 4}, workers=1)  # 4 ranks, as many as the data has shards
    assert (stage.sync, stage.slots, stage.horovod, stage.servers) == ("horovod", 4, Horovod(None), ())
    assert train({"extra_args": ["-x", "A=1"]}).horovod == Horovod("mpi", ("-x", "A=1"))
    assert train({"controller": "gloo"}).horovod == Horovod("gloo")


def test_only_the_train_stage_has_heartbeats_and_checkpoints_and_every_stage_its_result_file(tmp_path):
    plan = build_plan(load_spec(make_spec(str(tmp_path))), CTX)
    train = plan.stage("train")
    assert (train.heartbeat_dir, train.checkpoint_dir) == (train.args.heartbeats, plan.layout.checkpoint_dir)
    assert train.heartbeat_dir.startswith(plan.layout.run_dir)
    for stage in plan.stages:
        assert stage.result_file == stage.args.result_file and stage.result_file.startswith(plan.layout.run_dir)
        if stage.task_id != "train":
            assert (stage.heartbeat_dir, stage.checkpoint_dir, stage.workers, stage.gpus_per_worker) == ("", "", 0, 0)


def test_without_a_kubernetes_section_a_run_has_no_placement(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    assert kubernetes_placement(spec) is None
    assert all(stage.kubernetes is None for stage in build_plan(spec, CTX).stages)


BUCKET = "s3://ml-artifacts/tfdist"
"""An artifact root in an object store: no volume to claim."""


def test_a_ps_pod_without_a_memory_gets_twice_its_tables_and_the_runtime_in_mib():
    training = {"strategy": "parameter_server", "num_ps": 2}
    spec = load_spec(make_spec(BUCKET, training=training, kubernetes={"pods": {"image": IMAGE}}))
    mib = -(-(2 * tables_per_pod(spec) + PS_RUNTIME_BYTES) // 2**20)
    assert ps_memory(spec) == f"{mib}Mi" == kubernetes_placement(spec).pods["ps"].memory
    assert kubernetes_placement(spec).pods["worker"].memory is None
    given = load_spec(make_spec(BUCKET, training=training, kubernetes={"pods": {"image": IMAGE, "memory": "4Gi"}}))
    assert kubernetes_placement(given).pods["ps"].memory == "4Gi"
