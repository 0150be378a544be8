"""The images and the RBAC in docker/: no Docker engine and no cluster here, so each Dockerfile is linted
with hadolint (settings in .hadolint.yaml) and checked against what the code needs, and the RBAC objects are
validated offline (strict) and checked to allow everything a run creates. Not checked: that the images
build (nothing here can run a Docker build) and that the RBAC is enforced as written."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tomllib

import kubernetes_validate
import pytest
import yaml

from operators.launchers.k8s_objects import stage_objects
from operators.plan import RunContext, build_plan
from operators.spec import load_spec
from tests.conftest import REPO, make_spec
from tests.test_kubernetes_objects import KUBERNETES, MODES

DOCKER = os.path.join(REPO, "docker")
DOCKERFILES = sorted(f for f in os.listdir(DOCKER) if f.startswith("Dockerfile"))
RESOURCES = {"Job": ("batch", "jobs"), "Service": ("", "services"), "TFJob": ("kubeflow.org", "tfjobs"),
             "MPIJob": ("kubeflow.org", "mpijobs")}


def read(name: str) -> str:
    with open(os.path.join(DOCKER, name)) as f:
        return f.read()


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_passes_hadolint(dockerfile):
    hadolint = shutil.which("hadolint") or os.path.join(REPO, ".venv", "bin", "hadolint")
    done = subprocess.run([hadolint, "--config", os.path.join(REPO, ".hadolint.yaml"), "--no-color",
                           os.path.join(DOCKER, dockerfile)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_there_is_a_cpu_worker_a_gpu_worker_and_an_airflow_image():
    assert DOCKERFILES == ["Dockerfile.airflow", "Dockerfile.worker", "Dockerfile.worker-gpu"]


@pytest.mark.parametrize("dockerfile", ["Dockerfile.worker", "Dockerfile.worker-gpu"])
def test_worker_images_hold_the_trainer_and_the_pinned_tensorflow_without_airflow(dockerfile):
    text = read(dockerfile)
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        trainer = tomllib.load(f)["project"]["optional-dependencies"]["trainer"]
    pinned = next(r for r in trainer if "tensorflow" in r)
    version = pinned.split("==")[1]
    assert [r for r in trainer if r not in text and r != pinned] == []  # the trainer's other requirements
    assert re.findall(r'"tensorflow(?:-cpu|\[and-cuda\])==([\d.]+)"', text) == [version, version]
    instructions = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "COPY trainer/ trainer/" in text and "build-horovod-wheel.sh" in text
    assert "airflow" not in instructions.lower() and "COPY operators/" not in instructions
    assert re.search(r"^USER 1000$", text, re.M)  # not root
    if dockerfile.endswith("gpu"):
        assert "HOROVOD_GPU_OPERATIONS=NCCL" in text and "libnccl2" in text


def test_airflow_image_installs_the_package_plugin_dags_and_the_kubernetes_provider():
    text = read("Dockerfile.airflow")
    assert re.search(r"^FROM apache/airflow:3\.3\.2-python3\.11$", text, re.M)
    assert '-c constraints.txt ".[kubernetes]"' in text  # the package with the provider, pinned by constraints
    assert "COPY --chown=airflow:root plugins/ /opt/airflow/plugins/" in text
    assert "COPY --chown=airflow:root dags/ /opt/airflow/dags/" in text


def rbac() -> list[dict]:
    with open(os.path.join(DOCKER, "rbac.yaml")) as f:
        return list(yaml.safe_load_all(f))


def test_rbac_objects_pass_the_kubernetes_schemas_in_strict_mode():
    for obj in rbac():
        kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.mark.parametrize("mode", MODES)
def test_the_role_allows_creating_following_and_deleting_everything_a_run_creates(mode):
    role = next(o for o in rbac() if o["kind"] == "Role")
    allowed = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    spec = load_spec(make_spec("/mnt/tfdist", training=MODES[mode], kubernetes=KUBERNETES))
    start = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)
    plan = build_plan(spec, RunContext(spec.name, "r", start, start + dt.timedelta(days=1)), python="python")
    kinds = {o["kind"] for s in plan.stages for kubeflow in (False, True)
             for o in stage_objects(plan, s, kubeflow=kubeflow)}
    for kind in kinds:
        group, resource = RESOURCES[kind]
        assert {(group, resource, v) for v in ("create", "get", "list", "delete")} <= allowed, kind
    assert {("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list")} <= allowed
    assert next(o for o in rbac() if o["kind"] == "Role")["metadata"]["namespace"] == KUBERNETES["namespace"]
