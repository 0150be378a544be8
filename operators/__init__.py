"""Airflow-facing package: spec → plan → DAG of operators → launchers → worker processes.

Never imports TensorFlow. The operators are loaded lazily, so ``operators.spec`` and
``operators.plan`` stay usable without importing Airflow."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build_dag": "operators.dag",
    "build_dags_from_directory": "operators.dag",
    "PrepareDataOperator": "operators.prepare",
    "DistributedTrainOperator": "operators.train",
    "EvaluateOperator": "operators.evaluate",
    "ExportModelOperator": "operators.export",
    "Spec": "operators.spec",
    "SpecError": "operators.spec",
    "load_spec": "operators.spec",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'operators' has no attribute {name!r}")
