"""operators/provider_info.py: what Airflow reads of tfdist as a provider, from the installed package's metadata."""

from __future__ import annotations

import json
import os
from importlib import metadata

from tests.packaging.test_packaging import NOT_EXPORTED, OPERATOR_MODULES, pyproject
from tfdist.operators.provider_info import CONFIG, DISTRIBUTION, version


def test_provider_info_passes_airflows_schema_and_names_this_distribution():
    import airflow
    import jsonschema

    from tfdist.operators import operator_modules
    from tfdist.operators.provider_info import get_provider_info

    info = get_provider_info()
    with open(os.path.join(os.path.dirname(airflow.__file__), "provider_info.schema.json")) as f:
        jsonschema.validate(info, json.load(f))
    project = pyproject()["project"]
    assert (info["package-name"], info["versions"]) == (project["name"], [project["version"]])
    assert info["description"] == project["description"]
    assert operator_modules() == OPERATOR_MODULES
    assert info["operators"] == [{"integration-name": "TensorFlow", "python-modules": OPERATOR_MODULES}]
    assert info["triggers"] == [
        {"integration-name": "TensorFlow", "python-modules": ["tfdist.operators.launchers.kubernetes.trigger"]}
    ]
    assert list(info["config"]) == ["tfdist"]
    integrations = {i["integration-name"] for i in info["integrations"]}
    assert {entry["integration-name"] for entry in info["operators"] + info["triggers"]} <= integrations


def test_every_module_and_class_the_provider_info_names_imports_and_is_what_it_says():
    import importlib
    import inspect

    from airflow.sdk import BaseOperator, BaseOperatorLink
    from airflow.triggers.base import BaseTrigger

    from tfdist.operators.provider_info import get_provider_info

    def defined(module: str, base: type) -> list[str]:
        found = inspect.getmembers(importlib.import_module(module), inspect.isclass)
        return [name for name, cls in found if issubclass(cls, base) and cls.__module__ == module]

    info = get_provider_info()
    for module in info["operators"][0]["python-modules"]:
        assert set(defined(module, BaseOperator)) - set(NOT_EXPORTED), module
    (triggers,) = [entry["python-modules"] for entry in info["triggers"]]
    assert [defined(module, BaseTrigger) for module in triggers] == [["StageTrigger"]]
    for path in info["extra-links"]:
        module, name = path.rsplit(".", 1)
        assert issubclass(getattr(importlib.import_module(module), name), BaseOperatorLink), path


def test_the_version_is_the_installed_distributions_and_each_option_has_a_default_airflow_can_read():
    assert version() == metadata.version(DISTRIBUTION)
    for name, option in CONFIG["tfdist"]["options"].items():
        assert option["type"] == "string" and isinstance(option["default"], str), name
    json.dumps(CONFIG)  # Airflow stores it as JSON
