"""Local copies of an object store's artifacts: TensorFlow reads and writes local files only (TF 2.21 has no
s3:// file system), so a stage copies what it reads from the store into its scratch directory
(``TFDIST_SCRATCH``), at the same path in every process of the run, and uploads what it writes."""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import functools
import multiprocessing
import multiprocessing.queues
import os
import posixpath
import queue
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable

from tfdist.contract import CHECKPOINT_STATE, SCRATCH_ENV, kept_checkpoints, storage
from tfdist.trainer.runtime import say


def scratch_dir() -> str:
    """This host's scratch directory for stages (the launcher's choice, else one under the system's temp)."""
    return os.environ.get(SCRATCH_ENV) or os.path.join(tempfile.gettempdir(), "tfdist-scratch")


def local_path(url: str) -> str:
    """Where this host keeps ``url``'s local copy (``storage.mirror_path``)."""
    return storage.mirror_path(url, scratch_dir())


def fetch(url_dir: str, names: list[str]) -> str:
    """The local directory holding ``names`` (paths relative to ``url_dir``) as the store holds them now:
    ``url_dir`` itself if local, else its scratch copy, each file downloaded whole (beside its place, then
    renamed: processes sharing the scratch may fetch the same file at once). FileNotFoundError names a missing
    one's URL."""
    local = local_path(url_dir)
    if local == url_dir or not names:
        return local
    fs, path = storage.filesystem(url_dir)
    parts = []
    for name in names:
        final = os.path.join(local, name)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        parts.append((name, final, os.path.join(os.path.dirname(final), f".part-{uuid.uuid4().hex}")))
    try:
        fs.get([f"{path}/{name}" for name, _, _ in parts], [part for _, _, part in parts])
    except FileNotFoundError:
        missing = next(name for name in names if not storage.exists(storage.join(url_dir, name)))
        raise FileNotFoundError(storage.join(url_dir, missing)) from None
    for _, final, part in parts:
        os.replace(part, final)
    return local


def local_tree(url_dir: str) -> str:
    """The local directory of everything under ``url_dir`` (a published version): itself if local, else its
    scratch copy, downloaded anew."""
    local = local_path(url_dir)
    if local != url_dir:
        shutil.rmtree(local, ignore_errors=True)
        storage.download_tree(url_dir, local)
    return local


UPLOAD_PATIENCE = 600.0
"""Seconds an upload retries a store it cannot reach (with backoff) before the stage fails."""


UPLOAD_NICENESS = 19
"""The upload process's niceness, the lowest priority: on cores the training keeps busy, the uploads take what the
training leaves (the bench's upload-heavy training ran at 0.80–0.83 of its local rate at niceness 10, 0.91 at 19)."""


Job = Callable[[], None]
"""An upload: a picklable call (a module-level function, or a partial of one), run in the upload process."""


def retried(job: Job, what: str, patience: float = UPLOAD_PATIENCE) -> None:
    """Run ``job`` until it succeeds, waiting 0.5 s, 1 s, ... up to 15 s between tries, for ``patience`` seconds;
    then raise its last error. A missing local file or a refused permission is not retried."""
    deadline, wait = time.monotonic() + patience, 0.5
    while True:
        try:
            return job()
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as exc:
            if time.monotonic() + wait > deadline:
                raise
            say(f"{what}: {type(exc).__name__}: {exc}; trying again in {wait:.1f}s")
            time.sleep(wait)
            wait = min(wait * 2, 15.0)


class Uploader:
    """Uploads to the store in order, in a process of its own: the training never waits for the store, and the
    uploads' Python (HTTP, signing, hashing) never takes the training process's GIL. Each job is ``retried``; one
    that a later job of the same key follows in the queue is skipped (and ``discard``-ed, if it has that method);
    after one fails for good the rest are skipped and ``close`` raises. The process is a daemon: it ends with the
    training's, whatever it had left to upload (the checkpoint state is uploaded last: never a partial one)."""

    def __init__(self) -> None:
        spawn = multiprocessing.get_context("spawn")  # never fork a process TensorFlow's threads run in
        self.jobs: multiprocessing.queues.Queue[tuple[Job, str, str] | None] = spawn.Queue()
        self.jobs.cancel_join_thread()  # an ending training never waits to hand over jobs nobody will run
        self.failures: multiprocessing.queues.Queue[str] = spawn.Queue()
        self.process = spawn.Process(
            target=_upload, args=(self.jobs, self.failures), name="tfdist-uploads", daemon=True
        )
        self.process.start()
        self.failure: str | None = None

    def submit(self, job: Job, what: str, key: str | None = None) -> None:
        """Queue ``job``, which the logs call ``what``; its ``key`` (``what`` if none) names the jobs a later one
        makes needless."""
        self.jobs.put((job, what, key or what))

    def check(self) -> None:
        """Raise if an upload failed for good, or the upload process ended before its time."""
        if self.failure is None and not self.failures.empty():
            self.failure = self.failures.get()
        if self.failure is None and self.process.exitcode not in (None, 0):
            self.failure = f"the upload process ended (exit code {self.process.exitcode})"
        if self.failure:
            raise OSError(self.failure)

    def close(self) -> None:
        """Wait for every upload submitted; raise if one failed."""
        self.jobs.put(None)
        self.process.join()
        self.check()


def _upload(jobs: multiprocessing.queues.Queue, failures: multiprocessing.queues.Queue) -> None:
    """The upload process: run each job in turn until the None that ends them, skipping all after a failure, and
    a job a later one of the same key follows in the queue (a tree's upload uploads the tree as it is when it
    runs, a checkpoint's upload makes the checkpoints before it needless: the later one covers it)."""
    os.nice(UPLOAD_NICENESS)
    failed, waiting = False, collections.deque[tuple[Job, str, str] | None]()
    while True:
        if not waiting:
            waiting.append(jobs.get())
        while waiting[-1] is not None:
            try:
                waiting.append(jobs.get_nowait())
            except queue.Empty:
                break
        if (item := waiting.popleft()) is None:
            return
        job, what, key = item
        if failed or any(later is not None and later[2] == key for later in waiting):
            if discard := getattr(job, "discard", None):
                discard()
            continue
        try:
            retried(job, what)
        except Exception as exc:
            failed = True
            failures.put(f"{what} failed: {type(exc).__name__}: {exc}")


def checkpoint_files(url_dir: str, name: str) -> list[str]:
    """The names of checkpoint ``name``'s files in the store's ``url_dir`` (``<name>.index``, ``<name>.data-*``)."""
    fs, path = storage.filesystem(url_dir)
    return [posixpath.basename(p) for p in fs.glob(f"{path}/{name}.*")]


def kept_files(url_dir: str, state: str) -> list[str]:
    """The names of the files of every checkpoint ``state`` keeps in the store's ``url_dir``; FileNotFoundError
    if one is gone."""
    files = []
    for name in kept_checkpoints(state):
        if f"{name}.index" not in (found := checkpoint_files(url_dir, name)):
            raise FileNotFoundError(storage.join(url_dir, f"{name}.index"))
        files += found
    return files


def _state(path: str) -> str | None:
    """The checkpoint state file at ``path`` (a URL or a local path), None if there is none."""
    try:
        return storage.read_bytes(path).decode()
    except FileNotFoundError:
        return None


def fetch_checkpoints(url_dir: str) -> str:
    """The local directory of the checkpoints in ``url_dir``: itself if local, else its scratch copy, with the
    state file and every checkpoint it keeps. The processes of a host sharing the scratch fetch one at a time: one
    finding the store's state there already (a peer fetched it) leaves it; else the copy is made anew (whatever an
    earlier try left there removed). A checkpoint deleted meanwhile by the chief's next upload (its state no longer
    keeps it) has the newer state fetched instead."""
    local = local_path(url_dir)
    if local == url_dir:
        return local
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(f"{local}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        state = _state(storage.join(url_dir, CHECKPOINT_STATE))
        while state != _state(os.path.join(local, CHECKPOINT_STATE)):
            shutil.rmtree(local, ignore_errors=True)
            os.makedirs(local)
            if state is None:
                break
            try:
                fetch(url_dir, kept_files(url_dir, state))
            except FileNotFoundError:
                newer = _state(storage.join(url_dir, CHECKPOINT_STATE))
                if newer == state:
                    raise
                state = newer
                continue
            with open(os.path.join(local, CHECKPOINT_STATE), "w") as f:
                f.write(state)
        os.makedirs(local, exist_ok=True)
    return local


@functools.cache
def local_checkpoint(prefix: str) -> str:
    """The local prefix of the checkpoint ``prefix`` (``<dir>/ckpt-<step>``): itself if local, else its files
    fetched into the scratch (once per process: a checkpoint's files never change)."""
    if not storage.is_object_store(prefix):
        return prefix
    url_dir, name = posixpath.split(prefix)
    return os.path.join(fetch(url_dir, checkpoint_files(url_dir, name)), name)


def checkpoint_of(name: str) -> str:
    """The checkpoint a file of a checkpoint directory belongs to (``ckpt-20`` of ``ckpt-20.index``)."""
    return name.split(".", 1)[0]


def checkpoint_upload(local_dir: str, url_dir: str) -> CheckpointUpload:
    """The upload to ``url_dir`` of the checkpoints in ``local_dir`` its state keeps: the one just saved, and the
    others (the store may lack one, its upload made needless by this one). Their files are linked aside now, so
    the saver may delete them meanwhile."""
    snapshot = tempfile.mkdtemp(dir=local_dir, prefix=".uploading-")
    shutil.copyfile(os.path.join(local_dir, CHECKPOINT_STATE), os.path.join(snapshot, CHECKPOINT_STATE))
    with open(os.path.join(snapshot, CHECKPOINT_STATE)) as f:
        kept = frozenset(kept_checkpoints(f.read()))
    for name in os.listdir(local_dir):
        if checkpoint_of(name) in kept and os.path.isfile(os.path.join(local_dir, name)):
            os.link(os.path.join(local_dir, name), os.path.join(snapshot, name))
    return CheckpointUpload(snapshot, url_dir, kept)


@dataclasses.dataclass(frozen=True)
class CheckpointUpload:
    """Checkpoints' upload from a ``snapshot`` of the files of those a state file keeps: those of the checkpoints
    the store's state does not name (the ones it names are whole there, and a resumed training saves none of them
    again), then the state file (a reader restores only what the state names: never a partial checkpoint), then
    the deletion of the checkpoints the state no longer keeps. Discarded, as when a later one follows it in the
    queue, it removes its snapshot."""

    snapshot: str
    url_dir: str
    kept: frozenset[str]

    def __call__(self) -> None:
        stored = _state(storage.join(self.url_dir, CHECKPOINT_STATE))
        whole = set(kept_checkpoints(stored)) if stored else set()
        for name in os.listdir(self.snapshot):
            if checkpoint_of(name) in whole:
                os.remove(os.path.join(self.snapshot, name))
        present = storage.names(self.url_dir)
        storage.upload_tree(self.snapshot, self.url_dir, last=(CHECKPOINT_STATE,))
        stale = [n for n in present if n != CHECKPOINT_STATE and checkpoint_of(n) not in self.kept]
        storage.remove_all([storage.join(self.url_dir, name) for name in stale])
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.snapshot, ignore_errors=True)


def tree_upload(local_dir: str, url: str) -> Job:
    """The upload of the files under ``local_dir`` as they are when the job runs (a growing event file: whole)."""
    return functools.partial(storage.upload_tree, local_dir, url)
