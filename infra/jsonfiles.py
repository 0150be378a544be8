"""Run-scoped records: JSON written whole, checksums; at a local path or in an object store (``storage``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tfdist.infra import storage


def read_json(path: str) -> Any:
    """The JSON file's content, read in one request (an object rewritten meanwhile is read whole, old or new)."""
    return json.loads(storage.read_bytes(path))


def read_json_if_exists(path: str) -> Any:
    """The JSON file's content, None where there is no file."""
    try:
        return read_json(path)
    except FileNotFoundError:
        return None


def json_bytes(payload: Any) -> bytes:
    """``payload`` as a JSON file holds it."""
    return json.dumps(payload, indent=2, sort_keys=True).encode()


def write_json_atomic(path: str, payload: Any) -> None:
    storage.write_bytes(path, json_bytes(payload))


def create_json(path: str, payload: Any) -> bool:
    """Write ``payload`` at ``path`` only if nothing is there yet (``storage.create``); whether this call made it."""
    return storage.create(path, json_bytes(payload))


def digest_json(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with storage.open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
