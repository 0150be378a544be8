"""How a stage's task ends when its stage does not succeed, named as the outcomes are: the task's retries run
a failed or lost stage again, never a refused one."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tfdist.contract.launch import EXIT_REFUSED


class StageRefused(AirflowFailException):
    """The stage refused its input, its settings or its run (an exit with EXIT_REFUSED): a retry would be
    refused again, so the task fails without one."""


class StageFailedRetryable(AirflowException):
    """A process of the stage failed by its own decision (a non-zero exit): the task's retries run it again."""


class StageLost(AirflowException):
    """Processes of the stage were lost, not failed by their own decision (killed by a signal, evicted, stopped
    or hung) and the stage could not go on without them: the task's retries run it again."""


def stage_outcome(
    task_id: str, returncode: int | None, message: str, lost: tuple[str, ...] | list[str] = ()
) -> Exception:
    """The exception ending a task whose stage did not succeed: refused, lost, or failed and retryable."""
    if returncode == EXIT_REFUSED:
        return StageRefused(f"{task_id} refused: {message}")
    if lost:
        return StageLost(f"{task_id} lost {', '.join(lost)}: {message}")
    return StageFailedRetryable(f"{task_id} failed: {message}")
