"""An upgrade keeps what the last release left behind working: its deferred tasks resume, its records read
(tests/fixtures/records/README.md says how they were made)."""

from __future__ import annotations

import json
import os

import pytest
from airflow._shared.module_loading import import_string  # what the triggerer rebuilds a trigger with

from tests.conftest import REPO

RELEASE = os.path.join(REPO, "tests", "fixtures", "records", "0.2.0")


def deferred_triggers() -> dict[str, dict]:
    with open(os.path.join(RELEASE, "deferred_triggers.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("mode", sorted(deferred_triggers()))
def test_a_train_task_deferred_by_the_last_release_resumes_following_the_same_objects(mode):
    """The triggerer rebuilds a stored trigger from its class path and kwargs: it must take the last release's
    kwargs and follow the same objects (the Watch), storing them again as they were."""
    from tfdist.operators.launchers.kubernetes.api import Watch

    stored = deferred_triggers()[mode]
    trigger = import_string(stored["classpath"])(**stored["kwargs"])
    watch = Watch.from_dict(trigger.watch)
    assert (watch.kind, watch.name, watch.uid) == (
        stored["kwargs"]["watch"]["kind"],
        stored["kwargs"]["watch"]["name"],
        stored["kwargs"]["watch"]["uid"],
    )
    assert watch.selector.endswith("=" + watch.name)
    assert trigger.serialize() == (stored["classpath"], stored["kwargs"])
    assert Watch.from_dict(watch.to_dict()) == watch


DATA_RECORDS = {
    "runs/*/data/manifest.json": "Manifest",
    "models/digits_small/*/data_statistics.json": "DataStatistics",
    "models/digits_small/.withdrawn/*/data_statistics.json": "DataStatistics",
    "runs/*/validate_data/data_validation.json": "DataValidation",
    "runs/*/prepare_data/result.json": "PrepareResult",
    "runs/*/validate_data/result.json": "ValidateDataResult",
}


@pytest.mark.parametrize("pattern", sorted(DATA_RECORDS))
def test_the_last_releases_data_records_read_and_write_back_their_shape(pattern):
    """Each data record 0.2.0 wrote reads through its model (contract.data_records) and writes back the same keys
    and values, plus the schema versions."""
    import glob

    from tfdist.contract import data_records
    from tfdist.contract.records import read_record

    paths = glob.glob(os.path.join(RELEASE, pattern))
    assert paths, pattern
    for path in paths:
        written = read_record(path, getattr(data_records, DATA_RECORDS[pattern])).payload()
        with open(path) as f:
            assert _unversioned(written) == json.load(f), path


def _unversioned(record):
    """The record without the schema version of it and of the records nested in it."""
    if isinstance(record, dict):
        return {k: _unversioned(v) for k, v in record.items() if k != "schema_version"}
    return [_unversioned(v) for v in record] if isinstance(record, list) else record
