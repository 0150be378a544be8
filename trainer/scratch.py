"""Local copies of an object store's artifacts: TensorFlow reads and writes local files only (TF 2.21 has no
s3:// file system), so a stage copies what it reads from the store into its scratch directory
(``TFDIST_SCRATCH``), at the same path in every process of the run, and uploads what it writes."""

from __future__ import annotations

import os
import tempfile
import uuid

from tfdist.contract import SCRATCH_ENV, storage


def scratch_dir() -> str:
    """This host's scratch directory for stages (the launcher's choice, else one under the system's temp)."""
    return os.environ.get(SCRATCH_ENV) or os.path.join(tempfile.gettempdir(), "tfdist-scratch")


def local_path(url: str) -> str:
    """Where ``url``'s local copy lives: itself for a local path, else ``<scratch>/<scheme>/<bucket>/<key>``."""
    scheme = storage.scheme(url)
    if scheme is None:
        return url
    return os.path.join(scratch_dir(), scheme, url.split("://", 1)[1].strip("/"))


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
