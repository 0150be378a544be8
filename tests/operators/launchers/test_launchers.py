"""operators/launchers/__init__.py: the launcher a plan names."""

from __future__ import annotations

from tests.operators.launchers.kubernetes.test_objects import KUBERNETES, plan_of
from tests.operators.plan.test_plan import CTX
from tests.support.specs import make_spec
from tfdist.operators.launchers import get_launcher
from tfdist.operators.launchers.kubernetes import KubernetesLauncher
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.plan import build_plan
from tfdist.spec import load_spec


def test_each_try_gets_the_launcher_its_plan_names(tmp_path):
    local = get_launcher(build_plan(load_spec(make_spec(str(tmp_path))), CTX), 3)
    assert type(local) is LocalLauncher and local.try_number == 3
    spec = load_spec(make_spec("/mnt/tfdist", training={"launcher": "kubernetes"}, kubernetes=KUBERNETES))
    kubernetes = get_launcher(plan_of(spec))
    assert type(kubernetes) is KubernetesLauncher and (kubernetes.try_number, kubernetes.plan.launcher) == (
        1,
        "kubernetes",
    )
