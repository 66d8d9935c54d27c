"""What the package imports and what pyproject.toml declares agree (statically, over every source file):
every third-party module genmetrics imports is a declared dependency (with the right Python marker:
tomli only where tomllib is missing), every declared dependency is imported somewhere, and the typed
marker ships."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: import name -> distribution name, where they differ
DIST_OF = {
    "open_clip": "open-clip-torch",
    "PIL": "pillow",
    "yaml": "pyyaml",
    "faiss": "faiss-cpu",
    "huggingface_hub": "huggingface-hub",
}
#: imported only to adapt to them when present (never required)
OPTIONAL_IMPORTS = {"lightning", "pytorch_lightning"}
#: declared for what they bring to other dependencies, not imported by genmetrics itself
INDIRECT = {
    "tokenizers",  # transformers' fast tokenizers (the tiny VLM processors build one)
    "torchvision",
}  # open_clip's transforms; pinned to match torch (the README installs both)


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(req).name).lower()


def imports(root: Path) -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere under ``root`` -> files importing them."""
    out: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top != "genmetrics" and top not in sys.stdlib_module_names:
                    out.setdefault(top, set()).add(str(path.relative_to(root.parent)))
    return out


def declared() -> dict[str, list[Requirement]]:
    reqs = [Requirement(r) for r in PROJECT["project"]["dependencies"]]
    for extra in PROJECT["project"].get("optional-dependencies", {}).values():
        reqs += [Requirement(r) for r in extra]
    out: dict[str, list[Requirement]] = {}
    for r in reqs:
        out.setdefault(_name(str(r)), []).append(r)
    return out


def test_every_imported_module_is_declared():
    deps = declared()
    missing = {
        m: sorted(f)[:2]
        for m, f in imports(REPO / "genmetrics").items()
        if m not in OPTIONAL_IMPORTS and _name(DIST_OF.get(m, m)) not in deps
    }
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_runtime_dependency_is_imported():
    used = {_name(DIST_OF.get(m, m)) for m in imports(REPO / "genmetrics")}
    unused = [r for r in PROJECT["project"]["dependencies"] if _name(r) not in used | INDIRECT]
    assert not unused, f"declared but never imported by genmetrics: {unused}"


def test_tomli_is_declared_exactly_where_tomllib_is_missing():
    (tomli,) = declared()["tomli"]
    assert tomli.marker is not None
    assert tomli.marker.evaluate({"python_version": "3.10"})
    assert not tomli.marker.evaluate({"python_version": "3.11"})
    assert Marker("python_version < '3.11'").evaluate({"python_version": "3.10"})  # the check itself works


def test_typed_marker_ships():
    assert (REPO / "genmetrics" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["genmetrics"]


def test_import_scan_sees_nested_imports(tmp_path):
    pkg = tmp_path / "genmetrics"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import os\nfrom . import x\ndef f():\n    import tomli\n    from yaml import safe_load\n"
    )
    assert set(imports(pkg)) == {"tomli", "yaml"}


def test_the_native_kernel_is_optional_at_build_time(tmp_path):
    """A machine without a C compiler (CC=/bin/false) still builds: setup.py's extension is optional, the
    build exits 0 with a warning and ships no kernel (psnr then takes its torch path:
    tests/accel/test_pixel_native.py::test_without_the_extension_the_metric_takes_the_torch_path).
    With the compiler the same command builds it (where this machine has one)."""
    import os
    import shutil
    import subprocess

    import pytest

    pytest.importorskip("setuptools")  # Python 3.12+ venvs come without it (pip builds in isolation)

    def build(cc: str | None, out: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
        env = dict(os.environ)
        if cc is not None:
            env["CC"] = cc
        cmd = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out / "lib")]
        proc = subprocess.run(
            [*cmd, "--build-temp", str(out / "tmp")], cwd=REPO, env=env, capture_output=True, text=True
        )
        return proc, list((out / "lib").rglob("_native*"))

    proc, built = build("/bin/false", tmp_path / "nocc")
    assert proc.returncode == 0, proc.stderr
    assert built == [] and "failed" in proc.stdout + proc.stderr
    if shutil.which("cc") or shutil.which("gcc"):
        proc, built = build(None, tmp_path / "cc")
        assert proc.returncode == 0 and len(built) == 1, proc.stderr
        assert built[0].parent.name == "accel", built  # genmetrics.accel._native, next to pixel_native.py
