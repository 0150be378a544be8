"""The launcher interface."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import Field

from tfdist.contract.records import Part, Record
from tfdist.operators.plan import Elastic, Plan, StagePlan

TAIL_LINES = 40
"""How many of each source's last output lines a failure shows."""


class StageLog(Protocol):
    """Where a launcher logs: the task's logger (Airflow's), its trigger's, or any ``StageLog``."""

    def debug(self, msg: str, /, *args: Any) -> Any: ...
    def info(self, msg: str, /, *args: Any) -> Any: ...
    def warning(self, msg: str, /, *args: Any) -> Any: ...


class StageFailed(RuntimeError):
    """A process of the stage failed. ``tails`` holds the last output lines of every source that printed
    (each process, or each rank of an mpirun/horovodrun process), the failed one first; ``how`` replaces
    the account given by the return code, ``detail`` follows it. ``lost`` names the processes that did not fail
    by their own decision (killed by a signal, stopped, hung): an elastic stage may continue without them."""

    def __init__(
        self,
        process: str,
        returncode: int | None,
        tails: Mapping[str, Sequence[str]],
        *,
        how: str | None = None,
        detail: str | None = None,
        lost: tuple[str, ...] = (),
    ):
        self.process, self.returncode, self.tails, self.lost = process, returncode, tails, lost
        if how is None and returncode is None:
            how = "stopped serving before the stage was done"
        elif how is None and returncode is not None:
            how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
        blocks = [f"[{name}] last lines:\n" + "\n".join(f"  {line}" for line in lines) for name, lines in tails.items()]
        self.summary = f"{process} {how}" + (f"; {detail}" if detail else "")
        super().__init__(self.summary + "\n" + "\n".join(blocks))


class ElasticRestart(Part):
    """One restart of a stage that lost members, an item of the train task's XCom ``elastic_restarts``: the
    cluster restarted with the workers left, or (``in_place``) a lost parameter-server worker started again. What a
    launcher does not measure is None, and left out of the XCom."""

    restart: int
    """Its number in this run of the stage, from 1."""
    lost: list[str]
    why: str
    in_place: bool = False
    workers_before: int | None = None
    workers_after: int | None = None
    lost_at_step: int | None = None
    """The furthest step a training process had beaten when the loss was seen."""
    resumed_at_step: int | None = None
    """The step of the checkpoint the restarted cluster resumes from."""
    stopped_at: float | None = None
    """When the cluster that lost members was stopped (Unix time)."""
    restarted_at: float | None = None
    """When the lost worker was started again (``in_place``; Unix time)."""
    seconds_to_recover: float | None = None
    """From ``stopped_at`` to the restarted cluster's first step."""

    def xcom(self) -> dict[str, Any]:
        """The record as the XCom holds it: only what was measured."""
        return self.model_dump(mode="json", exclude_defaults=True)


def with_restarts(result: dict[str, Any], restarts: Sequence[ElasticRestart]) -> dict[str, Any]:
    """The stage's result record, with the elastic restarts before it (``elastic_restarts``) if there were any."""
    return {**result, "elastic_restarts": [r.xcom() for r in restarts]} if restarts else result


class StageEvent(Record):
    """What a deferred stage's trigger reports to its task (its TriggerEvent's payload, as JSON): the stage's result
    record (``status`` success; with the elastic restarts before it in its ``elastic_restarts``), or its failure
    (``status`` failed): the return code, the message and its summary, the members lost, the elastic restarts
    before (``restarts``; ``result`` is then {}). Payloads from before the model (no schema version) read."""

    status: Literal["success", "failed"]
    result: dict[str, Any] = Field(default_factory=dict)
    returncode: int | None = None
    message: str = ""
    summary: str = ""
    lost: list[str] = Field(default_factory=list)
    restarts: list[ElasticRestart] = Field(default_factory=list)

    @classmethod
    def succeeded(cls, result: dict[str, Any], restarts: Sequence[ElasticRestart]) -> StageEvent:
        return cls(status="success", result=with_restarts(result, restarts))

    @classmethod
    def failed(cls, failure: StageFailed, restarts: Sequence[ElasticRestart]) -> StageEvent:
        return cls(
            status="failed",
            returncode=failure.returncode,
            message=str(failure),
            summary=failure.summary,
            lost=list(failure.lost),
            restarts=list(restarts),
        )


def failed_first(tails: dict, name: str) -> dict[str, list[str]]:
    """Every source's last lines, the failed one's first."""
    return {name: list(tails.pop(name, [])), **{n: list(t) for n, t in tails.items()}}


class StageStopped(RuntimeError):
    """The launcher was asked to stop (e.g. the task's on_kill) before the stage was done."""


def shrunk(
    stage: StagePlan, lost: tuple[str, ...], restarts: list[ElasticRestart], elastic: Elastic | None
) -> StagePlan | None:
    """The elastic stage to restart after losing the members ``lost``: the workers it has left, at the largest
    size allowed (a lost chief or parameter server: the same size); None when it may not continue (not
    ``elastic``, nothing lost, ``max_restarts`` used up, too few left)."""
    if elastic is None or not lost or len(restarts) >= elastic.max_restarts:
        return None
    left = stage.workers - len({m.name for m in stage.members if m.role == "worker"} & set(lost))
    size = next((n for n in elastic.sizes if n <= left), None)
    return None if size is None else stage.with_workers(size)


def restart_record(
    stage: StagePlan,
    smaller: StagePlan,
    lost: tuple[str, ...],
    why: str,
    restarts: list[ElasticRestart],
    log: StageLog,
    **measured: Any,
) -> ElasticRestart:
    """Log an elastic restart and add its record to ``restarts``; ``measured``: the launcher's ``measure_loss``."""
    change = ElasticRestart(
        restart=len(restarts) + 1,
        lost=list(lost),
        why=why,
        workers_before=stage.workers,
        workers_after=smaller.workers,
        **measured,
    )
    log.warning(
        "%s: %s; restarting the cluster with %d of %d workers from the %s (restart %d of %d, "
        "training.max_restarts; the global batch is kept)",
        stage.task_id,
        why,
        smaller.workers,
        stage.workers,
        "latest checkpoint" if change.resumed_at_step is None else f"checkpoint at step {change.resumed_at_step}",
        change.restart,
        stage.elastic.max_restarts if stage.elastic else 0,
    )
    restarts.append(change)
    return change


class Launcher(abc.ABC):
    """Realizes the stages of one run's plan on a platform, for one try of a task."""

    outlives_task = False
    """Whether the stage's processes run on when the task process ends (else they end with it)."""

    def __init__(self, plan: Plan, try_number: int = 1) -> None:
        self.plan, self.try_number = plan, try_number

    def start_deferred(self, stage: StagePlan, log: StageLog, store: Any) -> Any | None:
        """Start the stage (or find the one an earlier try of the task started, by the identity kept in the
        task's state ``store``) and return the trigger that follows it to its end; None when the stage's
        processes live and die with the task process (then call ``run``)."""
        return None

    def continue_deferred(self, stage: StagePlan, event: StageEvent, log: StageLog, store: Any) -> Any | None:
        """After the trigger of ``start_deferred`` reported the stage failed: the trigger following the stage
        restarted elastically, or None when it may not continue."""
        return None

    def run(self, stage: StagePlan, log: StageLog) -> dict[str, Any]:
        """Run the stage to its end and return its result record; an elastic stage that lost workers is
        restarted with those it has left (each restart recorded in the result's ``elastic_restarts``)."""
        restarts: list[ElasticRestart] = []
        while True:
            try:
                result = self.run_once(stage, log, restarts)
                return with_restarts(result, restarts)
            except StageFailed as failure:
                smaller = shrunk(stage, failure.lost, restarts, self.restart_policy(stage))
                if smaller is None:
                    raise
                restart_record(stage, smaller, failure.lost, failure.summary, restarts, log, **self.measure_loss(stage))
                stage = smaller

    def restart_policy(self, stage: StagePlan) -> Elastic | None:
        """How this launcher restarts the stage after a loss (None: it does not)."""
        return stage.elastic

    def measure_loss(self, stage: StagePlan) -> dict[str, Any]:
        """The ``ElasticRestart`` fields this launcher measures of a loss, besides who and why."""
        return {}

    @abc.abstractmethod
    def run_once(self, stage: StagePlan, log: StageLog, restarts: list[ElasticRestart]) -> dict[str, Any]:
        """Start every member of the stage, relay their output to ``log`` prefixed ``[name]``, return the
        stage's result record when all succeeded (and stop serving members then). Raise StageFailed as soon
        as one fails, after stopping the others. ``restarts``: the elastic restarts this run follows."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every process this launcher started and their descendants (idempotent; any thread)."""
