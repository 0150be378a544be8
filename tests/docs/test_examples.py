"""Every code example in the README and the docs runs, by the language of its fence:

- ``python``: a whole DAG file. Airflow's DagBag (safe mode, as the dag-processor reads a DAGs folder) finds at
  least one DAG in it and no import error.
- ``yaml``: a spec, or a part of one. A block with a ``name`` is a whole spec; any other block is merged over
  the tests' small spec (``SMALL_SPEC``). Either way ``tfdist.spec.load_spec`` validates it.
- ``bash``, ``console``, ``pycon`` and ``text``: shell commands, their output, Python sessions (e.g. calling a
  served model) and diagrams, never run.

Any other fence, or one without a language, fails: a new example says which kind it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.dag.test_dag_parse import run_python
from tests.support.roots import REPO
from tests.support.specs import SMALL_SPEC
from tfdist.spec import load_spec

RUN = {"python", "yaml"}
NOT_RUN = {"bash", "console", "pycon", "text"}
FENCE = re.compile(r"^( *)```(\S*)\n(.*?)^\1```$", re.M | re.S)


def documents() -> list[Path]:
    return [Path(REPO, "README.md"), *sorted(Path(REPO, "docs").rglob("*.md"))]


def examples(language: str | None = None) -> list[tuple[str, str, str]]:
    """(where, language, code) of every fenced block, or of those in ``language``."""
    found = []
    for path in documents():
        text = path.read_text()
        for match in FENCE.finditer(text):
            indent, fence, code = match.groups()
            where = f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}"
            block = "".join(line.removeprefix(indent) for line in code.splitlines(keepends=True))
            found.append((where, fence, block))
    return [e for e in found if language is None or e[1] == language]


def merged(base: dict, part: dict) -> dict:
    """``base`` with ``part`` laid over it, mapping by mapping."""
    out = dict(base)
    for key, value in part.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_every_block_says_whether_it_runs():
    kinds = {(where, fence) for where, fence, _ in examples() if fence not in RUN | NOT_RUN}
    assert not kinds, f"fence languages are {sorted(RUN | NOT_RUN)}; found: {sorted(kinds)}"
    assert examples("python") and examples("yaml")


@pytest.mark.parametrize("where, code", [(w, c) for w, _, c in examples("yaml")])
def test_each_yaml_example_is_a_valid_spec_or_part_of_one(where, code, tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(tmp_path))
    data = yaml.safe_load(code)
    load_spec(data if "name" in data else merged(SMALL_SPEC, data), origin=where)


@pytest.mark.e2e
def test_each_python_example_is_a_dag_file_that_airflow_finds(tmp_path):
    files = {}
    for i, (where, _, code) in enumerate(examples("python")):
        files[where] = tmp_path / f"example_{i}" / "pipeline.py"
        files[where].parent.mkdir()
        files[where].write_text(code)
    out = run_python(
        f"""
        import json
        from airflow.dag_processing.dagbag import DagBag
        for where, path in {json.dumps({w: str(p) for w, p in files.items()})}.items():
            bag = DagBag(dag_folder=path, safe_mode=True)
            errors = {{k: str(v) for k, v in bag.import_errors.items()}}
            print("FOUND", json.dumps([where, sorted(bag.dag_ids), errors]))
        """,
        TFDIST_ARTIFACT_ROOT=str(tmp_path),
    )
    found = {
        row[0]: row[1:] for row in (json.loads(line[6:]) for line in out.splitlines() if line.startswith("FOUND "))
    }
    assert sorted(found) == sorted(files), out
    for where, (dag_ids, errors) in found.items():
        assert dag_ids and not errors, f"{where}: DAGs {dag_ids}, import errors {errors}"
