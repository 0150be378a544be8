"""The published versions as their metadata.json says, for tests that check what export left on disk."""

from __future__ import annotations

from typing import Any

from tfdist.publishing import registry


def published_metadata(model_dir: str) -> list[dict[str, Any]]:
    """Each published version's metadata (as JSON) plus its ``path``, oldest first (``registry.versions``)."""
    return [{**m.metadata.model_dump(mode="json"), "path": m.path} for m in registry.versions(model_dir)]
