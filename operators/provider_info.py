"""tfdist as an Airflow provider: what ``airflow providers list`` and ``airflow providers links`` show, read
through the ``apache_airflow_provider`` entry point. The name, version and summary come from the installed
package's metadata (pyproject.toml), so they are written in one place."""

from __future__ import annotations

from importlib import metadata
from typing import Any

DISTRIBUTION = "airflow-tfdist"
"""The distribution's name in pyproject.toml; Airflow refuses provider info that names another."""
EXTRA_LINKS = [f"{__package__}.links.{link}" for link in ("TrainingRunLink", "PublishedVersionLink", "TensorBoardLink")]
"""Every extra link of the operators, as import paths (``airflow providers links`` lists them): Airflow reads
provider info while it initializes, so nothing here imports Airflow."""


def version() -> str:
    """The installed tfdist's version."""
    return metadata.version(DISTRIBUTION)


def get_provider_info() -> dict[str, Any]:
    from tfdist.operators import operator_modules

    return {
        "package-name": DISTRIBUTION,
        "name": "tfdist",
        "description": metadata.metadata(DISTRIBUTION)["Summary"],
        "versions": [version()],
        "integrations": [
            {"integration-name": "TensorFlow", "external-doc-url": "https://www.tensorflow.org/", "tags": ["software"]}
        ],
        "operators": [{"integration-name": "TensorFlow", "python-modules": operator_modules()}],
        "extra-links": EXTRA_LINKS,
    }
