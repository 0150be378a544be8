"""Airflow-facing package: spec → plan → DAG of operators → launchers → worker processes.

Never imports TensorFlow. The operators are loaded lazily, so ``tfdist.operators.plan`` and the spec
(``tfdist.spec``, shared with the workers) stay usable without importing Airflow."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build_dag": f"{__name__}.dag",
    "build_dags_from_directory": f"{__name__}.dag",
    "build_task_group": f"{__name__}.dag",
    "PrepareDataOperator": f"{__name__}.prepare",
    "DistributedTrainOperator": f"{__name__}.train",
    "EvaluateOperator": f"{__name__}.evaluate",
    "ExportModelOperator": f"{__name__}.export",
    "StageRefused": f"{__name__}.outcomes",
    "StageFailedRetryable": f"{__name__}.outcomes",
    "StageLost": f"{__name__}.outcomes",
    "Spec": "tfdist.spec",
    "SpecError": "tfdist.spec",
    "load_spec": "tfdist.spec",
}

__all__ = list(_EXPORTS)


def operator_modules() -> list[str]:
    """The modules of the four operators."""
    return sorted({module for name, module in _EXPORTS.items() if name.endswith("Operator")})


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
