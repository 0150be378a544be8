"""The kubernetes section (tfdist.spec.kubernetes): each role's pod settings over every pod's, the image required,
memory quantities in bytes."""

from __future__ import annotations

import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import load_spec
from tfdist.spec.kubernetes import KubernetesSpec, memory_bytes

KUBERNETES = {
    "pods": {"image": "registry.example.com/tfdist-worker:2.21", "node_selector": {"pool": "cpu"}},
    "roles": {"prepare": {"cpu": "2"}},
    "artifact_volume": {"claim_name": "artifacts"},
}


def test_a_runs_overrides_keep_each_roles_own_pod_settings(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), overridable=["training.epochs"], kubernetes=KUBERNETES))
    changed = spec.with_overrides({"training.epochs": 2})
    assert changed.kubernetes.for_role("prepare") == spec.kubernetes.for_role("prepare")
    assert changed.kubernetes.for_role("prepare").image == KUBERNETES["pods"]["image"]
    written = spec.to_json_dict()
    assert changed.to_json_dict() == {**written, "training": {**written["training"], "epochs": 2}}


def test_a_roles_pods_get_the_fields_it_sets_over_every_pods():
    section = KubernetesSpec.model_validate(
        {**KUBERNETES, "roles": {"ps": {"memory": "8Gi", "node_selector": {"pool": "big"}}, "worker": {}}}
    )
    ps = section.for_role("ps")
    assert (ps.image, ps.memory, ps.node_selector, ps.cpu) == (
        KUBERNETES["pods"]["image"],
        "8Gi",
        {"pool": "big"},
        None,
    )
    assert section.for_role("worker") == section.pods == section.for_role("chief")
    assert section.for_role("no such role") == section.pods


def test_every_pods_image_is_required_and_named(tmp_path):
    found = problems(make_spec(str(tmp_path), kubernetes={"pods": {"cpu": "1"}}))
    assert (
        "kubernetes.pods.image: required: the worker image every pod runs, e.g. registry.example.com/tfdist-worker:2.21"
    ) in found


@pytest.mark.parametrize(
    "quantity, count",
    [("8Gi", 8 * 2**30), ("512M", 512 * 10**6), ("1.5Gi", 3 * 2**29), ("100", 100), ("2k", 2000), ("3Ti", 3 * 2**40)],
)
def test_a_memory_quantity_in_bytes(quantity, count):
    assert memory_bytes(quantity) == count
