"""Airflow-facing package: spec → plan → DAG of operators → launchers → worker processes.

Never imports TensorFlow. The operators are loaded lazily, so ``tfdist.operators.spec`` and
``tfdist.operators.plan`` stay usable without importing Airflow."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build_dag": "dag",
    "build_dags_from_directory": "dag",
    "PrepareDataOperator": "prepare",
    "DistributedTrainOperator": "train",
    "EvaluateOperator": "evaluate",
    "ExportModelOperator": "export",
    "Spec": "spec",
    "SpecError": "spec",
    "load_spec": "spec",
}

__all__ = list(_EXPORTS)


def operator_modules() -> list[str]:
    """The modules of the four operators."""
    return sorted({f"{__name__}.{module}" for name, module in _EXPORTS.items() if name.endswith("Operator")})


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
