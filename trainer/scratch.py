"""Local copies of an object store's artifacts: TensorFlow reads and writes local files only (TF 2.21 has no
s3:// file system), so a stage copies what it reads from the store into its scratch directory
(``TFDIST_SCRATCH``), at the same path in every process of the run, and uploads what it writes."""

from __future__ import annotations

import fcntl
import functools
import os
import posixpath
import queue
import shutil
import tempfile
import threading
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


def retried(job: Callable[[], None], what: str, patience: float = UPLOAD_PATIENCE) -> None:
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
    """Uploads to the store in order, on a thread of its own: the training thread never waits for the store. Each
    job is ``retried``; after one fails for good the rest are skipped and ``close`` raises."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Callable[[], None], str] | None] = queue.Queue()
        self.failure: str | None = None
        self.thread = threading.Thread(target=self._run, name="tfdist-uploads", daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[], None], what: str) -> None:
        self.jobs.put((job, what))

    def _run(self) -> None:
        while (item := self.jobs.get()) is not None:
            job, what = item
            if self.failure is None:
                try:
                    retried(job, what)
                except Exception as exc:
                    self.failure = f"{what} failed: {type(exc).__name__}: {exc}"

    def check(self) -> None:
        """Raise if an upload failed for good."""
        if self.failure:
            raise OSError(self.failure)

    def close(self) -> None:
        """Wait for every upload submitted; raise if one failed."""
        self.jobs.put(None)
        self.thread.join()
        self.check()


def checkpoint_files(url_dir: str, name: str) -> list[str]:
    """The names of checkpoint ``name``'s files in the store's ``url_dir`` (``<name>.index``, ``<name>.data-*``)."""
    fs, path = storage.filesystem(url_dir)
    return [posixpath.basename(p) for p in fs.glob(f"{path}/{name}.*")]


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
    earlier try left there removed)."""
    local = local_path(url_dir)
    if local == url_dir:
        return local
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(f"{local}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        state = _state(storage.join(url_dir, CHECKPOINT_STATE))
        if state == _state(os.path.join(local, CHECKPOINT_STATE)):
            os.makedirs(local, exist_ok=True)
            return local
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        if state is not None:
            fetch(url_dir, [file for name in kept_checkpoints(state) for file in checkpoint_files(url_dir, name)])
            with open(os.path.join(local, CHECKPOINT_STATE), "w") as f:
                f.write(state)
    return local


@functools.cache
def local_checkpoint(prefix: str) -> str:
    """The local prefix of the checkpoint ``prefix`` (``<dir>/ckpt-<step>``): itself if local, else its files
    fetched into the scratch (once per process: a checkpoint's files never change)."""
    if not storage.is_object_store(prefix):
        return prefix
    url_dir, name = posixpath.split(prefix)
    return os.path.join(fetch(url_dir, checkpoint_files(url_dir, name)), name)


def checkpoint_upload(local_dir: str, url_dir: str, prefix: str) -> Callable[[], None]:
    """The upload of the checkpoint just saved at local ``prefix``: its files, then the state file (a reader
    restores only what the state names: never a partial checkpoint), then the deletion of the checkpoints the state
    no longer keeps. Its files are linked aside now, so the saver may delete them meanwhile."""
    snapshot = tempfile.mkdtemp(dir=local_dir, prefix=".uploading-")
    for name in os.listdir(local_dir):
        if name.startswith(os.path.basename(prefix) + "."):
            os.link(os.path.join(local_dir, name), os.path.join(snapshot, name))
    shutil.copyfile(os.path.join(local_dir, CHECKPOINT_STATE), os.path.join(snapshot, CHECKPOINT_STATE))

    def upload() -> None:
        storage.upload_tree(snapshot, url_dir, last=(CHECKPOINT_STATE,))
        with open(os.path.join(snapshot, CHECKPOINT_STATE)) as f:
            kept = set(kept_checkpoints(f.read()))
        for name in storage.names(url_dir):
            if name != CHECKPOINT_STATE and name.split(".", 1)[0] not in kept:
                storage.remove(storage.join(url_dir, name))
        shutil.rmtree(snapshot)

    return upload


def tree_upload(local_dir: str, url: str) -> Callable[[], None]:
    """The upload of the files under ``local_dir`` as they are when the job runs (a growing event file: whole)."""
    return lambda: storage.upload_tree(local_dir, url)
