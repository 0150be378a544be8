"""Where artifacts and published versions may live (tfdist.spec.locations): an absolute local path, or a bucket of
an object store, with no credentials."""

from __future__ import annotations

import pytest

from tfdist.spec.locations import artifact_location, default_artifact_root


def test_a_local_path_is_expanded_and_normalized(monkeypatch):
    monkeypatch.setenv("HOME", "/home/ann")
    monkeypatch.setenv("DATA", "/srv/data")
    assert artifact_location("~/tfdist/") == "/home/ann/tfdist"
    assert artifact_location("$DATA/./runs/../art") == "/srv/data/art"
    with pytest.raises(ValueError, match=r"^must be an absolute path \(after expanding ~ and \$VARS\), got 'art/x'$"):
        artifact_location("art/x")


def test_the_default_root_is_the_environments_else_the_home_directorys(monkeypatch):
    monkeypatch.setenv("HOME", "/home/ann")
    monkeypatch.delenv("TFDIST_ARTIFACT_ROOT", raising=False)
    assert default_artifact_root() == "/home/ann/tfdist"
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", "gs://team-bucket/tfdist/")
    assert default_artifact_root() == "gs://team-bucket/tfdist"


def test_a_bucket_url_keeps_its_prefix_without_the_trailing_slash():
    assert artifact_location("s3://my-bucket/a/b/") == "s3://my-bucket/a/b"
    assert artifact_location("gs://my_bucket") == "gs://my_bucket"


@pytest.mark.parametrize(
    "url, words",
    [
        ("hdfs://nn/path", "'hdfs://nn/path': the object stores taken are s3://, gs://; or give a local path"),
        ("s3://key:secret@bucket/x", "holds credentials or a port: credentials never go in the spec"),
        ("s3://bucket:9000/x", "holds credentials or a port"),
        (
            "s3://Bucket/x",
            "'s3://Bucket/x': 'Bucket' is no bucket name (3-63 lowercase letters, digits, '.', '-', '_')",
        ),
        ("s3://ab", "'ab' is no bucket name"),
        ("s3://bucket/a//b", "the prefix has an empty, '.' or '..' part or a control character"),
        ("s3://bucket/a/../b", "the prefix has an empty, '.' or '..' part"),
        ("s3://bucket/a\x1b[0m", "or a control character"),
    ],
)
def test_a_url_that_is_no_bucket_of_a_known_store_is_refused_saying_why(url, words):
    with pytest.raises(ValueError) as err:
        artifact_location(url)
    assert words in str(err.value)
