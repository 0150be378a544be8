"""Warm start from the baseline version, its lineage, and TensorBoard summaries: real training processes in each
mode (MultiWorkerMirrored, parameter server, Horovod) through the local launcher, on consecutive daily partitions
of the digits data. The live Airflow runs of three consecutive dates are in tests/dag/test_warm_start_dags.py."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.publishing.versions import published_metadata
from tests.support.plans import prepared_plan, run
from tests.support.specs import DAY
from tfdist.contract.data_records import Manifest
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.progress import read_curve
from tfdist.contract.records import read_record
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.publishing import registry

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

WARM = {"warm_start": "baseline", "summary_every_steps": 20, "epochs": 3}
GATE = {"thresholds": {"accuracy": {"lower": 0.5}}}
EXPORT = {"model_name": "warm_start"}
MODES = {
    "mirrored, 1 worker": {"num_workers": 1},
    "mirrored, 2 workers": {"num_workers": 2},
    "horovod": {"backend": "mpi", "mpi": {"controller": "gloo"}},
    "parameter server": {"strategy": "parameter_server", "num_ps": 1},
}


def train(
    root: str,
    run_id: str,
    day: dt.date,
    mode: str,
    *,
    publish: bool = True,
    model: dict | None = None,
    training: dict | None = None,
):
    """One run of ``mode`` warm-started from the baseline on ``day``'s partition: trained, evaluated and (with
    ``publish``) exported; its plan and warm-start record."""
    sections = {"model": model} if model else {}
    plan = prepared_plan(
        root,
        run_id,
        day,
        training={**WARM, **MODES[mode], **(training or {})},
        validation=GATE,
        export=EXPORT,
        **sections,
    )
    for task_id in ("train", "evaluate", "export") if publish else ("train",):
        run(plan, task_id)
    return plan, read_json(plan.layout.warm_start_file)


def parent_weights(plan, version: dict) -> list[str]:
    """The weight digests of ``version``'s kept training checkpoint, restored here into the spec's model, in the
    model's order (Keras names this process's second model's layers otherwise)."""
    from tfdist.trainer.models import restore_model
    from tfdist.trainer.runtime import import_tensorflow
    from tfdist.trainer.warm_start import weight_digests

    model, _ = restore_model(
        import_tensorflow(),
        plan.spec,
        read_record(plan.layout.manifest_file, Manifest),
        plan.layout.data_dir,
        registry.warm_start_checkpoint(version["path"]),
    )
    return [digest for _, digest in weight_digests(model)]


def digests(record: dict) -> list[str]:
    """The weight digests a warm-start record names, in the model's order."""
    return [digest for _, digest in record["weights"]]


@pytest.fixture(scope="module")
def first(digits_root):
    """Day 1: no baseline yet, a cold start, published as the first version."""
    plan, record = train(digits_root, "warm_day1", DAY - dt.timedelta(days=2), "mirrored, 1 worker")
    (version,) = published_metadata(plan.model_dir)
    return plan, record, version


def tensorboard_scalars(logdir: str) -> dict[str, dict[int, float]]:
    """Every scalar in ``logdir``'s event files, read back by the tensorboard package's own reader."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    events = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.TENSORS: 0})
    events.Reload()
    assert {events.SummaryMetadata(tag).plugin_data.plugin_name for tag in events.Tags()["tensors"]} == {"scalars"}
    return {
        tag: {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)}
        for tag in events.Tags()["tensors"]
    }


def test_each_mode_warm_starts_from_the_version_live_as_of_its_interval_with_lineage(first):
    day1, cold, v1 = first
    root = day1.spec.artifact_root
    assert cold["parent"] is None and cold["cold_start"] == "no baseline: nothing published as of this data interval"
    assert v1["parent"] is None and v1["warm_start"]["cold_start"] == cold["cold_start"]

    day2, record = train(root, "warm_day2", DAY - dt.timedelta(days=1), "horovod")
    assert record["parent"]["version"] == v1["version"] and record["restored"] == "model and optimizer"
    assert digests(record) == parent_weights(day2, v1)  # the weights restored are the parent's
    assert read_json(day2.layout.result("train"))["warm_start"]["parent_version"] == v1["version"]
    v2 = published_metadata(day2.model_dir)[-1]
    assert v2["parent"] == {"version": v1["version"], "run_id": "warm_day1"}
    assert read_json(day2.layout.result("export"))["parent_version"] == v1["version"]  # the Asset event's extra

    day3, record = train(root, "warm_day3", DAY, "parameter server")
    assert record["parent"]["version"] == v2["version"]
    assert digests(record) == parent_weights(day3, v2)
    v3 = published_metadata(day3.model_dir)[-1]
    assert [m.version for m in registry.lineage(day3.model_dir, v3["version"])] == [
        v3["version"],
        v2["version"],
        v1["version"],
    ]

    # a backfill of day 1's interval, run after day 3 published: it starts from what was live then, v1
    backfill, record = train(
        root, "warm_backfill_day1", DAY - dt.timedelta(days=2), "mirrored, 2 workers", publish=False
    )
    assert record["parent"]["version"] == v1["version"]
    assert digests(record) == parent_weights(backfill, v1)

    # TensorBoard: the chief's scalars every 20 steps and at the last, the same values as the page's curve
    curve = read_curve(day2.layout.curve_file)
    scalars = tensorboard_scalars(day2.layout.tensorboard("train"))
    assert sorted(scalars) == ["accuracy", "examples_per_sec", "learning_rate", "loss"]
    steps = read_json(day2.layout.result("train"))["final_step"]
    assert sorted(scalars["loss"]) == [p.step for p in curve] == [*range(20, steps, 20), steps]
    assert [round(scalars["loss"][p.step], 4) for p in curve] == [round(p.loss, 4) for p in curve]
    assert list(scalars["learning_rate"].values()) == pytest.approx([0.003 * 2] * len(curve))  # this run's: 2 ranks
    evaluated = tensorboard_scalars(day2.layout.tensorboard("eval"))
    assert evaluated["accuracy"] == {
        read_json(day2.layout.blessing_file)["step"]: pytest.approx(
            read_json(day2.layout.blessing_file)["metrics"]["accuracy"]
        )
    }
    # the warm start shows: its first 20 steps' loss is far below the cold run's first 20
    assert curve[0].loss < read_curve(day1.layout.curve_file)[0].loss / 2


def test_a_wider_model_starts_cold_naming_the_variables_or_is_refused(first):
    day1, _, v1 = first
    root, day = day1.spec.artifact_root, DAY - dt.timedelta(days=2)
    wider = {"family": "mlp", "hidden_units": [96], "learning_rate": 0.003}
    _plan, record = train(root, "warm_wider", day, "mirrored, 1 worker", publish=False, model=wider)
    assert record["parent"] is None and record["cold_start"].startswith(
        f"3 variable(s) of the model do not match baseline version {v1['version']}: "
    )
    assert "/kernel (model/_operations/4/_kernel) [64, 96] here, [64, 64] in the parent" in record["cold_start"]
    assert len(record["mismatched"]) == 3  # the wider layer's kernel and bias, the next layer's kernel
    assert digests(record) != parent_weights(day1, v1)

    with pytest.raises(StageFailed) as refused:
        train(
            root,
            "warm_wider_fail",
            day,
            "mirrored, 1 worker",
            publish=False,
            model=wider,
            training={"warm_start": {"from": "baseline", "on_mismatch": "fail"}},
        )
    assert refused.value.returncode == EXIT_REFUSED
    assert "refusing to start cold (training.warm_start.on_mismatch is fail)" in str(refused.value)

    sgd = {"family": "mlp", "hidden_units": [64], "learning_rate": 0.003, "optimizer": "sgd"}
    _plan, record = train(root, "warm_sgd", day, "mirrored, 1 worker", publish=False, model=sgd)
    assert record["parent"]["version"] == v1["version"] and record["restored"] == "model (another optimizer)"
