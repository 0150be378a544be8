"""The published versions of a model: ``<model dir>/<integer version>/`` each with ``metadata.json`` (uploaded
last to an object store: a version is there once it is); the withdrawn ones hold ``withdrawn.json``, and on a
local file system are moved aside whole to ``<model dir>/.withdrawn/<version>/``. ``serving.config`` names the
live version for TF Serving (docs/object-storage.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import posixpath
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import IO

from tfdist.contract.layout import CONTROL_CHARACTERS
from tfdist.contract.publish_records import Claim, Holder, LockTicket, ReaderMarker, VersionMetadata, Withdrawn
from tfdist.contract.records import create_record, read_record_if_exists, write_record
from tfdist.infra import storage
from tfdist.infra.jsonfiles import json_bytes

METADATA = "metadata.json"
"""In each version's directory: what was published, from which run, data and checkpoint, and why."""
DATA_STATISTICS = "data_statistics.json"
"""In each version's directory: the statistics of the data it was trained on (the data manifest's), which the
data gate of a later run compares its own with."""


VOCABULARIES = "vocabularies"
"""The folder of vocabulary files (``<feature>.json``): in a run's data directory, and copied from there into each
version's directory (a later run's warm start matches table rows by them, its data gate the values outside them)."""


def vocabulary_dir(version_path: str) -> str:
    """In each version's directory: the vocabularies of the data it was trained on."""
    return os.path.join(version_path, VOCABULARIES)


WITHDRAWN_DIR = ".withdrawn"
"""In a local model directory: the withdrawn versions, ``.withdrawn/<version>/``. TF Serving takes only numeric
subdirectory names for versions, so it never reads this one, and its "latest" policy serves the newest version
left; one ``os.rename`` within the model directory moves a version here (or back) whole. An object store has no
rename: a withdrawn version stays in place with its ``withdrawn.json``."""
WITHDRAWN = "withdrawn.json"
"""In a withdrawn version's directory: who withdrew it, when and why."""
SERVING_CONFIG = "serving.config"
"""In a model's directory: TF Serving's model config (``--model_config_file``) naming the live version alone
(``model_version_policy { specific }``), rewritten whole after every publish, withdrawal and restore: TF Serving
reading it never loads a version still being uploaded, nor a withdrawn one."""
WARM_START_CHECKPOINT = os.path.join("checkpoint", "ckpt")
"""In each version's directory: the training checkpoint it was exported from (model and optimizer), which a later
run's warm start restores: it never depends on another run's working directory."""


MAX_VERSIONS_PER_INTERVAL = 100
"""Exports one data interval may publish: its versions are ``version_number(end) + n``, n below this."""
CLOCK_SKEW = dt.timedelta(minutes=5)
"""How much later than a run's creation its window may end, and a version number may run ahead of the clock: the
scheduler's, the trigger's and the workers' clocks may disagree by this much."""


def version_number(interval_end: dt.datetime) -> int:
    """The first version number of a data interval ending at ``interval_end``: its UTC minute, then two digits
    for the interval's n-th export (20261121000000: the interval ending 2026-11-21 00:00 UTC, n = 0). TF Serving
    serves the highest number, so the version of the newest interval."""
    return int(interval_end.astimezone(dt.UTC).strftime("%Y%m%d%H%M")) * MAX_VERSIONS_PER_INTERVAL


LOCK = ".registry.lock"
"""In a model's directory: the registry's lock, held while a run chooses the version it reads (a warm start's parent,
the baseline evaluate scores) and while an export prunes, so that neither sees the other half done, across
processes and hosts. Locally a file locked with ``fcntl.flock`` (exclusive); in an object store a folder of
numbered tickets (``_StoreLock``)."""
READERS_DIR = ".readers"
"""In a model's directory: one marker per process that holds a version it reads, ``.readers/<random>.json``
(version, run, host, pid), created under ``LOCK``. A prune never deletes a held version. Locally the holder
``flock``-s its marker (shared): one nobody locks is a dead process's. In an object store the marker is a lease
the holder renews (``until``): one past ``until`` plus CLOCK_SKEW is a dead process's. The next prune deletes a
dead process's marker."""
LEASE = dt.timedelta(minutes=2)
"""In an object store: how long a hold of ``LOCK`` or a reader's marker lasts unless renewed. Another process takes
it as lapsed only CLOCK_SKEW after (clocks of hosts may disagree by that much), so a dead holder keeps the lock for
at most LEASE + CLOCK_SKEW."""
HIDDEN_PREFIX = ".deleting-"
"""In a local model's directory: ``.deleting-<version>``, a version a prune moved aside to delete."""
CLAIM_PREFIX = ".claim-"
"""In a model's directory: ``.claim-<version>``, there while that version is being written or deleted: an export's
(naming its run and checkpoint, made exclusively) until its version is published, a prune's (``{"pruning": true}``,
in an object store) until its version is deleted. An export publishes no version number another has claimed."""
REASON_MAX_CHARS = 2000
"""The longest withdrawal reason (after stripping): a sentence or a link, not a document."""


def is_version_name(name: str) -> bool:
    """A version's directory name as TF Serving reads it: ASCII digits only (``str.isdigit`` takes others)."""
    return name.isascii() and name.isdigit()


def metadata_file(version_dir: str) -> str:
    return os.path.join(version_dir, METADATA)


def claim_path(model_dir: str, version: int) -> str:
    return storage.join(model_dir, f"{CLAIM_PREFIX}{version}")


class RegistryError(ValueError):
    """A withdrawal or restore that cannot be done (already withdrawn, no reason, a version in the way)."""


class UnknownVersion(RegistryError):
    """No such version to withdraw (or restore)."""


@dataclasses.dataclass(frozen=True)
class PublishedVersion:
    """A version in a model directory: where it is, its metadata, and its withdrawal (None: published)."""

    path: str
    metadata: VersionMetadata
    withdrawn: Withdrawn | None = None

    @property
    def version(self) -> int:
        return self.metadata.version


def _versions_in(parent: str) -> list[PublishedVersion]:
    """Each ``<parent>/<integer>/`` with ``metadata.json``, oldest first."""
    found = []
    for name in storage.names(parent):
        path = storage.join(parent, name)
        if is_version_name(name) and (metadata := read_record_if_exists(metadata_file(path), VersionMetadata)):
            found.append(PublishedVersion(path, metadata))
    return sorted(found, key=lambda m: m.version)


def versions(model_dir: str) -> list[PublishedVersion]:
    """Every published version, oldest first; withdrawn ones are not listed."""
    found = _versions_in(model_dir)
    if not storage.is_object_store(model_dir):
        return found
    return [m for m in found if not storage.exists(storage.join(m.path, WITHDRAWN))]


def withdrawn(model_dir: str) -> list[PublishedVersion]:
    """Every withdrawn version (with its ``withdrawn``: who, when, why), oldest first."""
    aside = storage.is_object_store(model_dir)
    found = _versions_in(model_dir if aside else os.path.join(model_dir, WITHDRAWN_DIR))
    records = [(m, read_record_if_exists(storage.join(m.path, WITHDRAWN), Withdrawn)) for m in found]
    return [dataclasses.replace(m, withdrawn=record) for m, record in records if record is not None]


def withdrawn_path(model_dir: str, version: int) -> str:
    """Where a withdrawn version is: moved aside locally, in place in an object store."""
    if storage.is_object_store(model_dir):
        return storage.join(model_dir, str(version))
    return os.path.join(model_dir, WITHDRAWN_DIR, str(version))


def is_withdrawn(model_dir: str, version: int) -> bool:
    return storage.exists(storage.join(withdrawn_path(model_dir, version), WITHDRAWN))


def live(model_dir: str) -> int | None:
    """The version TF Serving's "latest" policy serves: the newest published one (None: there is none)."""
    found = versions(model_dir)
    return found[-1].version if found else None


def _check_withdrawable(model_dir: str, version: int, reason: str) -> str:
    """The version's directory; RegistryError for an empty reason, a withdrawn or an unknown version."""
    path = storage.join(model_dir, str(version))
    if problem := reason_problem(reason):
        raise RegistryError(problem)
    if is_withdrawn(model_dir, version):
        raise RegistryError(f"version {version} of {model_dir} is already withdrawn")
    if not storage.exists(metadata_file(path)):
        published = ", ".join(str(m.version) for m in versions(model_dir)) or "none"
        raise UnknownVersion(f"{model_dir} has no published version {version} (published: {published})")
    return path


def reason_problem(reason: str) -> str | None:
    """Why ``reason`` is no withdrawal reason (None: it is): empty, longer than REASON_MAX_CHARS, or holding control
    characters (a terminal's escape codes, NUL; a newline too: it is one line in ``tfdist models``)."""
    if not reason.strip():
        return "reason: a reason is required to withdraw a version (say why it is bad)"
    if len(reason.strip()) > REASON_MAX_CHARS:
        return f"reason: {len(reason.strip())} characters; at most {REASON_MAX_CHARS} (link to a longer account)"
    if CONTROL_CHARACTERS.search(reason):
        return "reason: control characters (escape codes, newlines, NUL) are refused; write it as one line of text"
    return None


@dataclasses.dataclass(frozen=True)
class VersionChange:
    """A withdrawal or restore done: the version's withdrawal record, and ``live``: the version served now (None:
    no version is left)."""

    withdrawn: Withdrawn
    live: int | None


def withdraw(model_dir: str, version: int, reason: str, by: str) -> VersionChange:
    """Withdraw ``version``: its ``withdrawn.json`` (who, when, why) written inside it, then (locally) the version
    moved aside to ``.withdrawn/<version>/`` in one rename; TF Serving's config rewritten."""
    path = _check_withdrawable(model_dir, version, reason)
    at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    record = Withdrawn(version=version, by=by, reason=reason.strip(), at=at)
    write_record(storage.join(path, WITHDRAWN), record)
    if not storage.is_object_store(model_dir):
        os.makedirs(os.path.join(model_dir, WITHDRAWN_DIR), exist_ok=True)
        try:
            os.rename(path, withdrawn_path(model_dir, version))
        except OSError:
            os.remove(os.path.join(path, WITHDRAWN))  # still published: no record claims otherwise
            raise
    return VersionChange(record, write_serving_config(model_dir))


def restore(model_dir: str, version: int) -> VersionChange:
    """Put a withdrawn version back (locally renamed into place; refused while a version of that number is
    published); TF Serving's config rewritten. The withdrawal record it had."""
    aside, path = withdrawn_path(model_dir, version), storage.join(model_dir, str(version))
    record = read_record_if_exists(storage.join(aside, WITHDRAWN), Withdrawn)
    if record is None or not storage.exists(metadata_file(aside)):
        raise UnknownVersion(f"version {version} of {model_dir} is not withdrawn")
    if aside != path:
        if os.path.exists(path):
            raise RegistryError(f"{path} exists: a version {version} is published; refusing to replace it")
        os.rename(aside, path)
    storage.remove(storage.join(path, WITHDRAWN))
    return VersionChange(record, write_serving_config(model_dir))


def serving_config(model_dir: str, live_version: int | None) -> str:
    """TF Serving's model config (text format) serving ``live_version`` alone from ``model_dir``."""
    name = posixpath.basename(model_dir.rstrip("/"))
    served = f"\n        versions: {live_version}" if live_version is not None else ""
    return (
        "model_config_list {\n  config {\n"
        f'    name: "{name}"\n    base_path: "{model_dir}"\n    model_platform: "tensorflow"\n'
        f"    model_version_policy {{\n      specific {{{served}\n      }}\n    }}\n"
        "  }\n}\n"
    )


def write_serving_config(model_dir: str) -> int | None:
    """Write TF Serving's config for the live version; again while a listing made after the write finds another
    (a writer racing this one that listed before this one's version was there gets overwritten: the last word is
    a listing made after every write). The live version."""
    written = object()
    while (now := live(model_dir)) != written:
        storage.write_bytes(storage.join(model_dir, SERVING_CONFIG), serving_config(model_dir, now).encode())
        written = now
    return now


def warm_start_checkpoint(version_dir: str) -> str:
    """The checkpoint prefix of a version's training checkpoint (``tf.train.Checkpoint.read`` takes it)."""
    return os.path.join(version_dir, WARM_START_CHECKPOINT)


def lineage(model_dir: str, version: int) -> list[PublishedVersion]:
    """``version``, then its parent (the version it was warm-started from), and so on back to a cold start or to a
    parent no longer kept (its number is in the last one's ``parent``). A withdrawn version is in the chain with
    its ``withdrawn`` record."""
    by_version = {m.version: m for m in [*withdrawn(model_dir), *versions(model_dir)]}
    chain: list[PublishedVersion] = []
    at: int | None = version
    while at in by_version and len(chain) < len(by_version):
        chain.append(by_version[at])
        parent = by_version[at].metadata.parent
        at = parent.version if parent else None
    return chain


def baseline_for(model_dir: str, interval_end: str, run_id: str) -> PublishedVersion | None:
    """The newest version published for a data interval ending no later than ``interval_end`` by another
    run: what was live for this run's window (a backfill of last Tuesday compares with last Tuesday's)."""
    end = dt.datetime.fromisoformat(interval_end)
    earlier = [
        m
        for m in versions(model_dir)
        if m.metadata.run_id != run_id and dt.datetime.fromisoformat(m.metadata.data_interval_end) <= end
    ]
    return earlier[-1] if earlier else None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _lapsed(until: str) -> bool:
    """Whether a lease ending at ``until`` is over by this host's clock, allowing for CLOCK_SKEW."""
    return _now() > dt.datetime.fromisoformat(until) + CLOCK_SKEW


def _holder() -> Holder:
    return Holder(host=os.uname().nodename, pid=os.getpid())


class _StoreLock:
    """``LOCK`` in an object store, which has no file lock: tickets ``<LOCK>/<n>.json``, each made by a conditional
    create (of two makers, one wins). The maker of the highest ticket holds the lock until it writes its ticket
    released or its LEASE is over. To take it: once the highest ticket is released or lapsed, make the next one,
    and hold it if no higher one appeared meanwhile (a maker that listed before older tickets were deleted may make
    a lower one: the higher one holds). The holder deletes the tickets below its own, and stops (``check``) once its
    lease is over: by then another may hold the lock."""

    POLL_SECONDS = 1.0

    def __init__(self, model_dir: str) -> None:
        self.folder = storage.join(model_dir, LOCK)
        self.ticket, self.until = 0, _now()
        self.record: LockTicket | None = None

    def _path(self, ticket: int) -> str:
        return storage.join(self.folder, f"{ticket}.json")

    def _tickets(self) -> list[int]:
        numbers = [name.removesuffix(".json") for name in storage.names(self.folder)]
        return sorted(int(n) for n in numbers if is_version_name(n))

    def acquire(self) -> None:
        told = None
        while True:
            tickets = self._tickets()
            top = tickets[-1] if tickets else 0
            held_by = read_record_if_exists(self._path(top), LockTicket) if top else None
            if top and (held_by is None or not (held_by.released or _lapsed(held_by.until))):
                if held_by and held_by != told:
                    holder = held_by.holder
                    print(
                        f"waiting for {self.folder}, held by {holder.host} (pid {holder.pid}) until {held_by.until}",
                        file=sys.stderr,
                    )
                    told = held_by
                time.sleep(self.POLL_SECONDS)
                continue
            mine, until = top + 1, _now() + LEASE
            mine_record = LockTicket(holder=_holder(), until=until.isoformat())
            if create_record(self._path(mine), mine_record) and (now := self._tickets())[-1] == mine:
                self.ticket, self.until, self.record = mine, until, mine_record
                for old in now[:-1]:
                    storage.remove(self._path(old))
                return

    def check(self) -> None:
        """Raise RegistryError once this hold's lease is over."""
        if _now() > self.until:
            raise RegistryError(f"{self.folder}: this process's hold lasted past its lease ({LEASE}); stopped")

    def release(self) -> None:
        if self.record is not None:
            write_record(self._path(self.ticket), self.record.model_copy(update={"released": True}))


@contextlib.contextmanager
def locked(model_dir: str) -> Iterator[Callable[[], None]]:
    """Hold the model directory's LOCK (made, with the directory, if missing); blocks while another holds it.
    Yields a check to call before each change: in an object store it raises once the hold's lease is over."""
    if storage.is_object_store(model_dir):
        lock = _StoreLock(model_dir)
        lock.acquire()
        try:
            yield lock.check
        finally:
            lock.release()
        return
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, LOCK), "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield lambda: None  # closing the file releases it


class Reader:
    """A version this process holds as one it reads, never pruned until ``release`` or this process's end (the
    kernel drops a dead process's lock; a store's lease lapses). Make it under ``locked``, in the same hold as the
    choice. In an object store a thread renews the lease every LEASE / 4."""

    def __init__(self, model_dir: str, version: int, run_id: str):
        name = f"{uuid.uuid4().hex}.json"
        holder = _holder()
        self.record = ReaderMarker(version=version, run_id=run_id, host=holder.host, pid=holder.pid)
        self.path = storage.join(model_dir, READERS_DIR, name)
        self.released = threading.Event()
        self.file: IO[bytes] | None = None
        self.keeper: threading.Thread | None = None
        if storage.is_object_store(model_dir):
            self._renew()
            self.keeper = threading.Thread(target=self._keep, name="tfdist-registry-lease", daemon=True)
            self.keeper.start()
            return
        os.makedirs(os.path.join(model_dir, READERS_DIR), exist_ok=True)
        self.file = open(self.path, "xb")  # open until release
        fcntl.flock(self.file, fcntl.LOCK_SH)
        self.file.write(json_bytes(self.record.payload()))  # into the file it locks: not replaced (write_record)
        self.file.flush()

    def _renew(self) -> None:
        write_record(self.path, self.record.model_copy(update={"until": (_now() + LEASE).isoformat()}))

    def _keep(self) -> None:
        while not self.released.wait(LEASE.total_seconds() / 4):
            try:
                self._renew()
            except Exception as exc:  # the store unreachable: tried again next time, within the lease
                print(f"could not renew {self.path} (tried again in {LEASE / 4}): {exc!r}", file=sys.stderr)

    def release(self) -> None:
        self.released.set()
        if self.keeper:
            self.keeper.join()  # no renewal after the removal
        storage.remove(self.path)
        if self.file:
            self.file.close()


@contextlib.contextmanager
def held_baseline(model_dir: str, interval_end: str, run_id: str) -> Iterator[PublishedVersion | None]:
    """``baseline_for``'s version, chosen under ``locked`` and held (``Reader``) while the caller reads it: no prune
    deletes it meanwhile. Without a model directory there is none (and none is made)."""
    if not storage.names(model_dir):
        yield None
        return
    with locked(model_dir):
        baseline = baseline_for(model_dir, interval_end, run_id)
        reader = Reader(model_dir, baseline.version, run_id) if baseline else None
    try:
        yield baseline
    finally:
        if reader:
            reader.release()


def held(model_dir: str) -> set[int]:
    """The versions live processes hold (under ``locked``); dead processes' markers are deleted."""
    readers = storage.join(model_dir, READERS_DIR)
    if storage.is_object_store(model_dir):
        found = set()
        for name in storage.names(readers):
            lease = read_record_if_exists(path := storage.join(readers, name), ReaderMarker)
            if lease and (lease.until is None or _lapsed(lease.until)):  # a store's marker lives by its lease
                storage.remove(path)
            elif lease:
                found.add(lease.version)
        return found
    return _locked_markers(readers)


def _locked_markers(readers: str) -> set[int]:
    """The versions of the local markers a process locks; the others deleted."""
    found = set()
    for name in os.listdir(readers) if os.path.isdir(readers) else []:
        with contextlib.suppress(FileNotFoundError), open(os.path.join(readers, name)) as marker:
            try:
                fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.add(ReaderMarker.parse(json.load(marker), marker.name).version)
            else:
                os.remove(marker.name)  # nobody holds it: its process ended without releasing it
    return found


def prune(model_dir: str, keep: int, protect: set[int]) -> list[int]:
    """Delete all but the newest ``keep`` versions (so never the live one), never one in ``protect`` nor one a
    running process holds (``held``); return the deleted ones. Each is made invisible under ``locked`` (locally
    renamed aside; in a store, claimed and its metadata.json deleted), then deleted outside the lock; what a prune
    that died midway left is deleted by the next."""
    with locked(model_dir) as check:
        left = _unfinished_deletions(model_dir)
        spared = protect | held(model_dir)
        doomed = [v for v in [m.version for m in versions(model_dir)][:-keep] if v not in spared]
        for version in doomed:
            check()
            _hide(model_dir, version)
    for version in [*left, *doomed]:
        _delete_hidden(model_dir, version)
    return doomed


def _hidden(model_dir: str, version: int) -> str:
    """Where a local prune moves a version aside, out of every reader's sight."""
    return os.path.join(model_dir, f"{HIDDEN_PREFIX}{version}")


def _hide(model_dir: str, version: int) -> None:
    """Make a version invisible to every reader: locally renamed aside; in a store, claimed for its deletion, then
    its metadata.json deleted."""
    if storage.is_object_store(model_dir):
        write_record(claim_path(model_dir, version), Claim(pruning=True))
        storage.remove(metadata_file(storage.join(model_dir, str(version))))
        return
    os.rename(os.path.join(model_dir, str(version)), _hidden(model_dir, version))


def _delete_hidden(model_dir: str, version: int) -> None:
    """Delete a hidden version's files (in a store, then its claim)."""
    if storage.is_object_store(model_dir):
        storage.remove_tree(storage.join(model_dir, str(version)))
        storage.remove(claim_path(model_dir, version))
        return
    shutil.rmtree(_hidden(model_dir, version), ignore_errors=True)


def _unfinished_deletions(model_dir: str) -> list[int]:
    """The versions a prune hid but did not finish deleting (it died midway): locally, those renamed aside; in a
    store, those claimed for pruning."""
    if not storage.is_object_store(model_dir):
        return _marked_versions(model_dir, HIDDEN_PREFIX)
    return [
        v
        for v in _marked_versions(model_dir, CLAIM_PREFIX)
        if (claim := read_record_if_exists(claim_path(model_dir, v), Claim)) and claim.pruning
    ]


def _marked_versions(model_dir: str, prefix: str) -> list[int]:
    """The versions named by the entries ``<prefix><version>`` of the model directory."""
    marked = [n.removeprefix(prefix) for n in storage.names(model_dir) if n.startswith(prefix)]
    return [int(v) for v in marked if is_version_name(v)]
