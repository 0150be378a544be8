"""No prune under a reader (issue 37), without TensorFlow: the model directory's lock and the readers' markers
across real processes, on a local disk, in a bucket of a real S3-protocol server (moto's) and of a GCS emulator. A
real warm start against a real export's prune: tests/trainer/test_prune_under_reader.py; in a bucket:
tests/operators/launchers/local/test_object_store_run.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.publishing.test_withdraw import publish
from tests.support.object_store import new_bucket_url
from tfdist.contract.publish_records import LockTicket
from tfdist.contract.records import read_record
from tfdist.infra import storage
from tfdist.publishing import registry
from tfdist.trainer.export import claim_version

pytestmark = pytest.mark.e2e  # starts reader processes, and object-store servers

HOLDER = """
import datetime as dt, sys
from tfdist.publishing import registry
lease = float(sys.argv[2])
if lease:  # the same protocol on a shorter clock
    registry.LEASE, registry.CLOCK_SKEW = dt.timedelta(seconds=lease), dt.timedelta(0)
lock, reader = registry.locked(sys.argv[1]), None
for line in sys.stdin:
    word, *args = line.split()
    if word == "lock":
        lock.__enter__()
    elif word == "hold":
        reader = registry.Reader(sys.argv[1], int(args[0]), "run-holding")
    elif word == "unlock":
        lock.__exit__(None, None, None)
    elif word == "release":
        reader.release()
    print("done", word, flush=True)
"""
"""Another process: takes the model directory's lock, holds a version, unlocks, releases, as told on stdin."""

IN_A_BUCKET = pytest.mark.e2e  # 1-15 s each against a store server: in make test, not in the fast set
ROOTS = ["local", pytest.param("s3", marks=IN_A_BUCKET), pytest.param("gs", marks=IN_A_BUCKET)]


class Holder:
    def __init__(self, model_dir: str, env: dict[str, str], lease_seconds: float = 0):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, model_dir, str(lease_seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def tell(self, *words: str) -> None:
        for word in words:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == f"done {word.split()[0]}\n"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def store(request, tmp_path) -> tuple[str, dict[str, str]]:
    """(a model directory holding versions 1, 2 and 3, locally or in a bucket; the environment in which another
    process reaches it with its ambient identity)."""
    if request.param == "local":
        model_dir = str(tmp_path / "digits")
    else:
        model_dir = new_bucket_url(request, request.param, "models/digits")
    env = dict(os.environ)  # with the GCS emulator's address, once its fixture has set it
    if request.param != "local":
        if request.param == "s3":
            env.update(request.getfixturevalue("s3").env)
        else:
            key = request.getfixturevalue("token_server").service_account_key()
            env[storage.GCS_KEY_ENV] = json.dumps(key)
    for version in (1, 2, 3):
        publish(model_dir, version)
    return model_dir, env


@pytest.fixture
def holders(store):
    started: list[Holder] = []

    def start(lease_seconds: float = 0) -> Holder:
        started.append(Holder(*store, lease_seconds))
        return started[-1]

    yield start
    for holder in started:
        holder.kill()


def published(model_dir: str) -> list[int]:
    return [m.version for m in registry.versions(model_dir)]


def markers(model_dir: str) -> list[str]:
    return storage.names(storage.join(model_dir, registry.READERS_DIR))


@pytest.mark.parametrize("store", ROOTS, indirect=True)
def test_a_version_another_process_holds_is_not_pruned_until_it_is_released(store, holders):
    model_dir, holder = store[0], holders()
    holder.tell("lock", "hold 1", "unlock")
    assert registry.prune(model_dir, 1, set()) == [2]
    assert published(model_dir) == [1, 3] and "2" not in storage.names(model_dir)  # no file of it left
    holder.tell("release")
    assert registry.prune(model_dir, 1, set()) == [1]
    assert published(model_dir) == [3] and markers(model_dir) == []
    assert not [n for n in storage.names(model_dir) if n.startswith(registry.CLAIM_PREFIX)]


@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_a_dead_processs_marker_holds_nothing_and_the_next_prune_deletes_it(store, holders):
    model_dir, holder = store[0], holders()
    holder.tell("lock", "hold 1", "unlock")
    holder.kill()
    assert len(markers(model_dir)) == 1  # never released
    assert registry.prune(model_dir, 1, set()) == [1, 2]
    assert markers(model_dir) == []


@IN_A_BUCKET
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_in_a_bucket_a_live_reader_renews_its_lease_and_a_dead_ones_lapses(store, holders, monkeypatch):
    """The protocol on a 2-second lease (no clock skew): a live holder keeps its version past several leases, a
    killed one's marker lapses and the next prune deletes it and the version."""
    model_dir = store[0]
    monkeypatch.setattr(registry, "CLOCK_SKEW", dt.timedelta(0))
    holder = holders(lease_seconds=2)
    holder.tell("lock", "hold 1", "unlock")
    time.sleep(5)
    assert registry.prune(model_dir, 1, set()) == [2] and published(model_dir) == [1, 3]
    holder.kill()
    assert registry.prune(model_dir, 1, set()) == []  # not lapsed yet
    time.sleep(2.5)
    assert registry.prune(model_dir, 1, set()) == [1] and markers(model_dir) == []


@IN_A_BUCKET
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_in_a_bucket_a_dead_lock_holder_blocks_only_until_its_lease_lapses(store, holders, monkeypatch, capfd):
    model_dir = store[0]
    monkeypatch.setattr(registry, "CLOCK_SKEW", dt.timedelta(0))
    monkeypatch.setattr(registry._StoreLock, "POLL_SECONDS", 0.1)
    holder = holders(lease_seconds=2)
    holder.tell("lock")
    holder.kill()
    started = time.monotonic()
    assert registry.prune(model_dir, 1, set()) == [1, 2]
    assert 1 < time.monotonic() - started < 30
    assert f"waiting for {storage.join(model_dir, registry.LOCK)}, held by" in capfd.readouterr().err
    (ticket,) = storage.names(storage.join(model_dir, registry.LOCK))  # the older tickets deleted
    assert read_record(storage.join(model_dir, registry.LOCK, ticket), LockTicket).released


@pytest.mark.parametrize("store", ROOTS, indirect=True)
def test_a_prune_waits_while_another_process_chooses_and_then_spares_its_choice(store, holders):
    model_dir, holder = store[0], holders()
    holder.tell("lock")
    deleted: list[int] = []
    prune = threading.Thread(target=lambda: deleted.extend(registry.prune(model_dir, 1, set())))
    prune.start()
    prune.join(1.5)
    assert prune.is_alive() and published(model_dir) == [1, 2, 3]  # blocked on the lock
    holder.tell("hold 1", "unlock")
    prune.join(10)
    assert deleted == [2] and published(model_dir) == [1, 3]


@pytest.mark.parametrize("store", ROOTS, indirect=True)
def test_the_baseline_an_evaluation_scores_is_held_until_it_is_done(store):
    """evaluate reads its baseline through ``held_baseline``: a prune meanwhile spares it."""
    model_dir = store[0]
    with registry.held_baseline(model_dir, "2026-11-02T00:00:00+00:00", "run-evaluating") as baseline:
        assert baseline and baseline.version == 2 and registry.held(model_dir) == {2}
        assert registry.prune(model_dir, 1, set()) == [1]
    assert registry.held(model_dir) == set()
    assert registry.prune(model_dir, 1, set()) == [2]
    nothing_yet = storage.join(storage.parent(model_dir), "unpublished")
    with registry.held_baseline(nothing_yet, "2026-11-02T00:00:00+00:00", "run-evaluating") as baseline:
        assert baseline is None
    assert not storage.names(nothing_yet)  # a run that publishes nothing leaves no model directory


@IN_A_BUCKET
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_in_a_bucket_a_prune_that_died_midway_is_finished_by_the_next_and_its_version_never_claimed(store):
    """A prune killed after hiding a version (claimed, metadata.json deleted) and before deleting its files: no
    export publishes that number meanwhile, and the next prune deletes what is left."""
    model_dir = store[0]
    registry._hide(model_dir, 1)  # what the killed prune did under the lock
    assert published(model_dir) == [2, 3] and storage.names(storage.join(model_dir, "1")) == [
        "saved_model.pb",
        "variables",
    ]
    assert claim_version(model_dir, 1, "run-backfill", "ckpt-9") == (4, False)  # 1 is the prune's; 2, 3 published
    assert registry.prune(model_dir, 2, set()) == []
    assert "1" not in storage.names(model_dir) and f"{registry.CLAIM_PREFIX}1" not in storage.names(model_dir)


@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_locally_a_prune_that_died_midway_is_finished_by_the_next(store):
    """A local prune killed after renaming a version aside and before deleting it: the next prune deletes it."""
    model_dir = store[0]
    registry._hide(model_dir, 1)  # what the killed prune did under the lock
    assert published(model_dir) == [2, 3] and os.path.isdir(registry._hidden(model_dir, 1))
    assert registry.prune(model_dir, 2, set()) == []
    assert f"{registry.HIDDEN_PREFIX}1" not in os.listdir(model_dir)


@IN_A_BUCKET
@pytest.mark.parametrize("store", ["s3", "gs"], indirect=True)
def test_in_a_bucket_the_lock_admits_one_holder_at_a_time(store):
    """Three processes take the lock in turns, each adding 1 to a count in the bucket while it holds
    it (read, wait, write): no increment is lost."""
    model_dir, env = store
    count = storage.join(model_dir, "count")
    storage.write_bytes(count, b"0")
    script = (
        "import sys, time\nfrom tfdist.infra import storage\nfrom tfdist.publishing import registry\n"
        "registry._StoreLock.POLL_SECONDS = 0.05\n"
        "for _ in range(5):\n"
        "    with registry.locked(sys.argv[1]):\n"
        "        n = int(storage.read_bytes(sys.argv[2]))\n"
        "        time.sleep(0.05)\n"
        "        storage.write_bytes(sys.argv[2], str(n + 1).encode())\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, model_dir, count], env=env) for _ in range(3)]
    assert [p.wait(300) for p in procs] == [0, 0, 0]
    assert int(storage.read_bytes(count)) == 15
