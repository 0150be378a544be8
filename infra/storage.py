"""Artifacts at a local path or in an object store (``s3://bucket/prefix``, ``gs://bucket/prefix``), through fsspec.
Every read and write of an artifact goes through here, so one layout serves both.

- A local path is written atomically by a rename; an object by its single upload (a reader sees the whole old
  object or the whole new one). A tree of objects has no atomic rename: ``upload_tree`` uploads its completion
  marker last, and readers take a tree as there only once its marker is (docs/object-storage.md).
- Credentials never travel in a URL: a worker uses its ambient identity (the standard environment, an instance
  role, a Kubernetes service account); the Airflow side sets this process's from an Airflow connection
  (``configure``).
- Listings are never cached: a reader waiting for another process's object must see it appear."""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

_options: dict[str, dict[str, Any]] = {}

OPTIONS_FILE_ENV = "TFDIST_STORE_OPTIONS"
"""The environment variable naming a JSON file of storage options by protocol (``configure``'s), for a process
``configure`` is not called in: a local stage's processes. Their launcher rewrites the file as the Airflow
connection's credentials are renewed, and each ``filesystem`` call reads it again."""

GCS_KEY_ENV = "TFDIST_GCS_KEY"
"""The environment variable handing a worker process a Google Cloud key that is no file (a service account's JSON,
an Airflow connection's keyfile_dict); a key file is handed as GOOGLE_APPLICATION_CREDENTIALS."""


def scheme(url: str) -> str | None:
    """The URL's scheme (``s3``, ``gs``), None for a local path."""
    return url.split("://", 1)[0] if "://" in url else None


def is_object_store(url: str) -> bool:
    return scheme(url) is not None


def configure(protocol: str, options: dict[str, Any]) -> None:
    """The storage options (fsspec's: credentials, an endpoint) this process uses for ``protocol`` from now on."""
    _options[protocol] = dict(options)


def write_options_file(path: str, by_protocol: dict[str, dict[str, Any]]) -> None:
    """Write storage options by protocol (``configure``'s) to ``path``, OPTIONS_FILE_ENV's file: whole, and readable
    by this user alone."""
    write_bytes(path, json.dumps(by_protocol).encode())


def _ambient_options(protocol: str) -> dict[str, Any]:
    """The storage options of a process ``configure`` was not called in: those of OPTIONS_FILE_ENV's file, else
    gs://'s key from GCS_KEY_ENV, else none (the ambient identity)."""
    if handed := os.environ.get(OPTIONS_FILE_ENV):
        with contextlib.suppress(FileNotFoundError), open(handed, "rb") as f:
            by_protocol: dict[str, dict[str, Any]] = json.load(f)
            if protocol in by_protocol:
                return by_protocol[protocol]
    if protocol == "gs" and os.environ.get(GCS_KEY_ENV):
        return {"token": json.loads(os.environ[GCS_KEY_ENV])}
    return {}


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec file system holding ``url``, and the path on it."""
    import fsspec

    protocol = scheme(url)
    if protocol is None:
        return fsspec.filesystem("file", auto_mkdir=True), url
    options = _options[protocol] if protocol in _options else _ambient_options(protocol)
    fs = fsspec.filesystem(protocol, use_listings_cache=False, **options)
    return fs, fs._strip_protocol(url)


def mirror_path(url: str, scratch: str) -> str:
    """Where a host keeps its local copy of ``url`` under its ``scratch`` directory: ``url`` itself if local, else
    ``<scratch>/<scheme>/<bucket>/<key>``."""
    protocol = scheme(url)
    if protocol is None:
        return url
    return os.path.join(scratch, protocol, url.split("://", 1)[1].strip("/"))


def join(url: str, *parts: str) -> str:
    """``url`` and the relative ``parts`` joined by '/' (a scheme's '//' kept)."""
    return posixpath.join(url, *parts)


def parent(url: str) -> str:
    return posixpath.dirname(url.rstrip("/"))


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return bool(fs.exists(path))


def names(url: str) -> list[str]:
    """The names directly under ``url`` (files and folders), sorted; none where there is nothing."""
    fs, path = filesystem(url)
    try:
        found = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted({posixpath.basename(p.rstrip("/")) for p in found} - {""})


def open_file(url: str, mode: str = "r") -> IO[Any]:
    """``url`` opened for reading (a missing one: FileNotFoundError); for writing, use ``write_bytes``."""
    fs, path = filesystem(url)
    opened: IO[Any] = fs.open(path, mode)
    return opened


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    data: bytes = fs.cat_file(path)
    return data


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """An OS error writing the local file ``path`` names it: a buffered write's (a full disk at its close) names
    no file."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def write_bytes(url: str, data: bytes) -> None:
    """Write ``url`` whole or not at all: a local file by a rename beside it, an object by one upload."""
    fs, path = filesystem(url)
    if is_object_store(url):
        fs.pipe_file(path, data)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    try:
        with naming(tmp), os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def create(url: str, data: bytes) -> bool:
    """Write ``url`` only if nothing is there yet, in one step no other writer can interleave with (a local file
    made exclusively, an object store's conditional write); whether this call made it."""
    fs, path = filesystem(url)
    if is_object_store(url):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        return True
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with naming(path), os.fdopen(fd, "wb") as f:
        f.write(data)
    return True


def remove(url: str) -> None:
    """Delete the file or object ``url``, if there is one."""
    fs, path = filesystem(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)


def remove_all(urls: list[str]) -> None:
    """Delete the files or objects ``urls`` (on one file system) that are there: objects in one request per batch
    the store takes (S3: 1,000, GCS: 100), not one each."""
    if not urls:
        return
    if not is_object_store(urls[0]):
        for url in urls:
            remove(url)
        return
    fs, _ = filesystem(urls[0])
    with contextlib.suppress(FileNotFoundError):  # none was there
        fs.rm([fs._strip_protocol(url) for url in urls])


def remove_tree(url: str) -> None:
    """Delete everything under ``url``, if anything."""
    fs, path = filesystem(url)
    if not is_object_store(url):
        shutil.rmtree(path, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)


def files_under(local_dir: str) -> list[str]:
    """The relative paths of the files under ``local_dir``, sorted."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), local_dir)
        for folder, _, files in os.walk(local_dir)
        for name in files
    )


def upload_tree(local_dir: str, url: str, last: tuple[str, ...] = ()) -> None:
    """Copy the files under ``local_dir`` to ``url`` (many at once), the relative paths in ``last`` after all
    the others, in their order: a reader that waits for the last one finds the rest there."""
    fs, path = filesystem(url)
    relative = files_under(local_dir)
    first = [r for r in relative if r not in last]
    for batch in (first, *([r] for r in last if r in relative)):
        if batch:
            fs.put([os.path.join(local_dir, r) for r in batch], [posixpath.join(path, r) for r in batch])


def download_tree(url: str, local_dir: str) -> None:
    """Copy every file under ``url`` into ``local_dir`` (many at once)."""
    fs, path = filesystem(url)
    remote = [p for p in fs.find(path) if not p.endswith("/")]
    local = [os.path.join(local_dir, posixpath.relpath(p, path)) for p in remote]
    for folder in {os.path.dirname(p) for p in local}:
        os.makedirs(folder, exist_ok=True)
    if remote:
        fs.get(remote, local)


@contextlib.contextmanager
def staged(url: str, last: tuple[str, ...]) -> Iterator[str]:
    """A local directory to write ``url``'s tree into, published on success: a local ``url`` renamed into place
    whole, an object store's uploaded with ``last`` after everything else (what a crashed upload left there
    deleted first). ``url`` must not be published already. On failure nothing is published. Either way the local
    directory is removed."""
    local = not is_object_store(url)
    if local:
        os.makedirs(parent(url) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent(url) if local else None, prefix=f".tmp-{posixpath.basename(url)}-")
    try:
        yield tmp
        if local:
            os.rename(tmp, url)
        elif exists(join(url, last[-1])):
            raise FileExistsError(f"{url} is published already")
        else:
            remove_tree(url)
            upload_tree(tmp, url, last)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
