"""A run's prepared data in an object store (a real S3-protocol server): each stage checks the copy it reads."""

from __future__ import annotations

import os

import pytest

from tests.trainer import tabular
from tfdist.contract.launch import EXIT_REFUSED, SCRATCH_ENV
from tfdist.contract.layout import MANIFEST
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json
from tfdist.trainer import data

pytestmark = pytest.mark.e2e  # starts an object-store server


def test_data_in_a_bucket_is_checked_in_its_local_copy_and_a_changed_object_refused(tmp_path, s3, capsys, monkeypatch):
    root = str(tmp_path)
    done, out = tabular.prepare(
        root, "run", tabular.data_spec("csv"), tabular.partitions(root, "csv", tabular.table(600))
    )
    assert done.returncode == 0, done.stderr
    url = f"s3://{s3.new_bucket()}/pipeline/runs/run/data"
    storage.upload_tree(out, url, last=(MANIFEST,))
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))

    manifest, local = data.verified_manifest(url, "train")
    assert local.startswith(str(tmp_path / "scratch")) and manifest == data.verified_manifest(out)[0]
    train = [s.file for s in manifest.train.shards]
    vocabularies = [f.vocabulary.file for f in manifest.with_vocabulary if f.vocabulary]
    assert sorted(storage.files_under(local)) == sorted([MANIFEST, *train, *vocabularies])
    for name in storage.files_under(local):
        assert open(os.path.join(local, name), "rb").read() == open(os.path.join(out, name), "rb").read()

    shard = storage.join(url, train[0])
    storage.write_bytes(shard, storage.read_bytes(shard)[:-1] + b"\x00")
    assert data.verified_manifest(url, "train")[1] == local  # this scratch's copies: fetched once, checked again
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "another-stage"))  # each stage (or pod) has its own scratch
    with pytest.raises(SystemExit) as refused:
        data.verified_manifest(url, "train")
    assert refused.value.code == EXIT_REFUSED
    assert f"data check 'sha256' failed for {shard}" in capsys.readouterr().err
    storage.remove(vocabulary := storage.join(url, vocabularies[0]))
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "a-third-stage"))
    with pytest.raises(SystemExit):
        data.verified_manifest(url, "eval")
    assert f"data check 'missing' failed for {vocabulary}" in capsys.readouterr().err
    storage.remove(storage.join(url, MANIFEST))
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "a-fourth-stage"))
    with pytest.raises(SystemExit):
        data.verified_manifest(url, "eval")
    assert f"data check 'missing' failed for {storage.join(url, MANIFEST)}" in capsys.readouterr().err


@pytest.mark.e2e  # 3 prepare processes: in make test, not in the fast set
def test_two_pods_meeting_in_the_bucket_publish_there_what_one_process_publishes_locally(tmp_path, s3):
    """prepare_data's pods on Kubernetes with the artifact root in a bucket (no volume): they meet in the run's
    directory there, and leave nothing of their meeting in the bucket nor on their disks."""
    root, scratch = str(tmp_path), tmp_path / "pods-disk"
    scratch.mkdir()
    source = tabular.partitions(root, "csv", tabular.table(900))
    spec = tabular.data_spec("csv", num_shards=3)
    one, local = tabular.prepare(root, "one", spec, source)
    assert one.returncode == 0, one.stderr
    bucket = f"s3://{s3.new_bucket()}"
    pods, out = tabular.prepare(
        root, "pods", spec, source, pods=2, run_root=bucket, env={**s3.env, "TMPDIR": str(scratch)}
    )
    assert pods.returncode == 0, pods.stderr
    assert "by 2 writer(s) (pods)" in pods.stdout
    manifests = [read_json(storage.join(o, MANIFEST)) for o in (out, local)]
    for manifest in manifests:  # it covers prepare_processes' absence
        manifest.pop("input_fingerprint")
    assert manifests[0] == manifests[1]  # the shards' sha256s among them
    assert storage.names(out) == sorted(os.listdir(local))
    assert storage.names(storage.parent(out)) == ["data", "result.json", "spec.json"]  # no pods-try-1 left
    assert not os.listdir(scratch)
