"""tfdist as an Airflow provider: what ``airflow providers list``, ``airflow providers links`` and ``airflow config
list`` show, read through the ``apache_airflow_provider`` entry point. The name, version and summary come from the
installed package's metadata (pyproject.toml), so they are written in one place. Airflow reads provider info while
it initializes, so nothing here imports Airflow."""

from __future__ import annotations

from importlib import metadata
from typing import Any

DISTRIBUTION = "airflow-tfdist"
"""The distribution's name in pyproject.toml; Airflow refuses provider info that names another."""
INTEGRATION = "TensorFlow"
EXTRA_LINKS = [f"{__package__}.links.{link}" for link in ("TrainingRunLink", "PublishedVersionLink", "TensorBoardLink")]
"""Every extra link of the operators, as import paths (``airflow providers links`` lists them)."""
TRIGGER_MODULES = [f"{__package__}.launchers.kubernetes.trigger"]
"""The trigger a stage on Kubernetes defers to (``StageTrigger``)."""
CONFIG: dict[str, Any] = {
    "tfdist": {
        "description": "tfdist, distributed TensorFlow training: settings of the Airflow side for every pipeline.",
        "options": {
            "tensorboard_url": {
                "description": (
                    "A TensorBoard serving the pipelines' runs (tensorboard --logdir <artifact root>/<pipeline>/runs): "
                    "the train task of a pipeline whose spec names none (training.tensorboard_url) links to its run "
                    "there. Empty: no link."
                ),
                "version_added": "0.3.0",
                "type": "string",
                "example": "http://tensorboard.example.com:6006",
                "default": "",
            },
            "aws_conn_id": {
                "description": (
                    "The Airflow connection (Amazon Web Services) the Airflow side reads and writes an s3:// "
                    "artifact or export root with; the local launcher hands its credentials to the stage's processes "
                    "in their environment. Without keys in it: the identity the Amazon provider finds (instance "
                    "role, IRSA)."
                ),
                "version_added": "0.3.0",
                "type": "string",
                "example": "aws_default",
                "default": "aws_default",
            },
            "gcp_conn_id": {
                "description": (
                    "The Airflow connection (Google Cloud) the Airflow side reads and writes a gs:// artifact or "
                    "export root with: its key_path or keyfile_dict, and project. The local launcher hands the key to "
                    "the stage's processes in their environment. Without a key in it, or without the connection: "
                    "the application default credentials (Workload Identity, the instance's service account)."
                ),
                "version_added": "0.3.0",
                "type": "string",
                "example": "google_cloud_default",
                "default": "google_cloud_default",
            },
        },
    }
}
"""The ``[tfdist]`` options, as ``airflow config list`` shows them (each ``conf.get("tfdist", ...)`` of the code)."""


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
            {"integration-name": INTEGRATION, "external-doc-url": "https://www.tensorflow.org/", "tags": ["software"]}
        ],
        "operators": [{"integration-name": INTEGRATION, "python-modules": operator_modules()}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": TRIGGER_MODULES}],
        "extra-links": EXTRA_LINKS,
        "config": CONFIG,
    }
