"""Binary and regression tasks with numeric (some missing), string, int64, hashed and list categorical features,
trained for real in every mode through the local launcher: MultiWorkerMirrored, parameter server, Horovod (fixed
and elastic), the tables by the Keras optimizer or a sparse one (``model.embedding_optimizer``). The data:
tests/trainer/prepared_tables.py, rows with a planted signal prepared by prepare_data."""

from __future__ import annotations

import re

import pytest

from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tests.trainer import prepared_tables as tabular
from tfdist.contract.progress import TrainProgress, read_curve
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json

pytestmark = pytest.mark.e2e

WIDE_DEEP = {
    "family": "wide_deep",
    "hidden_units": [32],
    "learning_rate": 0.01,
    "crosses": [{"features": ["country", "device"], "hash_buckets": 64}, {"features": ["store", "recent"]}],
}
MLP = {"family": "mlp", "hidden_units": [32], "learning_rate": 0.01}
MODES = {
    "mirrored": {"num_workers": 2},
    "parameter server": {"strategy": "parameter_server", "num_ps": 1, "num_workers": 2},
    "horovod": {"backend": "mpi", "mpi": {"controller": "gloo"}},
    "horovod elastic": {"backend": "mpi", "min_workers": 1},
}
METRICS = {"binary": ["accuracy", "auc"], "regression": ["rmse"]}
DIGEST = re.compile(r"^\[(rank-\d+)\] rank-\d+: done at step \d+; weights sha256 (\w+);")


def tabular_plan(root: str, run_id: str, task: str, training: dict, model: dict, n: int = 3000, seed: int = 0):
    """A run's plan with ``n`` rows of ``task`` prepared as its data."""
    sections = {
        "data": tabular.data_section(task),
        "model": model,
        "training": {"epochs": 6, "summary_every_steps": 20, **training},
        "validation": tabular.VALIDATION[task],
    }
    plan = plan_for(root, run_id, DAY, **sections)
    tabular.prepare(plan, n, seed)
    return plan


@pytest.mark.extended
@pytest.mark.parametrize(
    ("mode", "task", "model"),
    [
        ("mirrored", "binary", {**WIDE_DEEP, "embedding_optimizer": "lazy_adam"}),
        ("mirrored", "regression", MLP),
        ("parameter server", "binary", MLP),
        ("parameter server", "regression", {**WIDE_DEEP, "embedding_optimizer": "adagrad"}),
        ("horovod", "binary", {**MLP, "embedding_optimizer": "lazy_adam"}),
        ("horovod", "regression", WIDE_DEEP),
        ("horovod elastic", "binary", {**WIDE_DEEP, "embedding_optimizer": "lazy_adam"}),
    ],
)
def test_each_mode_trains_binary_and_regression_tasks_on_categorical_features(tmp_path, mode, task, model):
    plan = tabular_plan(str(tmp_path), f"{task}_{mode.replace(' ', '_')}", task, MODES[mode], model)
    _launcher, lines = run(plan, "train")
    result = read_json(plan.layout.result("train"))
    metrics = result["metrics"]
    assert sorted(metrics) == sorted(["loss", *METRICS[task]])
    if task == "binary":
        assert metrics["auc"] > 0.8 and metrics["accuracy"] > 0.7, metrics
    else:  # the target's deviation is about 20; the noise's 0.6
        assert metrics["rmse"] < 5, metrics
    assert result["loss_per_epoch"][-1] < result["loss_per_epoch"][0]

    progress = read_record(plan.layout.progress_file, TrainProgress)
    assert progress.step == result["final_step"] and sorted(progress.metrics) == METRICS[task]
    curve = read_curve(plan.layout.curve_file)
    assert [list(p.model_dump()) for p in curve[:1]] == [
        ["step", "loss", *METRICS[task], "examples_per_sec", "learning_rate"]
    ]
    assert curve[-1].step == result["final_step"]
    digests = dict(m.groups() for m in map(DIGEST.match, lines) if m)
    assert len(set(digests.values())) <= 1, f"ranks diverged: {digests}"
