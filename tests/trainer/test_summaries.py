"""trainer/summaries.py: TensorBoard scalars as event records, written in place or in the scratch copy of a bucket's
log directory, which its upload sends."""

from __future__ import annotations

import os

from tfdist.contract.launch import SCRATCH_ENV
from tfdist.infra import storage
from tfdist.trainer import summaries


def events(tf, logdir: str) -> list:
    from tensorflow.core.util import event_pb2

    (name,) = os.listdir(logdir)
    assert name.startswith("events.out.tfevents.") and name.endswith(".v2")
    records = tf.data.TFRecordDataset(os.path.join(logdir, name))
    return [event_pb2.Event.FromString(r.numpy()) for r in records]


def test_each_write_is_one_event_of_scalars_at_its_step_and_a_none_value_is_left_out(tf, tmp_path):
    write = summaries.scalar_writer(tf, str(tmp_path / "logs"))
    write(10, {"loss": 0.5, "auc": None})
    write(20, {"loss": 0.25, "accuracy": 0.75})
    first, *written = events(tf, str(tmp_path / "logs"))  # flushed at once: readable while the writer is open
    assert first.file_version == "brain.Event:2"
    assert [(e.step, {v.tag: v.tensor.float_val[0] for v in e.summary.value}) for e in written] == [
        (10, {"loss": 0.5}),
        (20, {"loss": 0.25, "accuracy": 0.75}),
    ]
    assert {v.metadata.plugin_data.plugin_name for e in written for v in e.summary.value} == {"scalars"}


def test_a_buckets_logdir_is_written_in_the_scratch_and_uploaded_from_there(tf, tmp_path, monkeypatch):
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))
    url = "s3://bucket/run/logs"
    summaries.scalar_writer(tf, url)(1, {"loss": 1.0})
    local = str(tmp_path / "scratch" / "s3" / "bucket" / "run" / "logs")
    assert len(events(tf, local)) == 2
    upload, said = summaries.summaries_upload(url)
    assert (upload.func, upload.args) == (storage.upload_tree, (local, url))
    assert said == f"the upload of the summaries to {url}"
