"""Local copies of an object store's artifacts: TensorFlow reads and writes local files only (TF 2.21 has no
s3:// file system), so a stage copies what it reads from the store into its scratch directory
(``TFDIST_SCRATCH``), at the same path in every process of the run, and uploads what it writes."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os
import posixpath
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator

from tfdist.contract.launch import SCRATCH_ENV
from tfdist.contract.progress import CHECKPOINT_STATE, checkpoint_state, kept_checkpoints
from tfdist.infra import storage
from tfdist.trainer.uploads import Job


def scratch_dir() -> str:
    """This host's scratch directory for stages (the launcher's choice, else one under the system's temp)."""
    return os.environ.get(SCRATCH_ENV) or os.path.join(tempfile.gettempdir(), "tfdist-scratch")


def local_path(url: str) -> str:
    """Where this host keeps ``url``'s local copy (``storage.mirror_path``)."""
    return storage.mirror_path(url, scratch_dir())


@contextlib.contextmanager
def host_lock(path: str) -> Iterator[None]:
    """Held by one process at a time of those sharing the scratch (a host's), over the block: an flock on the file
    ``path`` (made if missing), released as the file closes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fetch(url_dir: str, names: list[str]) -> str:
    """The local directory holding ``names`` (paths relative to ``url_dir``) as the store holds them: ``url_dir``
    itself if local, else its scratch copy. Each file is downloaded once per scratch (what a stage reads never
    changes while it runs): the processes sharing the scratch fetch one at a time, each downloading what is not
    there yet, whole (beside its place, then renamed). FileNotFoundError names a missing one's URL."""
    local = local_path(url_dir)
    if local == url_dir or not names:
        return local
    with host_lock(f"{local}.fetching"):
        _download(url_dir, [name for name in names if not os.path.exists(os.path.join(local, name))], local)
    return local


def _download(url_dir: str, names: list[str], local: str) -> None:
    if not names:
        return
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


def local_tree(url_dir: str) -> str:
    """The local directory of everything under ``url_dir`` (a published version): itself if local, else its
    scratch copy, downloaded anew."""
    local = local_path(url_dir)
    if local != url_dir:
        shutil.rmtree(local, ignore_errors=True)
        storage.download_tree(url_dir, local)
    return local


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
    with host_lock(f"{local}.lock"):
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


def checkpoint_upload(local_dir: str, url_dir: str, keep: int) -> CheckpointUpload:
    """The upload to ``url_dir`` of the latest checkpoint in ``local_dir``, the store keeping the last ``keep``
    uploaded. Its files are linked aside now, so the saver may delete them meanwhile."""
    snapshot = tempfile.mkdtemp(dir=local_dir, prefix=".uploading-")
    with open(os.path.join(local_dir, CHECKPOINT_STATE)) as f:
        latest = kept_checkpoints(f.read())[-1]
    for name in os.listdir(local_dir):
        if checkpoint_of(name) == latest and os.path.isfile(os.path.join(local_dir, name)):
            os.link(os.path.join(local_dir, name), os.path.join(snapshot, name))
    return CheckpointUpload(snapshot, url_dir, latest, keep)


STORED: dict[str, tuple[str | None, frozenset[str]]] = {}
"""What this process's last checkpoint upload left in a store's checkpoint directory (by its URL): the state file's
text and the names there. Its next upload there reads neither again: the chief's uploads are the directory's only
writer while it trains. One that fails forgets it (what a failed upload left is read anew)."""


@dataclasses.dataclass(frozen=True)
class CheckpointUpload:
    """The upload of the checkpoint ``latest`` from a ``snapshot`` of its files: its files, then a state file
    keeping it and the last checkpoints the store's state keeps, ``keep`` in all (a reader restores only what the
    state names: never a partial checkpoint), then the deletion of the store's others. Discarded, as when ``keep``
    later ones follow it in the queue, it removes its snapshot."""

    snapshot: str
    url_dir: str
    latest: str
    keep: int

    def __call__(self) -> None:
        stored, present = STORED.pop(self.url_dir) if self.url_dir in STORED else self.read_store()
        earlier = [name for name in (kept_checkpoints(stored) if stored else []) if name != self.latest]
        kept = [*earlier, self.latest][-self.keep :]
        state = checkpoint_state(kept, time.time())
        with open(os.path.join(self.snapshot, CHECKPOINT_STATE), "w") as f:
            f.write(state)
        storage.upload_tree(self.snapshot, self.url_dir, last=(CHECKPOINT_STATE,))
        stale = {n for n in present if n != CHECKPOINT_STATE and checkpoint_of(n) not in kept}
        storage.remove_all([storage.join(self.url_dir, name) for name in sorted(stale)])
        STORED[self.url_dir] = (state, (present - stale) | set(os.listdir(self.snapshot)))
        self.discard()

    @property
    def needless_after(self) -> int:
        """How many later uploads queued behind this one make it needless (``uploads.needless``): ``keep`` (the
        state of the ``keep``-th no longer keeps this checkpoint; a nearer one's does)."""
        return self.keep

    def read_store(self) -> tuple[str | None, frozenset[str]]:
        """The store's state file (None if none) and the names in its checkpoint directory."""
        return _state(storage.join(self.url_dir, CHECKPOINT_STATE)), frozenset(storage.names(self.url_dir))

    def discard(self) -> None:
        shutil.rmtree(self.snapshot, ignore_errors=True)


def tree_upload(local_dir: str, url: str) -> Job:
    """The upload of the files under ``local_dir`` as they are when the job runs (a growing event file: whole)."""
    return functools.partial(storage.upload_tree, local_dir, url)
