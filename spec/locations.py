"""Where artifacts and published versions may live: an absolute local path, or a bucket of an object store."""

from __future__ import annotations

import os
import re

OBJECT_STORES = ("s3", "gs")
"""The object stores an artifact or export root may be in: their URL schemes."""
BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
"""A bucket's name as S3 and GCS take it (GCS also takes '_')."""


def default_artifact_root() -> str:
    """'$TFDIST_ARTIFACT_ROOT', else '~/tfdist'."""
    return artifact_location(os.environ.get("TFDIST_ARTIFACT_ROOT", "~/tfdist"))


def _local_path(value: str) -> str:
    """Expand '~' and '$VARS'; an absolute local path."""
    expanded = os.path.expanduser(os.path.expandvars(value))
    if not os.path.isabs(expanded):
        raise ValueError(f"must be an absolute path (after expanding ~ and $VARS), got {value!r}")
    return os.path.normpath(expanded)


def artifact_location(value: str) -> str:
    """An absolute local path (``_local_path``) or an object store's ``<scheme>://<bucket>[/<prefix>]``, its
    trailing '/' dropped; credentials never in it."""
    if "://" not in value:
        return _local_path(value)
    scheme, rest = value.split("://", 1)
    bucket, _, prefix = rest.rstrip("/").partition("/")
    if scheme not in OBJECT_STORES:
        raise ValueError(
            f"{value!r}: the object stores taken are {', '.join(s + '://' for s in OBJECT_STORES)}; "
            "or give a local path"
        )
    if "@" in bucket or ":" in bucket:
        raise ValueError(
            f"{value!r} holds credentials or a port: credentials never go in the spec; the Airflow side takes them "
            "from the connection named in [tfdist] config, the workers from their own identity (docs/object-storage.md)"
        )
    if not BUCKET.fullmatch(bucket):
        raise ValueError(f"{value!r}: {bucket!r} is no bucket name (3-63 lowercase letters, digits, '.', '-', '_')")
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") or not part.isprintable() for part in parts):
        raise ValueError(f"{value!r}: the prefix has an empty, '.' or '..' part or a control character")
    return f"{scheme}://{rest.rstrip('/')}"
