"""The data gate's checks (``data.checks``): this run's data statistics against the baseline's."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tfdist.spec.section import Section
from tfdist.spec.validation import Threshold


class _Check(Section):
    mode: Literal["refuse", "warn", "off"] | None = None
    """'refuse' (the run stops before training), 'warn' (logged and recorded, the run goes on) or 'off';
    default: checks.mode."""


class DriftCheck(_Check):
    max_divergence: Annotated[float, Field(gt=0, le=1)] = 0.05
    """The largest Jensen–Shannon divergence (base 2: 0 same, 1 disjoint) allowed between a numeric feature
    element's histogram and the baseline's."""
    max_distance: Annotated[float, Field(gt=0, le=1)] = 0.1
    """The largest L∞ distance allowed between a categorical feature's value shares and the baseline's (TFX's
    measure: the largest change of one value's share, over the baseline's top values and this run's)."""


class VocabularyCheck(_Check):
    max_oov_share: Annotated[float, Field(ge=0, le=1)] = 0.05
    """The largest share of a categorical feature's values allowed outside the baseline's vocabulary (the values
    the baseline model has rows for)."""


class MissingCheck(_Check):
    max_change: Annotated[float, Field(gt=0, le=1)] = 0.05
    """The largest change of a feature's missing rate (per element) allowed against the baseline."""


class ConstantCheck(_Check):
    min_share: Annotated[float, Field(gt=0, lt=1)] = 0.01
    """A feature element counts as varying when more than this share of its rows differ from its most common
    value; constant now and varying in the baseline (or the reverse) fails."""


class LabelCheck(_Check):
    max_change: Annotated[float, Field(gt=0, le=1)] = 0.05
    """multiclass and binary: the largest change of a class's share of the rows (L∞; binary: the positive rate)
    allowed against the baseline; a class the baseline has and this run lacks always fails."""
    max_mean_shift: Annotated[float, Field(gt=0)] = 0.5
    """regression: the largest change of the target's mean allowed, in the baseline's standard deviations."""


class RowsCheck(_Check):
    min_ratio: Annotated[float, Field(gt=0, le=1)] = 0.5
    """This run's rows over the baseline's, at least."""
    max_ratio: Annotated[float, Field(ge=1)] = 2.0
    """... and at most."""


class BoundsCheck(_Check):
    features: dict[str, Threshold] = Field(default_factory=dict)
    """{feature: {lower: x, upper: y}}: every element of the feature within (its min and max); needs no
    baseline."""


class DataChecks(Section):
    """The data gate (task validate_data): this run's data statistics against the baseline's, the data the
    model the gate compares with was trained on."""

    mode: Literal["refuse", "warn"] = "refuse"
    """What a failed check does unless it says itself: 'refuse' stops the run before training (no retry),
    'warn' logs and records it."""
    drift: DriftCheck = Field(default_factory=DriftCheck)
    """Each numeric feature element's histogram, and each categorical feature's value shares, against the
    baseline's."""
    vocabulary: VocabularyCheck = Field(default_factory=VocabularyCheck)
    """The share of each categorical feature's values outside the baseline's vocabulary."""
    missing: MissingCheck = Field(default_factory=MissingCheck)
    """Each feature's missing rate against the baseline's."""
    constant: ConstantCheck = Field(default_factory=ConstantCheck)
    """A feature element constant on one side only."""
    labels: LabelCheck = Field(default_factory=LabelCheck)
    """The label by task: class shares and classes gone, the positive rate, or the target's mean."""
    rows: RowsCheck = Field(default_factory=RowsCheck)
    """The row count against the baseline's."""
    bounds: BoundsCheck = Field(default_factory=BoundsCheck)
    """Value bounds per feature."""
