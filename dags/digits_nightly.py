"""Example Airflow DAG: nightly retraining of a digits classifier, written as a Python dict spec.

Each night's run trains on the previous day's partition ``<artifact root>/raw/digits/<date>/``
(``make demo`` lays some down from scikit-learn's digits data), with 2 local TF workers.
"""

from tfdist.operators import build_dag

SPEC = {
    "name": "digits_nightly",
    "description": "Nightly retraining of a handwritten-digit classifier (scikit-learn digits)",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "tags": ["example"],
    # fields a run may change: the trigger form's fields, --conf and backfill --dag-run-conf
    "overridable": ["training.epochs", "model.learning_rate", "training.num_workers", "training.backend"],
    "data": {
        "source": "{artifact_root}/raw/digits/{date}/*.csv",
        "format": "csv",
        "features": [{"name": "pixel", "shape": [64]}],
        "label": {"name": "label", "num_classes": 10},
        "eval_fraction": 0.2,
        "num_shards": 4,
    },
    "model": {
        "family": "cnn",
        "image_shape": [8, 8, 1],
        "filters": [16, 32],
        "dense_units": 64,
        "learning_rate": 0.002,
    },
    "training": {
        "backend": "tf",
        "num_workers": 2,
        "epochs": 15,
        "global_batch_size": 64,
        "checkpoint_every_steps": 50,
    },
    "validation": {"thresholds": {"accuracy": {"lower": 0.9}}},
    "export": {"model_name": "digits"},
}

dag = build_dag(SPEC)
