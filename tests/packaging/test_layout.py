"""The tests mirror the package (issue 56): every source module with logic has its test module at the mirror path."""

from __future__ import annotations

import ast
import os

from tests.packaging.test_packaging import CODE_FOLDERS
from tests.support.roots import REPO


def has_logic(path: str) -> bool:
    """Whether the module defines a function or a method (pure declarations need no test module)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(tree))


def mirror_test(module: str) -> str:
    """The test module of ``module`` (a path from the repository's root): ``<part>/<sub...>/<m>.py`` is tested in
    ``tests/<part>/<sub...>/test_<m>.py``; a package's ``__init__.py`` in ``test_<package>.py`` in its own folder."""
    folder, name = os.path.split(module)
    stem = os.path.basename(folder) if name == "__init__.py" else name.removesuffix(".py")
    return os.path.join("tests", folder, f"test_{stem}.py")


def modules_with_logic(root: str) -> list[str]:
    """Every module with logic of the package's parts under ``root``, as paths from ``root``."""
    found = []
    for part in CODE_FOLDERS:
        for folder, subfolders, files in os.walk(os.path.join(root, part)):
            subfolders[:] = sorted(s for s in subfolders if s != "__pycache__")
            found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return [os.path.relpath(path, root) for path in found if has_logic(path)]


def missing_tests(root: str) -> list[str]:
    """``module -> its missing test module``, for each module with logic under ``root`` whose test is absent."""
    return [
        f"{module} -> {mirror_test(module)}"
        for module in modules_with_logic(root)
        if not os.path.exists(os.path.join(root, mirror_test(module)))
    ]


def test_every_module_with_logic_has_its_test_module_at_the_mirror_path():
    gaps = missing_tests(REPO)
    assert not gaps, f"{len(gaps)} module(s) with logic lack their test module:\n" + "\n".join(gaps)


def test_the_rule_asks_a_test_of_a_module_with_logic_only_and_finds_it_at_the_mirror_path(tmp_path):
    sources = {
        "spec/tested.py": "def f():\n    return 1\n",
        "spec/untested.py": "class A:\n    def m(self):\n        return 1\n",
        "spec/declared.py": "LIMIT = 3\n\n\nclass Fields:\n    size: int = LIMIT\n",
        "operators/plan/__init__.py": "def build():\n    return 1\n",
        "tests/spec/test_tested.py": "",
        "tests/operators/plan/test_plan.py": "",
    }
    for path, text in sources.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert missing_tests(str(tmp_path)) == ["spec/untested.py -> tests/spec/test_untested.py"]
