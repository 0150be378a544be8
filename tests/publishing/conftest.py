"""The publishing tests' model directory."""

from __future__ import annotations

import pytest

from tests.publishing.test_withdraw import publish


@pytest.fixture
def model_dir(tmp_path) -> str:
    """A model directory holding versions 1, 2 and 3, each warm-started from the one before."""
    model_dir = str(tmp_path / "digits")
    for version in (1, 2, 3):
        publish(model_dir, version, parent=version - 1 or None)
    return model_dir
