"""The docs site builds with ``mkdocs build --strict`` (a broken link or anchor, or a page outside the nav, fails),
its nav lists every page, and the spec reference is generated from the spec model with every field and its
override policy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.roots import REPO
from tfdist.spec import Spec, field_doc, override_policy, section_models
from tfdist.spec.overrides import FREE_FORM
from tfdist.spec.reference import render


def nav_pages(nav: list) -> list[str]:
    """Every page file the nav names, at any depth."""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_nav_lists_every_page():
    config = yaml.safe_load(Path(REPO, "mkdocs.yml").read_text())
    docs = Path(REPO, config["docs_dir"])
    assert sorted(nav_pages(config["nav"])) == sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md"))


@pytest.mark.e2e
def test_the_site_builds_strictly_with_the_generated_reference(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    reference = (tmp_path / "reference" / "spec" / "index.html").read_text()
    assert "<code>training.epochs</code>" in reference and "spec reference -->" not in reference


def rows() -> dict[str, list[str]]:
    """The reference's table rows by field path: the cells after the path."""
    found: dict[str, list[str]] = {}
    for line in render().splitlines():
        if line.startswith("| `"):
            path, *cells = [c.strip() for c in line.strip("|").split(" | ")]
            found.setdefault(path.strip("`"), cells)
    return found


@pytest.mark.parametrize("path, refusal", sorted(override_policy(Spec).items()))
def test_every_field_is_in_the_reference_with_its_override_policy(path, refusal):
    at_trigger = rows()[path][3].replace("\\", "")  # the cell's Markdown escapes removed
    if refusal is None:
        assert at_trigger == "yes"
    else:
        assert at_trigger == ("no: free-form" if refusal == FREE_FORM else f"no: {refusal}")


@pytest.mark.parametrize("section", section_models(), ids=lambda s: s.__name__)
def test_every_field_of_every_section_has_its_docstring_in_the_reference(section):
    paths = rows()
    for name, info in section.model_fields.items():
        doc = field_doc(section, name)
        assert doc, f"{section.__name__}.{name} has no docstring: the reference shows it"
        key = info.alias or name
        assert any(p == key or p.endswith(f".{key}") for p in paths), (
            f"{section.__name__}.{name} is not in the reference"
        )
