"""The validation section: the gate a model must pass to be published, by value and against the baseline, and
which checkpoint it scores."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tfdist.spec.rules import Rule, equals, given
from tfdist.spec.section import Section
from tfdist.spec.tasks import Direction


def _a_bound(threshold: Threshold) -> str | None:
    return "give 'lower', 'upper' or both" if threshold.lower is None and threshold.upper is None else None


def _lower_below_upper(threshold: Threshold) -> str | None:
    lower, upper = threshold.lower, threshold.upper
    if lower is not None and upper is not None and lower > upper:
        return f"lower ({lower}) is above upper ({upper})"
    return None


class Threshold(Section):
    lower: float | None = None
    """The value (a metric, a feature's elements) must be at least this."""
    upper: float | None = None
    """The value must be at most this."""

    rules = (
        Rule(_a_bound, schema=({"anyOf": [given("lower", "number"), given("upper", "number")]},)),
        Rule(_lower_below_upper),
    )


class ChangeThreshold(Section):
    """How much worse than the baseline (the newest model published as of the run's data interval)
    a metric may be; both tolerances, when given, must hold."""

    direction: Direction | None = None
    """Whether a higher or a lower value of the metric is better; default: the metric's own direction."""
    absolute: Annotated[float, Field(ge=0)] | None = 0.0
    """Largest allowed loss in metric units (0: no worse than the baseline)."""
    relative: Annotated[float, Field(ge=0)] | None = None
    """Largest allowed loss as a fraction of the baseline's value."""


class CheckpointSelection(Section):
    mode: Literal["latest", "best"] = "latest"
    """'best': validate every retained checkpoint and keep the best by 'metric'."""
    metric: str | None = None
    """The metric 'best' is chosen by; default: the first of the model's metrics."""
    direction: Direction | None = None
    """Whether a higher or a lower 'metric' is better; default: the metric's own direction."""


def _one_way(validation: ValidationSpec) -> str | None:
    if validation.allow_unvalidated and (validation.thresholds or validation.change_thresholds):
        return (
            "validation.allow_unvalidated: only for a pipeline without thresholds; "
            "remove it, the thresholds given are the gate"
        )
    return None


_EMPTY = {"type": "object", "maxProperties": 0}


class ValidationSpec(Section):
    """The gate: a model is published only when it passes. At least one threshold is required unless
    'allow_unvalidated' says otherwise."""

    thresholds: dict[str, Threshold] = Field(default_factory=dict)
    """Value thresholds on the eval split: {metric: {lower: x, upper: y}}."""
    change_thresholds: dict[str, ChangeThreshold] = Field(default_factory=dict)
    """How much worse than the published baseline each metric may be."""
    checkpoint: CheckpointSelection = Field(default_factory=CheckpointSelection)
    """Which checkpoint is validated: the latest, or the best retained one."""
    on_failure: Literal["fail", "skip"] = "fail"
    """Not blessed: fail the evaluate task (no retry), or skip it; export does not run either way."""
    allow_unvalidated: bool = False
    """Publish every model that passes the integrity checks, with no threshold at all; recorded in
    blessing.json and in the version's metadata.json as published without a gate."""

    rules = (
        Rule(
            _one_way,
            schema=(
                {
                    "if": equals("allow_unvalidated", True),
                    "then": {"properties": {"thresholds": _EMPTY, "change_thresholds": _EMPTY}},
                },
            ),
        ),
    )
