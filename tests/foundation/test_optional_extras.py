"""faiss is the optional ``[retrieval]`` extra: not a hard dependency, and retrieval without it fails with
one clear error that names the extra (and the faiss-gpu alternative) before any image is embedded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from genmetrics.errors import GenmetricsError, MissingDependencyError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def test_faiss_is_the_retrieval_extra():
    meta = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"
    ]
    assert not any(
        d.replace(" ", "").lower().startswith(("faiss-cpu", "faiss-gpu", "faiss"))
        for d in meta["dependencies"]
    )
    assert any(d.startswith("faiss-cpu") for d in meta["optional-dependencies"]["retrieval"])


def test_missing_faiss_is_one_clear_error(monkeypatch, tmp_path):
    from genmetrics.tpips import retrieval

    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` now raises ImportError
    with pytest.raises(MissingDependencyError) as e:
        retrieval._import_faiss()
    msg = str(e.value)
    assert "pip install 'genmetrics[retrieval]'" in msg and "faiss-gpu" in msg
    assert isinstance(e.value, ImportError) and isinstance(
        e.value, GenmetricsError
    )  # the CLI: exit 1, one line

    class Model:  # build() refuses before it embeds anything
        variant = "late"

        def embed(self, *a, **k):
            raise AssertionError("embedded an image before checking for faiss")

    (tmp_path / "imgs").mkdir()
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "a.png")
    with pytest.raises(MissingDependencyError, match="genmetrics\\[retrieval\\]"):
        retrieval.AspectIndex.build(tmp_path / "imgs", tmp_path / "idx", Model(), ["color"], progress=False)
