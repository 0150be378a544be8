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
    "ValidateDataOperator": f"{__name__}.validate_data",
    "DistributedTrainOperator": f"{__name__}.train",
    "EvaluateOperator": f"{__name__}.evaluate",
    "PublishApprovalOperator": f"{__name__}.approval",
    "ExportModelOperator": f"{__name__}.export",
    "StageRefused": f"{__name__}.outcomes",
    "StageFailedRetryable": f"{__name__}.outcomes",
    "StageLost": f"{__name__}.outcomes",
    "model_asset": f"{__name__}.export",
    "Spec": "tfdist.spec",
    "SpecError": "tfdist.spec",
    "load_spec": "tfdist.spec",
}

"""What users may use, each from its module, imported on first use: the builders, the six operators (in the
order of a pipeline's tasks), the Asset a published model updates, and the spec."""

__all__ = list(_EXPORTS)


def operator_modules() -> list[str]:
    """The modules of the operators (the provider info declares them)."""
    return sorted({module for name, module in _EXPORTS.items() if name.endswith("Operator")})


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
