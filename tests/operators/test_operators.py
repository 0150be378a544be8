"""operators/__init__.py: what users import from ``tfdist.operators``, each name its module's object, loaded on
first use (``_EXPORTS`` and the module's ``__getattr__``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import tfdist.operators as operators


@pytest.mark.parametrize("name", sorted(operators._EXPORTS))
def test_each_exported_name_is_the_object_of_its_module(name):
    assert getattr(operators, name) is getattr(importlib.import_module(operators._EXPORTS[name]), name)


def test_the_exports_are_all_of_the_package_and_an_unknown_name_raises_attribute_error():
    assert operators.__all__ == list(operators._EXPORTS)
    with pytest.raises(AttributeError, match=r"^module 'tfdist.operators' has no attribute 'TrainOperator'$"):
        operators.TrainOperator  # noqa: B018
    assert not hasattr(operators, "ExportOperator")
    with pytest.raises(ImportError, match="cannot import name 'build_dags'"):
        from tfdist.operators import build_dags  # noqa: F401
    from tfdist.operators import EvaluateOperator, build_dag

    assert build_dag.__module__ == "tfdist.operators.dag" and EvaluateOperator.__name__ == "EvaluateOperator"


def test_the_operator_modules_are_the_six_operators_ones():
    assert operators.operator_modules() == [
        "tfdist.operators.approval",
        "tfdist.operators.evaluate",
        "tfdist.operators.export",
        "tfdist.operators.prepare",
        "tfdist.operators.train",
        "tfdist.operators.validate_data",
    ]


LOADED = """
import json, sys
import tfdist.operators as operators
before = sorted(m for m in sys.modules if m.startswith(("tfdist", "airflow")))
operators.SpecError
after = sorted(m for m in sys.modules if m.startswith(("tfdist.operators.", "airflow")))
print(json.dumps({"before": before, "after": after, "modules": sorted(set(operators._EXPORTS.values()))}))
"""


@pytest.mark.e2e  # a fresh interpreter
def test_importing_the_package_imports_no_operator_module_nor_airflow():
    done = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    assert loaded["before"] == ["tfdist", "tfdist.operators"], loaded
    assert "tfdist.operators.dag" in loaded["modules"]
    assert loaded["after"] == [], loaded  # the spec, loaded for SpecError, needs neither an operator nor Airflow
