"""The tests' small spec: the digits data set (scikit-learn's, no download) and a 2-worker MLP."""

from __future__ import annotations

import copy
import datetime as dt

DAY = dt.date(2026, 11, 20)
"""The last of the daily digits partitions the tests lay down (the ``digits_root`` fixture)."""
START = dt.datetime.combine(DAY, dt.time(), dt.UTC)

SMALL_SPEC = {
    "name": "digits_test",
    "schedule": "@daily",
    "start_date": "2026-11-01",
    "data": {
        "source": "{artifact_root}/raw/digits/{date}/*.csv",
        "format": "csv",
        "features": [{"name": "pixel", "shape": [64]}],
        "label": {"name": "label", "num_classes": 10},
        "num_shards": 4,
    },
    "model": {"family": "mlp", "hidden_units": [64], "learning_rate": 0.003},
    "training": {"num_workers": 2, "epochs": 4, "global_batch_size": 64, "checkpoint_every_steps": 20},
    "validation": {"thresholds": {"accuracy": {"lower": 0.9}}},
    "export": {"model_name": "digits_small"},
}


def make_spec(root: str, **sections) -> dict:
    """SMALL_SPEC with artifact root ``root``; each keyword updates one section (``model`` is replaced
    when it names another family) or sets a top-level field."""
    spec = copy.deepcopy(SMALL_SPEC)
    spec["artifact_root"] = root
    for key, value in sections.items():
        current = spec.get(key)
        same_family = isinstance(current, dict) and value.get("family") in (None, current.get("family"))
        if isinstance(value, dict) and same_family:
            spec[key].update(value)
        else:
            spec[key] = value
    return spec
