"""The file listing and matching rules (``genmetrics.data.io.files``) import neither torch nor Pillow, so a
command checks its folders, and then its weights, before torch is imported; ``genmetrics.data.io.images``
still offers the same objects under their old names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from genmetrics.data.io import files, images

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_listing_rules_imports_no_torch_or_pillow():
    code = (
        "import sys; import genmetrics.data.io.files; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'PIL', 'numpy')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("name", files.__all__)
def test_images_offers_the_same_objects(name):
    assert getattr(images, name) is getattr(files, name)


def test_listing_matches_by_extension_and_skips_hidden_files(tmp_path):
    for name in ("b.PNG", "a.jpg", ".c.png", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "d.png").mkdir()  # a folder named like an image is no image
    with pytest.warns(UserWarning, match="1 hidden file"):
        got = files.list_images(tmp_path)
    assert [p.name for p in got] == sorted(
        p.name
        for p in tmp_path.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in files.IMAGE_EXTENSIONS
    )
