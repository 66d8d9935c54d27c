"""benchmarks/architecture.py on a synthetic tree whose every count is known from how it is built."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "architecture.py"


def _load():
    spec = importlib.util.spec_from_file_location("architecture_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines (``def`` line included)."""
    body = [f"{indent}    x{i} = {i}" for i in range(lines - 2)]
    return "\n".join([f"{indent}def {name}():", *body, f"{indent}    return 0"]) + "\n"


LENGTHS = {"short": 3, "edge": 40, "over": 41, "longest": 77}  # top-level functions in pkg/big.py
ISSUE = "iss" + "ue"  # kept out of this file's own text


def _tree(root: Path) -> dict:
    pkg = root / "genmetrics"
    (pkg / "sub").mkdir(parents=True)
    (root / "tests" / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .big import short\n\n__all__ = ['short']\n")  # no behaviour
    big = "".join(_function(n, k) + "\n" for n, k in LENGTHS.items())
    big += "class Thing:\n" + _function("method", 45, "    ")
    (pkg / "big.py").write_text(big)
    # private reads: ``a._own`` is defined in the package, ``self._x``/``super()._y`` are its own,
    # ``__dict__`` is a dunder; ``torch._C`` and ``m._modules`` (twice) are private members of dependencies
    (pkg / "sub" / "priv.py").write_text(
        "import torch\n\n\nclass Own:\n"
        "    def __init__(self):\n        self._own = 1\n\n"
        "    def read(self, a, m):\n"
        "        '''Documented.'''\n"
        "        return a._own, self._x, super()._y, a.__dict__, torch._C, m._modules, m._modules\n\n"
        "    def undocumented(self):\n        return 1\n\n"
        "    def _private(self):\n        return 2\n\n\n"
        "class _Hidden:\n    def public(self):\n        return 3\n"
    )
    # names: ``shared`` and ``Shared`` in two modules, ``CONST`` in two (one inside ``if``), ``_priv`` twice
    # (private: not counted), ``imported`` imported (not a definition)
    (pkg / "sub" / "one.py").write_text(
        f"# see {ISSUE} 12 and ("
        + "#3)\n"
        + "CONST = 1\n_priv = 1\n\n\ndef shared():\n    pass\n\n\nclass Shared:\n    pass\n"
    )
    (pkg / "sub" / "two.py").write_text(
        f"'''{ISSUE}-4'''\nfrom .one import shared as imported\n\nif True:\n    CONST = 2\n_priv = 2\n"
        "\n\ndef shared():\n    pass\n\n\nclass Shared:\n    pass\n"
    )
    (pkg / "sub" / "_helper.py").write_text("def helper():\n    return 1\n")
    (pkg / "consts.py").write_text("VALUE = 1\n")  # no function: no behaviour
    # mirrored: big.py (tests/test_big.py), sub/_helper.py (tests/sub/test_helper.py);
    # not mirrored: sub/priv.py, sub/one.py (its test sits in the wrong folder), sub/two.py
    (root / "tests" / "test_big.py").write_text(f"# {ISSUE} 9\n" + "x = 1\n" * 200)
    (root / "tests" / "sub" / "test_helper.py").write_text("x = 1\n")
    (root / "tests" / "test_one.py").write_text("x = 1\n")
    return {
        "behaviour": ["big.py", "sub/priv.py", "sub/one.py", "sub/two.py", "sub/_helper.py"],
        "mirrored": ["big.py", "sub/_helper.py"],
        "private": ["_C", "_modules", "_modules"],
        "twice": ["CONST", "Shared", "shared"],
    }


def test_every_count_matches_the_tree(tmp_path):
    arch = _load()
    want = _tree(tmp_path)
    m = arch.measure(tmp_path)
    files = sorted((tmp_path / "genmetrics").rglob("*.py"))
    sizes = {p.relative_to(tmp_path).as_posix(): len(p.read_text().splitlines()) for p in files}
    assert m["package_files"] == len(files) and m["package_lines"] == sum(sizes.values())
    assert m["largest_file"] == {"path": max(sizes, key=sizes.get), "lines": max(sizes.values())}
    assert m["largest_test_file"] == {"path": "tests/test_big.py", "lines": 201}
    assert m["longest_function"] == {"name": "genmetrics/big.py:longest", "lines": LENGTHS["longest"]}
    lengths = [
        *LENGTHS.values(),
        45,
        2,
        3,
        2,
        2,
        2,
        2,
        2,
        2,
    ]  # + method, Own (4), _Hidden, shared (2), helper
    assert m["functions"] == len(lengths)
    assert m["functions_over_40_lines"] == sum(n > 40 for n in lengths)
    assert sorted(s.rsplit(":", 1)[1] for s in m["private_access_sites"]) == want["private"]
    assert m["private_accesses"] == len(want["private"])
    assert sorted(m["names_defined_twice_where"]) == want["twice"]
    assert m["names_defined_twice_where"]["CONST"] == ["genmetrics/sub/one.py", "genmetrics/sub/two.py"]
    assert m["modules_with_behaviour"] == len(want["behaviour"])
    assert m["modules_mirrored"] == len(want["mirrored"])
    assert sorted(m["modules_not_mirrored"]) == sorted(
        f"genmetrics/{p}" for p in set(want["behaviour"]) - set(want["mirrored"])
    )
    assert (m["issue_references_package"], m["issue_references_tests"]) == (3, 1)
    # public methods of public classes: Own.read (documented), Own.undocumented; Thing.method
    assert m["public_methods"] == 3
    assert m["public_methods_without_docstring_names"] == ["Own.undocumented", "Thing.method"]


def test_command_line_json_and_markdown_agree(tmp_path):
    _tree(tmp_path / "after")
    _tree(tmp_path / "before")
    (tmp_path / "after" / "genmetrics" / "sub" / "two.py").unlink()

    def run(*args: str) -> str:
        cmd = [sys.executable, str(SCRIPT), "--root", str(tmp_path / "after"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout

    after = json.loads(run())
    assert after["names_defined_twice"] == 0 and after["modules_with_behaviour"] == 4
    (tmp_path / "before.json").write_text(run("--root", str(tmp_path / "before")))
    rows = run("--markdown", "--before", str(tmp_path / "before.json")).splitlines()
    assert rows[0] == "| Measure | Before | After |"
    cells = {r.split(" | ")[0].lstrip("| "): r.strip("| ").split(" | ")[1:] for r in rows[2:]}
    assert len(cells) == len(_load().ROWS)
    assert cells["Public names defined in more than one module"] == ["3", "0"]
    assert cells["Modules with behaviour / with a mirrored test file"] == ["5 / 2", "4 / 2"]
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path / "nowhere")], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "--root" in bad.stderr and "genmetrics" in bad.stderr
