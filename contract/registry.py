"""The published versions of a model: ``<model dir>/<integer version>/`` each with ``metadata.json`` (uploaded
last to an object store: a version is there once it is); the withdrawn ones hold ``withdrawn.json``, and on a
local file system are moved aside whole to ``<model dir>/.withdrawn/<version>/``. ``serving.config`` names the
live version for TF Serving (docs/object-storage.md)."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

from tfdist.contract import storage
from tfdist.contract.layout import CONTROL_CHARACTERS
from tfdist.contract.records import read_json_if_exists, write_json_atomic

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
"""In a model's directory: the file locked (``fcntl.flock``, exclusive) while a run chooses its warm-start parent and
while an export prunes, so that neither sees the other half done, across processes and hosts."""
READERS_DIR = ".readers"
"""In a model's directory: one marker per training process that holds a version as its warm-start parent,
``.readers/<random>.json`` (version, run, host, pid), created under ``LOCK`` and ``flock``-ed (shared) by that
process while it holds it. A prune never deletes a held version; a marker nobody locks is a dead process's, and the
next prune deletes it."""
REASON_MAX_CHARS = 2000
"""The longest withdrawal reason (after stripping): a sentence or a link, not a document."""


def is_version_name(name: str) -> bool:
    """A version's directory name as TF Serving reads it: ASCII digits only (``str.isdigit`` takes others)."""
    return name.isascii() and name.isdigit()


def metadata_file(version_dir: str) -> str:
    return os.path.join(version_dir, METADATA)


class RegistryError(ValueError):
    """A withdrawal or restore that cannot be done (already withdrawn, no reason, a version in the way)."""


class UnknownVersion(RegistryError):
    """No such version to withdraw (or restore)."""


def _versions_in(parent: str) -> list[dict[str, Any]]:
    """The metadata (plus ``path``) of each ``<parent>/<integer>/`` with ``metadata.json``, oldest first."""
    found = []
    for name in storage.names(parent):
        path = storage.join(parent, name)
        if is_version_name(name) and (metadata := read_json_if_exists(metadata_file(path))) is not None:
            found.append({**metadata, "path": path})
    return sorted(found, key=lambda m: m["version"])


def versions(model_dir: str) -> list[dict[str, Any]]:
    """Every published version's metadata (plus its ``path``), oldest first; withdrawn ones are not listed."""
    found = _versions_in(model_dir)
    if not storage.is_object_store(model_dir):
        return found
    return [m for m in found if not storage.exists(storage.join(m["path"], WITHDRAWN))]


def withdrawn(model_dir: str) -> list[dict[str, Any]]:
    """Every withdrawn version's metadata (plus its ``path`` and ``withdrawn``: who, when, why), oldest first."""
    aside = storage.is_object_store(model_dir)
    found = _versions_in(model_dir if aside else os.path.join(model_dir, WITHDRAWN_DIR))
    records = [(m, read_json_if_exists(storage.join(m["path"], WITHDRAWN))) for m in found]
    return [{**m, "withdrawn": record} for m, record in records if record is not None]


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
    return found[-1]["version"] if found else None


def _check_withdrawable(model_dir: str, version: int, reason: str) -> str:
    """The version's directory; RegistryError for an empty reason, a withdrawn or an unknown version."""
    path = storage.join(model_dir, str(version))
    if problem := reason_problem(reason):
        raise RegistryError(problem)
    if is_withdrawn(model_dir, version):
        raise RegistryError(f"version {version} of {model_dir} is already withdrawn")
    if not storage.exists(metadata_file(path)):
        published = ", ".join(str(m["version"]) for m in versions(model_dir)) or "none"
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


def withdraw(model_dir: str, version: int, reason: str, by: str) -> dict[str, Any]:
    """Withdraw ``version``: its ``withdrawn.json`` (who, when, why) written inside it, then (locally) the version
    moved aside to ``.withdrawn/<version>/`` in one rename; TF Serving's config rewritten. The record, plus
    ``live``: the version served now (None: no version is left)."""
    path = _check_withdrawable(model_dir, version, reason)
    record = {
        "version": version,
        "by": by,
        "reason": reason.strip(),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    write_json_atomic(storage.join(path, WITHDRAWN), record)
    if not storage.is_object_store(model_dir):
        os.makedirs(os.path.join(model_dir, WITHDRAWN_DIR), exist_ok=True)
        try:
            os.rename(path, withdrawn_path(model_dir, version))
        except OSError:
            os.remove(os.path.join(path, WITHDRAWN))  # still published: no record claims otherwise
            raise
    return {**record, "live": write_serving_config(model_dir)}


def restore(model_dir: str, version: int) -> dict[str, Any]:
    """Put a withdrawn version back (locally renamed into place; refused while a version of that number is
    published); TF Serving's config rewritten. Its withdrawal record, plus ``live``: the version served now."""
    aside, path = withdrawn_path(model_dir, version), storage.join(model_dir, str(version))
    record = read_json_if_exists(storage.join(aside, WITHDRAWN))
    if record is None or not storage.exists(metadata_file(aside)):
        raise UnknownVersion(f"version {version} of {model_dir} is not withdrawn")
    if aside != path:
        if os.path.exists(path):
            raise RegistryError(f"{path} exists: a version {version} is published; refusing to replace it")
        os.rename(aside, path)
    storage.remove(storage.join(path, WITHDRAWN))
    return {**record, "live": write_serving_config(model_dir)}


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


def lineage(model_dir: str, version: int) -> list[dict[str, Any]]:
    """``version``'s metadata, then its parent's (the version it was warm-started from), and so on back to a cold
    start or to a parent no longer kept (its number is in the last one's ``parent``). A withdrawn version is in
    the chain with its ``withdrawn`` record."""
    by_version = {m["version"]: m for m in [*withdrawn(model_dir), *versions(model_dir)]}
    chain: list[dict[str, Any]] = []
    at: int | None = version
    while at in by_version and len(chain) < len(by_version):
        chain.append(by_version[at])
        at = (by_version[at].get("parent") or {}).get("version")
    return chain


def baseline_for(model_dir: str, interval_end: str, run_id: str) -> dict[str, Any] | None:
    """The newest version published for a data interval ending no later than ``interval_end`` by another
    run: what was live for this run's window (a backfill of last Tuesday compares with last Tuesday's)."""
    end = dt.datetime.fromisoformat(interval_end)
    earlier = [
        m
        for m in versions(model_dir)
        if m["run_id"] != run_id and dt.datetime.fromisoformat(m["data_interval_end"]) <= end
    ]
    return earlier[-1] if earlier else None


@contextlib.contextmanager
def locked(model_dir: str) -> Iterator[None]:
    """Hold the model directory's LOCK (made, with the directory, if missing); blocks while another holds it. An
    object store's model directory has no lock yet: nothing is pruned there (the spec refuses keep_versions)."""
    if storage.is_object_store(model_dir):
        yield
        return
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, LOCK), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases it


class Reader:
    """A version this process holds as its warm-start parent, never pruned until ``release`` or this process's end
    (the kernel drops a dead process's lock). Make it under ``locked``, in the same hold as the choice."""

    def __init__(self, model_dir: str, version: int, run_id: str):
        os.makedirs(os.path.join(model_dir, READERS_DIR), exist_ok=True)
        self.path = os.path.join(model_dir, READERS_DIR, f"{uuid.uuid4().hex}.json")
        self.file = open(self.path, "x")  # open until release
        fcntl.flock(self.file, fcntl.LOCK_SH)
        json.dump({"version": version, "run_id": run_id, "host": os.uname().nodename, "pid": os.getpid()}, self.file)
        self.file.flush()

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        self.file.close()


@contextlib.contextmanager
def held_baseline(model_dir: str, interval_end: str, run_id: str) -> Iterator[dict[str, Any] | None]:
    """``baseline_for``'s version, chosen under ``locked`` and held (``Reader``) while the caller reads it: no prune
    deletes it meanwhile. Without a model directory there is none (and none is made)."""
    if storage.is_object_store(model_dir):  # no lock yet: never pruned there (the spec refuses keep_versions)
        yield baseline_for(model_dir, interval_end, run_id)
        return
    if not os.path.isdir(model_dir):
        yield None
        return
    with locked(model_dir):
        baseline = baseline_for(model_dir, interval_end, run_id)
        reader = Reader(model_dir, baseline["version"], run_id) if baseline else None
    try:
        yield baseline
    finally:
        if reader:
            reader.release()


def held(model_dir: str) -> set[int]:
    """The versions live processes hold as their warm-start parent (under ``locked``); dead processes' markers are
    deleted."""
    found = set()
    readers = os.path.join(model_dir, READERS_DIR)
    for name in os.listdir(readers) if os.path.isdir(readers) else []:
        with contextlib.suppress(FileNotFoundError), open(os.path.join(readers, name)) as marker:
            try:
                fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.add(json.load(marker)["version"])
            else:
                os.remove(marker.name)  # nobody holds it: its process ended without releasing it
    return found


def prune(model_dir: str, keep: int, protect: set[int]) -> list[int]:
    """Delete all but the newest ``keep`` versions (so never the live one), never one in ``protect`` nor one a
    running training process holds as its warm-start parent (``held``); return the deleted ones."""
    with locked(model_dir):
        spared = protect | held(model_dir)
        doomed = [v for v in [m["version"] for m in versions(model_dir)][:-keep] if v not in spared]
        for version in doomed:
            hidden = os.path.join(model_dir, f".deleting-{version}")
            os.rename(os.path.join(model_dir, str(version)), hidden)  # invisible at once, then removed
            shutil.rmtree(hidden)
    return doomed
