"""Run-scoped files: the spec, JSON records, atomic directory publishing, checksums."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_json_if_exists(path: str) -> Any:
    """The JSON file's content, None where there is no file."""
    return read_json(path) if os.path.exists(path) else None


def write_json_atomic(path: str, payload: Any) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def digest_json(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def publish_dir(final: str) -> Iterator[str]:
    """Yield a temp directory beside ``final``; on success rename it into place, else remove it.

    A crash midway leaves only a hidden ``.tmp-*`` directory, never a half-written ``final``."""
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.path.basename(final)}-")
    try:
        yield tmp
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
