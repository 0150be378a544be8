"""trainer/validate_data.py: the baseline a run's data is compared with (a published version's statistics, as of the
run's data interval), why there is none, and the decision record (the data checks themselves:
tfdist.publishing's tests; the stage in a DAG: tests/dag/test_data_gate_dags.py)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.specs import make_spec
from tfdist.contract.data_records import DataStatistics
from tfdist.contract.records import read_record
from tfdist.contract.stages import ValidateDataArgs
from tfdist.contract.train_records import RunRecord
from tfdist.publishing import registry
from tfdist.spec import load_spec
from tfdist.trainer.validate_data import baseline_statistics, baseline_vocabularies, decision_record

PUBLISHED = os.path.join(os.path.dirname(__file__), "..", "fixtures", "records", "0.2.0", "models", "digits_small")
VERSION = 20261121000000  # published for the interval ending 2026-11-21


@pytest.fixture
def model_dir(tmp_path) -> str:
    shutil.copytree(PUBLISHED, tmp_path / "m")
    return str(tmp_path / "m")


def args_for(model_dir: str) -> ValidateDataArgs:
    return ValidateDataArgs(spec="spec.json", run="run.json", data="data", model_dir=model_dir, out="o", result="r")


def run_ending(day: int) -> RunRecord:
    return RunRecord(
        run_id=f"day{day}",
        data_interval_start=f"2026-11-{day - 1}T00:00:00+00:00",
        data_interval_end=f"2026-11-{day}T00:00:00+00:00",
    )


def statistics_of(model_dir: str) -> DataStatistics:
    return read_record(os.path.join(model_dir, str(VERSION), registry.DATA_STATISTICS), DataStatistics)


def test_the_baseline_is_the_version_live_as_of_the_interval_with_its_statistics(model_dir):
    now = statistics_of(model_dir)
    baseline, statistics, missing = baseline_statistics(args_for(model_dir), run_ending(22), now)
    assert (baseline.version, baseline.run_id, statistics, missing) == (VERSION, "fixture_day2", now, "")
    assert baseline_statistics(args_for(model_dir), run_ending(21), now)[0].version == VERSION  # as of its interval end
    _, _, missing = baseline_statistics(args_for(model_dir), run_ending(20), now)
    assert missing == "no baseline: nothing published as of this data interval"


def test_a_baseline_without_statistics_or_binned_otherwise_is_not_compared_and_says_why(model_dir):
    now = statistics_of(model_dir)
    rebinned = now.model_copy(update={"bins": now.bins.model_copy(update={"bins": now.bins.bins + 2})})
    baseline, statistics, missing = baseline_statistics(args_for(model_dir), run_ending(22), rebinned)
    assert baseline.version == VERSION and statistics is None
    assert missing == f"baseline version {VERSION}'s histograms are binned otherwise"
    os.remove(os.path.join(model_dir, str(VERSION), registry.DATA_STATISTICS))
    baseline, statistics, missing = baseline_statistics(args_for(model_dir), run_ending(22), now)
    assert baseline.version == VERSION and statistics is None
    assert missing == f"baseline version {VERSION} has no data_statistics.json (published by an earlier tfdist)"


def test_the_vocabularies_checked_are_the_baselines_of_the_features_encoded_through_one(model_dir, tmp_path):
    spec = load_spec(
        make_spec(
            str(tmp_path),
            data={
                "features": [
                    {"name": "country", "kind": "categorical", "dtype": "string"},
                    {"name": "city", "kind": "categorical", "dtype": "string"},
                ]
            },
        )
    )
    baseline, _, _ = baseline_statistics(args_for(model_dir), run_ending(22), statistics_of(model_dir))
    found = baseline_vocabularies(spec, baseline)
    assert set(found) == {"country", "city"} and found["city"] is None  # the version has no vocabulary of city
    assert "uk" in str(found["country"])
    assert baseline_vocabularies(spec, None) == {}


def test_the_same_data_as_the_baselines_passes_every_check_compared(model_dir, tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    now = statistics_of(model_dir)
    record = decision_record(args_for(model_dir), spec, run_ending(22), now)
    assert record.decision == "passed" and record.compared and record.why_not_compared is None
    assert (record.baseline_version, record.failed, record.refused) == (VERSION, 0, [])
    assert record.checks_run == len(record.checks) > 0
    unvalidated = decision_record(args_for(model_dir), spec, run_ending(20), now)
    assert (
        unvalidated.decision == "passed"
        and not unvalidated.compared
        and unvalidated.checks_run == len(unvalidated.checks)
    )
