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
    with pytest.warns(UserWarning) as caught:
        got = files.list_images(tmp_path)
    said = " ".join(str(w.message) for w in caught)
    assert "1 hidden file" in said and "first: d.png" in said
    assert [p.name for p in got] == sorted(
        p.name
        for p in tmp_path.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in files.IMAGE_EXTENSIONS
    )


def test_a_broken_link_is_listed_to_be_named_and_a_folder_named_like_an_image_is_skipped_with_a_word(
    tmp_path,
):
    """A dangling link or a link loop among the images was dropped from the listing without a word, so
    `score` and `compare` scored fewer images than the folder holds and never said which; now they are
    listed (the reader names them, or skips and reports them per --on-error). A folder named ``x.png`` is
    no image: skipped, with a warning naming it (a recursive listing looks inside it instead)."""
    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "b.png").symlink_to(tmp_path / "gone.png")
    (tmp_path / "c.png").symlink_to("c.png")  # a loop
    (tmp_path / "d.png").mkdir()
    (tmp_path / "d.png" / "e.png").write_bytes(b"")
    with pytest.warns(UserWarning, match=r"1 entry with an image extension skipped.*first: d\.png"):
        got = files.list_images(tmp_path)
    assert [p.name for p in got] == ["a.png", "b.png", "c.png"]
    deep = files.list_images(tmp_path, recursive=True)
    assert [p.relative_to(tmp_path).as_posix() for p in deep] == ["a.png", "b.png", "c.png", "d.png/e.png"]


def test_a_broken_link_is_named_with_its_target_and_a_loop_as_a_loop(tmp_path):
    (tmp_path / "b.png").symlink_to(tmp_path / "gone.png")
    (tmp_path / "c.png").symlink_to("c.png")
    broken, loop = files.broken_link(tmp_path / "b.png"), files.broken_link(tmp_path / "c.png")
    assert "b.png" in str(broken) and "gone.png" in str(broken) and "does not exist" in str(broken)
    assert "c.png" in str(loop) and "points back to itself" in str(loop)
