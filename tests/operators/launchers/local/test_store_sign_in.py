"""The Airflow side's sign-in to a bucket and what it hands to local stage processes. For gs://, checked before any
work against the GCS emulator: the Google Cloud connection's key (keyfile_dict or key_path, signing in at a stand-in
of Google's OAuth endpoint) or the ambient identity. For s3://, against an S3 server enforcing IAM: credentials
renewed in the connection reach a stage's running processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.support.logs import collecting_logger
from tests.support.object_store import S3Server, TokenServer, airflow_connection, gcs_connection, new_bucket_url
from tests.support.plans import plan_for
from tests.support.processes import wait_for
from tfdist.infra import storage
from tfdist.operators import artifact_store
from tfdist.operators.artifact_store import HandedOptions, StoreUnreachable, connect
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.launchers.processes import Process

pytestmark = pytest.mark.e2e  # starts object-store servers and stage processes

STAGE_READS = "import sys; from tfdist.infra import storage; print(storage.read_bytes(sys.argv[1]).decode())"
SIGN_IN_VARIABLES = (storage.GCS_KEY_ENV, "GOOGLE_APPLICATION_CREDENTIALS")


@pytest.fixture
def root(gcs, request, monkeypatch) -> str:
    """A new bucket's root; this process's gs:// sign-in as it was once the test is over."""
    monkeypatch.setattr(storage, "_options", dict(storage._options))
    return new_bucket_url(request, "gs", "tfdist")


def stage_reads(url: str, env: dict[str, str]) -> str:
    """What a fresh process with ``env`` as its only sign-in reads at ``url``."""
    ambient = {k: v for k, v in os.environ.items() if k not in SIGN_IN_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", STAGE_READS, url], env={**ambient, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.parametrize("given_as", ["keyfile_dict", "key_path"])
def test_the_connections_key_signs_in_here_and_in_the_stage_processes(
    given_as, root, token_server, tmp_path, monkeypatch
):
    key = token_server.service_account_key()
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(key))
    connection = gcs_connection(key=key) if given_as == "keyfile_dict" else gcs_connection(key_path=str(key_file))
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", connection)
    signed_in = token_server.granted
    env = connect(root)
    assert token_server.granted > signed_in, "the Airflow side did not sign in with the connection's key"
    assert env == (
        {storage.GCS_KEY_ENV: json.dumps(key)}
        if given_as == "keyfile_dict"
        else {"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}
    )
    note = storage.join(root, "note")
    storage.write_bytes(note, b"written by the Airflow side")
    signed_in = token_server.granted
    assert stage_reads(note, env) == "written by the Airflow side"
    assert token_server.granted > signed_in, "the stage process did not sign in with the key it was handed"


def test_a_refused_key_fails_at_once_naming_the_connection(root, monkeypatch):
    refusing = TokenServer(refusing=True)
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", gcs_connection(key=refusing.service_account_key()))
    try:
        with pytest.raises(StoreUnreachable) as refused:
            connect(root)
    finally:
        refusing.close()
    assert str(refused.value).startswith(
        f"cannot reach {root} with the Airflow connection 'google_cloud_default' ([tfdist] gcp_conn_id): "
    )
    assert "Invalid Credentials" in str(refused.value)
    assert refusing.refused == 1  # not tried again (gcsfs's requests would, for half a minute)


def test_a_sign_in_tfdist_does_not_read_is_refused_by_name(root, monkeypatch):
    extra = {"project": "tfdist-test", "impersonation_chain": "trainer@tfdist-test.iam.gserviceaccount.com"}
    monkeypatch.setenv("AIRFLOW_CONN_GCS_TRAINING", json.dumps({"conn_type": "google_cloud_platform", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__TFDIST__GCP_CONN_ID", "gcs_training")
    with pytest.raises(StoreUnreachable, match="'gcs_training' signs in with impersonation_chain, which tfdist"):
        connect(root)


def test_without_a_connection_the_ambient_identity_reaches_the_bucket_and_nothing_is_handed_on(root, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    assert connect(root) == {}
    storage.write_bytes(storage.join(root, "note"), b"anonymous")
    assert stage_reads(storage.join(root, "note"), {}) == "anonymous"


def test_a_missing_bucket_is_named(gcs, monkeypatch):
    monkeypatch.setattr(storage, "_options", dict(storage._options))
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    with pytest.raises(StoreUnreachable, match="gs://no-such-bucket/tfdist: there is no bucket 'no-such-bucket'"):
        connect("gs://no-such-bucket/tfdist")


WRITER = """
import sys, time
from tfdist.infra import storage
for k in range(int(sys.argv[2])):
    refused_since = None
    while True:  # as a stage's uploads do, a refused write is tried again for a while
        try:
            storage.write_bytes(f"{sys.argv[1]}/note-{k:03d}", b"")
            break
        except PermissionError:
            refused_since = refused_since or time.monotonic()
            if time.monotonic() - refused_since > 20:
                raise
            time.sleep(0.5)
    time.sleep(0.1)
"""


@pytest.fixture
def iam_store():
    """An S3 server that takes only its IAM users' keys, with a bucket and a user (trainer) who may use it; the
    server, the bucket's root and the user's first key."""
    server = S3Server(open_requests=4).start()
    root = f"s3://{server.new_bucket()}/tfdist"
    yield server, root, server.new_user_key("trainer")
    server.stop()


@pytest.mark.e2e  # 15-20 s: an S3 server of its own and a stage process writing for 10 s
def test_a_stage_outlives_the_credentials_it_started_with(iam_store, monkeypatch):
    """While a stage's process writes to the bucket, the connection's key is replaced and the old one deleted (as an
    assumed role's session credentials expire): the launcher hands the process the new key, which goes on."""
    server, root, first = iam_store
    monkeypatch.setattr(storage, "_options", dict(storage._options))
    monkeypatch.setattr(artifact_store, "RECONNECT_SECONDS", 1)
    monkeypatch.setattr(HandedOptions, "CHECK_SECONDS", 0.5)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", airflow_connection(server.endpoint, first))
    connect(root)
    plan = plan_for(root, "rotated")
    notes, count = storage.join(root, "notes"), 60

    def rotate() -> None:
        wait_for(lambda: len(storage.names(notes)) >= 5, 60, "the first notes")
        iam = server.client("iam", first)
        second = iam.create_access_key(UserName="trainer")["AccessKey"]
        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = airflow_connection(server.endpoint, second)
        iam.delete_access_key(UserName="trainer", AccessKeyId=first["AccessKeyId"])

    rotating = threading.Thread(target=rotate)
    rotating.start()
    writer = Process("writer", "chief", (sys.executable, "-c", WRITER, notes, str(count)))
    logger, _ = collecting_logger("rotated")
    launcher = LocalLauncher(plan)
    try:
        launcher.run_processes(plan.stage("prepare_data"), [writer], logger)
    finally:
        rotating.join()
    assert len(storage.names(notes)) == count
    assert not os.path.exists(launcher.store_env[storage.OPTIONS_FILE_ENV]), "the credentials outlived the processes"
