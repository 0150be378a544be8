"""Where the repository is, and which tests need root (the stand-in cluster's pods, OpenMPI as root)."""

from __future__ import annotations

import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT_REQUIRED = os.environ.get("TFDIST_REQUIRE_ROOT") == "1"
"""Set by .ci/run, which runs as root: there a test that needs root fails instead of skipping."""
STANDIN_NEEDS_ROOT = "the stand-in's pods need root (network namespaces)"


def lacks_root() -> bool:
    """Whether a root-only test skips here: not root, outside CI (a non-root newcomer's ``make test``). As root, a
    tool it needs that is missing fails it."""
    return os.geteuid() != 0 and not ROOT_REQUIRED


def needs_root(why: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(lacks_root(), reason=why)
