"""An upgrade keeps what the last release left behind working: its deferred tasks resume, its records read
(tests/fixtures/records/README.md says how they were made)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from airflow._shared.module_loading import import_string  # what the triggerer rebuilds a trigger with

from tests.support.roots import REPO

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


RECORDS = {
    "runs/*/run.json": "train_records.RunRecord",
    "runs/*/data/manifest.json": "data_records.Manifest",
    "runs/*/prepare_data/result.json": "data_records.PrepareResult",
    "runs/*/validate_data/data_validation.json": "data_records.DataValidation",
    "runs/*/validate_data/result.json": "data_records.ValidateDataResult",
    "runs/*/train/progress.json": "progress.TrainProgress",
    "runs/*/train/result.json": "train_records.TrainResult",
    "runs/*/train/warm_start.json": "train_records.WarmStartRecord",
    "runs/*/train/warm_start_parent.json": "train_records.WarmStartChoice",
    "runs/*/eval/metrics.json": "publish_records.EvalMetrics",
    "runs/*/eval/blessing.json": "publish_records.Blessing",
    "runs/*/evaluate/result.json": "publish_records.EvaluateResult",
    "runs/*/approval.json": "publish_records.Approval",
    "runs/*/export/result.json": "publish_records.ExportResult",
    "models/digits_small/*/metadata.json": "publish_records.VersionMetadata",
    "models/digits_small/*/data_statistics.json": "data_records.DataStatistics",
    "models/digits_small/.withdrawn/*/metadata.json": "publish_records.VersionMetadata",
    "models/digits_small/.withdrawn/*/data_statistics.json": "data_records.DataStatistics",
    "models/digits_small/.withdrawn/*/withdrawn.json": "publish_records.Withdrawn",
}
"""Every JSON record the stages of 0.2.0 wrote, by where it lies in the fixtures, and its model in tfdist.contract."""


@pytest.mark.parametrize("pattern", sorted(RECORDS))
def test_each_record_the_last_release_wrote_reads_and_writes_back_its_shape(pattern):
    """Each record 0.2.0 wrote reads through its model and writes back the same keys and values, plus the schema
    versions."""
    import glob
    import importlib

    from tfdist.contract.records import read_record

    module, name = RECORDS[pattern].split(".")
    model = getattr(importlib.import_module(f"tfdist.contract.{module}"), name)
    paths = glob.glob(os.path.join(RELEASE, pattern))
    assert paths, pattern
    for path in paths:
        written = read_record(path, model).payload()
        with open(path) as f:
            assert _unversioned(written) == json.load(f), path


def test_the_last_releases_training_curve_reads_point_by_point():
    from tfdist.contract.progress import read_curve

    for run in os.listdir(os.path.join(RELEASE, "runs")):
        path = os.path.join(RELEASE, "runs", run, "train", "curve.jsonl")
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        points = read_curve(path)
        assert [_unversioned(p.payload()) for p in points] == lines, path


def test_the_effective_spec_the_last_release_recorded_loads_as_it_was():
    """A run's spec.json (its effective spec) loads, and is recorded again the same: a resumed run of the last
    release is not refused as made from another spec (``record_run``)."""
    from tfdist.spec import load_spec

    for run in os.listdir(os.path.join(RELEASE, "runs")):
        with open(os.path.join(RELEASE, "runs", run, "spec.json")) as f:
            recorded = json.load(f)
        assert load_spec(recorded).to_json_dict() == recorded, run


def test_every_record_file_of_the_fixtures_has_a_model():
    """No record the last release wrote is left out of RECORDS (a new one must be added, with its model)."""
    import glob

    covered = {p for pattern in RECORDS for p in glob.glob(os.path.join(RELEASE, pattern))}
    found = {
        os.path.join(root, f)
        for root, _, files in os.walk(RELEASE)
        for f in files
        if f.endswith(".json") and "vocabularies" not in root and f not in ("deferred_triggers.json", "spec.json")
    }
    assert found - covered == set()


def _unversioned(record):
    """The record without the schema version of it and of the records nested in it."""
    if isinstance(record, dict):
        return {k: _unversioned(v) for k, v in record.items() if k != "schema_version"}
    return [_unversioned(v) for v in record] if isinstance(record, list) else record


@pytest.mark.e2e
def test_a_version_the_last_release_published_is_the_baseline_a_new_run_warm_starts_from(tmp_path):
    """Its metadata lists it (the withdrawn one stays withdrawn), it is the next day's baseline, and the new run's
    train stage restores its model and optimizer from its checkpoint, table rows by token."""
    import datetime as dt
    import shutil

    from tests.support.plans import run
    from tests.support.specs import DAY
    from tests.trainer import prepared_tables as tabular
    from tests.trainer.test_warm_start_vocabulary import prepared
    from tfdist.contract.records import read_record
    from tfdist.contract.train_records import WarmStartRecord
    from tfdist.publishing import registry

    root = str(tmp_path)
    plan = prepared(root, "after_the_upgrade", DAY + dt.timedelta(days=1), tabular.COUNTRIES[3:])
    shutil.copytree(os.path.join(RELEASE, "models", "digits_small"), plan.model_dir)
    assert [v.version for v in registry.versions(plan.model_dir)] == [20261121000000]
    assert [v.version for v in registry.withdrawn(plan.model_dir)] == [20261120000000]
    run(plan, "train")
    record = read_record(plan.layout.warm_start_file, WarmStartRecord)
    assert record.parent and record.parent.version == 20261121000000, record.cold_start
    assert record.restored == "model and optimizer" and record.vocabularies["country"].carried > 0


PUBLISHED = os.path.join(RELEASE, "models", "digits_small", "20261121000000")
"""The version 0.2.0 published (from day 2's run): its model took the int64 feature ``store`` as int64 ids and
turned them back into strings in a layer of its own (``store_string``)."""
PUBLISHED_FROM = os.path.join(RELEASE, "runs", "fixture_day2-e0149de211d6abcb")
ROWS = {  # store: tokens of its vocabulary, an unseen id and a missing one
    "age": [31.0, float("nan"), 55.0, 42.0],
    "scores": [[0.1, -1.0], [float("nan"), 0.5], [2.0, 0.0], [0.0, 0.0]],
    "country": [b"de", b"", b"atlantis", b"fr"],
    "device": [b"ios", b"android", b"", b"web"],
    "store": [101, 104, 999999, -(2**63)],
    "recent": [[b"item1", b"item2"], [b"", b""], [b"item3", b""], [b"item9", b"item1"]],
}


def test_a_checkpoint_the_last_release_wrote_restores_into_todays_model_layer_by_layer(tmp_path):
    """Today's model takes an int64 feature as the strings the shards hold, and a layer that does nothing keeps the
    place of 0.2.0's conversion layer: the model's part of 0.2.0's checkpoint is today's, object path by object path
    (``model/_operations/<i>/...``) and shape, and the checkpoint restored and served through today's signature
    gives 0.2.0's SavedModel's predictions on the same int64 rows."""
    from tfdist.contract.data_records import Manifest
    from tfdist.contract.records import read_record
    from tfdist.publishing import registry
    from tfdist.spec import load_spec
    from tfdist.trainer.export import serving_inputs, serving_module
    from tfdist.trainer.models import restore_model
    from tfdist.trainer.runtime import import_tensorflow
    from tfdist.trainer.warm_start import stored_variables

    tf = import_tensorflow()
    spec = load_spec(os.path.join(PUBLISHED_FROM, "spec.json"))
    data_dir = os.path.join(PUBLISHED_FROM, "data")
    manifest = read_record(os.path.join(data_dir, "manifest.json"), Manifest)
    checkpoint = registry.warm_start_checkpoint(PUBLISHED)
    model, _ = restore_model(tf, spec, manifest, data_dir, checkpoint)

    def model_part(prefix: str) -> dict[str, tuple[int, ...]]:
        return {p: shape for p, (_, shape) in stored_variables(tf, prefix).items() if p.startswith("model/")}

    todays = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert model_part(todays) == model_part(checkpoint)
    assert model.inputs[[i.name for i in model.inputs].index("store")].dtype == "string"

    rows = {k: tf.constant(v, tf.float32 if k in ("age", "scores") else None) for k, v in ROWS.items()}
    published = tf.saved_model.load(PUBLISHED).signatures["serving_default"](**rows)["probability"]
    served = serving_module(tf, model, manifest).serve(*(rows[i.name] for i in serving_inputs(manifest)))
    served = served["probability"]
    np.testing.assert_allclose(served.numpy(), published.numpy(), rtol=1e-6, atol=1e-6)
    assert len(np.unique(published.numpy())) == len(ROWS["age"])  # each row its own prediction
