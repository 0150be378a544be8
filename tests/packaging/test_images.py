"""The images and the RBAC in docker/: no Docker engine and no cluster here, so each Dockerfile is linted
with hadolint (settings in .hadolint.yaml) and checked against what the code needs, and the RBAC objects are
validated offline (strict) and checked to allow everything a run creates. Not checked: that the images
build (nothing here can run a Docker build) and that the RBAC is enforced as written."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.operators.launchers.kubernetes.test_objects import KUBERNETES, MODES
from tests.packaging.test_packaging import requirement_names
from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.contract.stages import worker_command
from tfdist.operators.launchers.kubernetes.objects import stage_objects
from tfdist.operators.plan import RunContext, build_plan
from tfdist.spec import load_spec

DOCKER = os.path.join(REPO, "docker")
DOCKERFILES = sorted(f for f in os.listdir(DOCKER) if f.startswith("Dockerfile"))
RESOURCES = {
    "Job": ("batch", "jobs"),
    "Service": ("", "services"),
    "TFJob": ("kubeflow.org", "tfjobs"),
    "MPIJob": ("kubeflow.org", "mpijobs"),
}


def read(name: str) -> str:
    with open(os.path.join(DOCKER, name)) as f:
        return f.read()


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_passes_hadolint(dockerfile):
    hadolint = shutil.which("hadolint") or os.path.join(REPO, ".venv", "bin", "hadolint")
    done = subprocess.run(
        [hadolint, "--config", os.path.join(REPO, ".hadolint.yaml"), "--no-color", os.path.join(DOCKER, dockerfile)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_there_is_a_cpu_worker_a_gpu_worker_and_an_airflow_image():
    assert DOCKERFILES == ["Dockerfile.airflow", "Dockerfile.worker", "Dockerfile.worker-gpu"]


def instructions(name: str) -> str:
    return "\n".join(line for line in read(name).splitlines() if not line.startswith("#"))


def installs_the_wheel(text: str, extra: str) -> int:
    """How often ``text`` installs the wheel that ``make wheel`` built, with ``extra``, pinned by constraints."""
    return len(
        re.findall(
            r"pip install --no-cache-dir -c \S+/constraints\.txt\s+(?:\\\s+)?"
            rf'"\$\(ls \S+/dist/airflow_tfdist-\*\.whl\)\[{extra}\]"',
            text,
        )
    )


@pytest.mark.parametrize("dockerfile, extra", [("Dockerfile.worker", "cpu"), ("Dockerfile.worker-gpu", "gpu")])
def test_worker_images_install_the_wheel_with_their_extra_and_horovod_without_airflow(dockerfile, extra):
    text = instructions(dockerfile)
    assert installs_the_wheel(text, extra) == 2  # Horovod is built against the TensorFlow the image runs
    assert "build-horovod-wheel.sh" in text and "horovod-*.whl" in text
    assert not any(name.startswith("apache-airflow") for name in requirement_names(extra))
    assert "COPY trainer/" not in text and "COPY operators/" not in text and "PYTHONPATH" not in text
    cmd = json.loads(re.search(r"^CMD (.+)$", text, re.M)[1])
    assert cmd == [*worker_command("python", "pod"), "--help"]
    assert re.search(r"^USER 1000$", text, re.M)  # not root
    if extra == "gpu":
        assert "HOROVOD_GPU_OPERATIONS=NCCL" in text and "libnccl2" in text


def test_airflow_image_installs_the_wheel_with_the_kubernetes_provider_and_copies_no_plugin_or_dag():
    text = instructions("Dockerfile.airflow")
    with open(os.path.join(REPO, "constraints.txt")) as f:
        airflow = re.search(r"^apache-airflow==(.+)$", f.read(), re.M)[1]
    assert re.search(rf"^FROM apache/airflow:{re.escape(airflow)}-python3\.11$", text, re.M)
    assert installs_the_wheel(text, "kubernetes") == 1
    assert "apache-airflow-providers-cncf-kubernetes" in requirement_names("kubernetes")
    assert "plugins/" not in text and "dags/" not in text and "COPY operators/" not in text


def rbac() -> list[dict]:
    with open(os.path.join(DOCKER, "rbac.yaml")) as f:
        return list(yaml.safe_load_all(f))


def test_rbac_objects_pass_the_kubernetes_schemas_in_strict_mode():
    for obj in rbac():
        kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.mark.parametrize("mode", MODES)
def test_the_role_allows_creating_following_and_deleting_everything_a_run_creates(mode):
    role = next(o for o in rbac() if o["kind"] == "Role")
    allowed = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    spec = load_spec(make_spec("/mnt/tfdist", training=MODES[mode], kubernetes=KUBERNETES))
    start = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    plan = build_plan(spec, RunContext(spec.name, "r", start, start + dt.timedelta(days=1)))
    kinds = {
        o["kind"] for s in plan.stages for kubeflow in (False, True) for o in stage_objects(plan, s, kubeflow=kubeflow)
    }
    for kind in kinds:
        group, resource = RESOURCES[kind]
        assert {(group, resource, v) for v in ("create", "get", "list", "delete")} <= allowed, kind
    assert {("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list")} <= allowed
    assert next(o for o in rbac() if o["kind"] == "Role")["metadata"]["namespace"] == KUBERNETES["namespace"]
