"""What the chief uploads as it trains with its artifact root in a bucket (moto's S3 server, its access log): of
each record and of the checkpoints the first and the last, and in between at most one per
``training.upload_every_seconds``."""

from __future__ import annotations

import collections
import os

import pytest

from tests.support.plans import plan_for, run
from tfdist.contract.progress import kept_checkpoints, read_curve
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json

pytestmark = pytest.mark.e2e


def test_the_chief_uploads_the_first_and_the_last_of_each_and_between_at_most_one_per_upload_every_seconds(
    s3, digits_root, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", s3.airflow_connection)
    bucket = s3.new_bucket()
    root = f"s3://{bucket}/tfdist"
    storage.upload_tree(os.path.join(digits_root, "raw"), storage.join(root, "raw"))
    every = {"checkpoint_every_steps": 10, "summary_every_steps": 10, "upload_every_seconds": 3600}
    plan = plan_for(root, "paced", training={"epochs": 8, "num_workers": 2, **every})
    run(plan, "prepare_data")
    run(plan, "train")
    layout, prefix = plan.layout, f"s3://{bucket}/"
    final = read_json(layout.result("train"))["final_step"]
    puts = collections.Counter(r.removeprefix("PUT ") for r in s3.requests(bucket) if r.startswith("PUT "))

    def uploads(url: str) -> int:
        return puts[url.removeprefix(prefix)]

    checkpoints = layout.checkpoint_dir
    indexes = {key for key in puts if key.startswith(checkpoints.removeprefix(prefix)) and key.endswith(".index")}
    assert f"{checkpoints.removeprefix(prefix)}/ckpt-{final}.index" in indexes
    assert indexes <= {f"{checkpoints.removeprefix(prefix)}/ckpt-{step}.index" for step in (10, final)}
    (events,) = storage.names(layout.tensorboard("train"))
    records = (f"{checkpoints}/checkpoint", layout.curve_file, layout.progress_file)
    # 1: the first was still queued when the last came, which made it needless
    assert all(uploads(url) in (1, 2) for url in (*records, storage.join(layout.tensorboard("train"), events)))
    # the last of each is whole
    kept = kept_checkpoints(storage.read_bytes(f"{checkpoints}/checkpoint").decode())
    assert kept[-1] == f"ckpt-{final}" and set(kept) <= {"ckpt-10", f"ckpt-{final}"}
    assert [p.step for p in read_curve(layout.curve_file)] == [*range(10, final, 10), final]
    assert read_json(layout.progress_file)["step"] == final
