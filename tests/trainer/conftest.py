"""Fixtures of the trainer module tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tf():
    """TensorFlow as a stage imports it (``runtime.import_tensorflow``), in this process."""
    from tfdist.trainer.runtime import import_tensorflow

    return import_tensorflow()
