"""A manifest's label record for the trainer tests that score predictions by class."""

from __future__ import annotations

from tfdist.contract.data_records import LabelEntry


def label_entry(task: str, classes: list[str] | None, std: float | None = None) -> LabelEntry:
    """A manifest's label of ``task``: its classes, or a regression target's std."""
    stored = {"multiclass": "name", "binary": "binary", "regression": "value"}[task]
    return LabelEntry(
        name="y",
        task=task,
        stored=stored,
        classes=classes,
        num_classes=len(classes) if classes else None,
        positive=classes[1] if task == "binary" and classes else None,
        mean=0.0 if std else None,
        std=std,
    )
