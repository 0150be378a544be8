"""operators/launchers/base.py: how a failure reads, which elastic restart follows a loss, its record, and the
run loop every launcher shares."""

from __future__ import annotations

import pydantic
import pytest

from tests.operators.plan.test_plan import CTX
from tests.support.logs import collecting_logger
from tests.support.specs import make_spec
from tfdist.operators.launchers.base import (
    ElasticRestart,
    Launcher,
    StageFailed,
    failed_first,
    restart_record,
    shrunk,
)
from tfdist.operators.plan import StagePlan, build_plan
from tfdist.spec import load_spec


def elastic_train(tmp_path, **training) -> StagePlan:
    """The train stage of a real plan: 4 workers, continuing with 3 or 2 (a global batch of 120 splits evenly),
    at most 2 restarts."""
    elastic = {"num_workers": 4, "min_workers": 2, "max_restarts": 2, "global_batch_size": 120}
    return build_plan(load_spec(make_spec(str(tmp_path), training={**elastic, **training})), CTX).stage("train")


@pytest.mark.parametrize(
    "returncode, how",
    [(3, "exited with code 3"), (-9, "was killed by signal 9"), (None, "stopped serving before the stage was done")],
)
def test_a_failure_says_how_the_process_ended_then_every_sources_last_lines(returncode, how):
    failure = StageFailed("worker-1", returncode, {"worker-1": ["boom"], "worker-0": ["step 3", "step 4"]})
    assert failure.summary == f"worker-1 {how}"
    assert str(failure) == f"worker-1 {how}\n[worker-1] last lines:\n  boom\n[worker-0] last lines:\n  step 3\n  step 4"


def test_a_failure_told_how_and_with_a_detail_reads_so_and_names_what_was_lost():
    failure = StageFailed("worker-1 (pod p)", 137, {}, how="was disrupted", detail="Job j failed", lost=("worker-1",))
    assert failure.summary == "worker-1 (pod p) was disrupted; Job j failed"
    assert (failure.returncode, failure.lost, failure.process) == (137, ("worker-1",), "worker-1 (pod p)")


def test_failed_first_puts_the_failed_sources_lines_first_and_keeps_the_others_in_order():
    tails = {"chief-0": ["a"], "worker-0": ["b"], "worker-1": ["c"]}
    ordered = failed_first(dict(tails), "worker-0")
    assert list(ordered.items()) == [("worker-0", ["b"]), ("chief-0", ["a"]), ("worker-1", ["c"])]
    assert failed_first({"chief-0": ("a",)}, "worker-3") == {"worker-3": [], "chief-0": ["a"]}


def test_an_elastic_stage_shrinks_to_the_largest_allowed_size_of_the_workers_it_has_left(tmp_path):
    stage = elastic_train(tmp_path)  # sizes 4, 3, 2
    assert shrunk(stage, ("worker-1",), [], stage.elastic).workers == 3
    assert shrunk(stage, ("worker-1", "worker-3"), [], stage.elastic).workers == 2
    assert [m.name for m in shrunk(stage, ("worker-3",), [], stage.elastic).members] == [
        "worker-0",
        "worker-1",
        "worker-2",
    ]
    even = elastic_train(tmp_path, global_batch_size=64)  # sizes 4, 2: 3 workers would split 64 unevenly
    assert shrunk(even, ("worker-3",), [], even.elastic).workers == 2


def test_a_stage_may_not_continue_unelastic_without_a_loss_past_its_restarts_or_below_its_minimum(tmp_path):
    stage = elastic_train(tmp_path)
    assert shrunk(stage, ("worker-1",), [], None) is None
    assert shrunk(stage, (), [], stage.elastic) is None
    assert shrunk(stage, ("worker-1",), [{}, {}], stage.elastic) is None  # max_restarts 2 used up
    assert shrunk(stage, ("worker-0", "worker-1", "worker-2"), [], stage.elastic) is None  # 1 left, 2 at least


def test_a_lost_chief_or_parameter_server_restarts_the_cluster_at_the_same_size(tmp_path):
    stage = elastic_train(tmp_path, strategy="parameter_server", num_ps=1)
    assert shrunk(stage, ("ps-0",), [], stage.elastic).members == stage.members


def test_a_restart_is_logged_and_recorded_with_what_was_measured(tmp_path):
    stage = elastic_train(tmp_path)
    log, lines = collecting_logger("restart_record")
    restarts = [ElasticRestart(restart=1, lost=["worker-4"], why="worker-4 gone")]
    change = restart_record(
        stage, stage.with_workers(3), ("worker-3",), "worker-3 gone", restarts, log, resumed_at_step=7
    )
    assert change.xcom() == {
        "restart": 2,
        "lost": ["worker-3"],
        "why": "worker-3 gone",
        "workers_before": 4,
        "workers_after": 3,
        "resumed_at_step": 7,
    }
    assert restarts[-1] is change and ElasticRestart.model_validate(change.xcom()) == change
    with pytest.raises(pydantic.ValidationError, match="workers_afer"):  # a renamed key fails where it is read
        ElasticRestart.model_validate({**change.xcom(), "workers_afer": 3})
    assert lines.lines == [
        "train: worker-3 gone; restarting the cluster with 3 of 4 workers from the checkpoint at step 7 "
        "(restart 2 of 2, training.max_restarts; the global batch is kept)"
    ]


class LosingWorkers(Launcher):
    """A launcher whose stage loses its last worker on each of the first ``losses`` tries."""

    def __init__(self, plan, losses: int) -> None:
        super().__init__(plan)
        self.losses, self.sizes = losses, []

    def run_once(self, stage, log, restarts):
        self.sizes.append(stage.workers)
        if len(self.sizes) <= self.losses:
            lost = f"worker-{stage.workers - 1}"
            raise StageFailed(lost, -9, {}, lost=(lost,))
        return {"status": "ok"}

    def stop(self) -> None:
        pass


def test_run_restarts_an_elastic_stage_with_the_workers_left_and_records_each_restart(tmp_path):
    stage = elastic_train(tmp_path)
    log, _ = collecting_logger("run")
    launcher = LosingWorkers(build_plan(load_spec(make_spec(str(tmp_path))), CTX), losses=2)
    result = launcher.run(stage, log)
    assert launcher.sizes == [4, 3, 2]
    assert result["status"] == "ok" and [r["workers_after"] for r in result["elastic_restarts"]] == [3, 2]
    assert "elastic_restarts" not in LosingWorkers(launcher.plan, losses=0).run(stage, log)
    with pytest.raises(StageFailed, match="worker-1 was killed by signal 9"):
        LosingWorkers(launcher.plan, losses=3).run(stage, log)  # a third loss: max_restarts 2 used up
