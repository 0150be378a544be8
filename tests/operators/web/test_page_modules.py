"""The training-runs page's ES modules (operators/web/*.js): their pure helpers under Node's own test runner
(tests/operators/web/js/*.test.mjs), every module the page imports served by the plugin, with JavaScript's media
type, and nothing else. The page itself runs in Chromium in test_runs_page_browser.py."""

from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest
from fastapi import HTTPException

from tests.support.roots import REPO
from tfdist.operators.web.api import PAGE_FILES, page_file

NODE_TESTS = sorted(glob.glob(os.path.join(REPO, "tests", "operators", "web", "js", "*.test.mjs")))
IMPORT = re.compile(r'^import [^;]*? from "\./([^"]+)";', re.M | re.S)


@pytest.mark.e2e
def test_the_pages_pure_helpers_pass_their_node_tests():
    assert NODE_TESTS
    done = subprocess.run(["node", "--test", *NODE_TESTS], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"^# fail 0$", done.stdout, re.M), done.stdout[-2000:]


def test_every_module_the_page_imports_is_served_as_javascript():
    html = PAGE_FILES["page.html"].read_text()
    assert '<script type="module" src="../static/page.js"></script>' in html
    wanted, seen = ["page.js"], set()
    while wanted:
        name = wanted.pop()
        seen.add(name)
        response = page_file(name)
        assert response.media_type == "text/javascript", name
        wanted += [imported for imported in IMPORT.findall(PAGE_FILES[name].read_text()) if imported not in seen]
    assert seen == {name for name in PAGE_FILES if name.endswith(".js")}  # no module left unused
    assert page_file("page.css").media_type == "text/css" and page_file("page.html").media_type == "text/html"


@pytest.mark.parametrize("name", ["api.py", "__init__.py", "training-runs.png", "../api.py", "..%2Fapi.py", "", "x.js"])
def test_no_other_file_is_served(name):
    with pytest.raises(HTTPException) as refused:
        page_file(name)
    assert refused.value.status_code == 404
