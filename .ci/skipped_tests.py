"""Print the pytest node ids of the tests a run skipped, one per line, from its JUnit XML report.

CI runs the README's test command first (no extras installed); what it skipped (a test needing faiss, the
[retrieval] extra; torchmetrics' own harness, which needs a clone of torchmetrics' tests) runs again once
the extras are in, without running everything else a second time. Write the report with
``--junitxml=FILE -o junit_family=xunit1`` (xunit1 records each test's file).

    python .ci/skipped_tests.py report.xml

A whole module skipped at import (``pytest.importorskip`` at its top) prints as its file.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET  # the report CI itself wrote, not outside input
from pathlib import PurePosixPath


def node_id(classname: str, name: str, file: str) -> str:
    """The node id of one ``<testcase>`` of an xunit1 report.

    >>> node_id("tests.cli.test_x", "test_a[p-1]", "tests/cli/test_x.py")
    'tests/cli/test_x.py::test_a[p-1]'
    >>> node_id("tests.cli.test_x.TestGroup", "test_b", "tests/cli/test_x.py")
    'tests/cli/test_x.py::TestGroup::test_b'
    >>> node_id("", "tests.tpips.test_retrieval", "tests/tpips/test_retrieval.py")  # skipped at import
    'tests/tpips/test_retrieval.py'
    """
    if not file:
        raise SystemExit(
            f"test {classname}.{name} has no file in the report: write it with junit_family=xunit1"
        )
    if not classname:
        return file
    module = ".".join(PurePosixPath(file).with_suffix("").parts)
    if classname != module and not classname.startswith(module + "."):
        raise SystemExit(f"test {classname}.{name}: its class does not lie in its file {file}")
    classes = classname[len(module) :].lstrip(".")
    return "::".join([file, *([c for c in classes.split(".")] if classes else []), name])


def skipped(report: str) -> list[str]:
    ids = []
    for case in ET.parse(report).iter("testcase"):
        if case.find("skipped") is not None:
            a = case.attrib
            ids.append(node_id(a.get("classname", ""), a["name"], a.get("file", "")))
    return list(dict.fromkeys(ids))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python .ci/skipped_tests.py REPORT.xml")
    print("\n".join(skipped(sys.argv[1])))
