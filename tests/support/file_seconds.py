"""The seconds each test file took, from JUnit XML (``pytest --junitxml=FILE``), into FILE_SECONDS:
``python -m tests.support.file_seconds FILE...``, summed over the files (make test's run and make test-extended's).
The conftest hands pytest-xdist the longest files first, so no long file starts last."""

from __future__ import annotations

import collections
import json
import os
import sys
import xml.etree.ElementTree as ET

from tests.support.roots import REPO

FILE_SECONDS = os.path.join(REPO, "tests", "file-seconds.json")


def seconds_by_file(junit_xml: str) -> collections.Counter[str]:
    found: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        found[case.get("classname", "").replace(".", "/") + ".py"] += float(case.get("time", 0))
    return found


def main(junit_xmls: list[str]) -> None:
    merged: collections.Counter[str] = collections.Counter()
    for junit_xml in junit_xmls:
        merged.update(seconds_by_file(junit_xml))
    with open(FILE_SECONDS, "w") as f:
        json.dump({name: round(s) for name, s in sorted(merged.items())}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
