"""The validation section (tfdist.spec.validation): a threshold needs a bound and its bounds in order, change
thresholds and the checkpoint selection take their defaults, and a pipeline is gated or says it is not."""

from __future__ import annotations

import pydantic
import pytest

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.spec import ChangeThreshold, CheckpointSelection, Threshold, ValidationSpec


def test_a_threshold_takes_either_bound_or_both_in_order():
    assert (Threshold(lower=0.5).upper, Threshold(upper=0.5).lower) == (None, None)
    assert Threshold(lower=0.9, upper=1.1) == Threshold.model_validate({"lower": 0.9, "upper": 1.1})
    with pytest.raises(pydantic.ValidationError, match=r"lower \(0\.9\) is above upper \(0\.5\)"):
        Threshold(lower=0.9, upper=0.5)
    with pytest.raises(pydantic.ValidationError, match="give 'lower', 'upper' or both"):
        Threshold()


def test_the_defaults_compare_no_worse_than_the_baseline_and_score_the_latest_checkpoint():
    change, selection, validation = ChangeThreshold(), CheckpointSelection(), ValidationSpec()
    assert (change.direction, change.absolute, change.relative) == (None, 0.0, None)
    assert (selection.mode, selection.metric, selection.direction) == ("latest", None, None)
    assert (validation.on_failure, validation.allow_unvalidated, validation.thresholds) == ("fail", False, {})


def test_a_bound_above_the_other_is_named_by_its_metric(tmp_path):
    found = problems(make_spec(str(tmp_path), validation={"thresholds": {"accuracy": {"lower": 0.9, "upper": 0.5}}}))
    assert any(p.startswith("validation.thresholds.accuracy: lower (0.9) is above upper (0.5)") for p in found), found


def test_a_negative_tolerance_is_refused(tmp_path):
    found = problems(make_spec(str(tmp_path), validation={"change_thresholds": {"accuracy": {"relative": -0.1}}}))
    assert any(p.startswith("validation.change_thresholds.accuracy.relative: Input should be greater") for p in found)


def test_a_pipeline_published_without_a_gate_has_no_threshold(tmp_path):
    found = problems(make_spec(str(tmp_path), validation={"allow_unvalidated": True}))
    assert (
        "validation.allow_unvalidated: only for a pipeline without thresholds; remove it, the thresholds given are "
        "the gate"
    ) in found
    ungated = ValidationSpec(allow_unvalidated=True)
    assert ungated.thresholds == {} and ungated.change_thresholds == {}
