"""Image files on disk: which files of a folder are images, and the one rule that matches candidates to
references (sample ids are file stems). Plain file-system work, importing neither torch nor Pillow, so that
a command checks its folders before anything heavy is imported; :mod:`genmetrics.data.io.images` re-exports
these names (the image input contract).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from genmetrics.errors import InputError

__all__ = ["IMAGE_EXTENSIONS", "list_images", "stem_index", "unused_references"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")


def list_images(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Image files in ``folder`` (by extension), sorted by name. Raises if the folder is missing or empty.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name in ("b.png", "a.jpg", "notes.txt"):
    ...         _ = (Path(d) / name).write_bytes(b"")
    ...     [p.name for p in list_images(d)]
    ['a.jpg', 'b.png']
    """
    root = Path(folder)
    if not root.exists():
        if root.is_symlink():
            raise InputError(
                f"{str(root)!r} is a broken symbolic link (to {os.readlink(root)!r}); fix or remove it"
            )
        if any(c in root.name for c in "*?["):
            raise InputError(
                f"image folder {str(root)!r} does not exist (a pattern such as *.png is not expanded here; "
                "pass the folder, or leave the pattern unquoted for the shell to expand)"
            )
        raise InputError(f"image folder {str(root)!r} does not exist; check the path")
    if not root.is_dir():
        if root.suffix.lower() in IMAGE_EXTENSIONS:
            return [root]
        raise InputError(
            f"{str(root)!r} is neither a folder nor an image file ({', '.join(IMAGE_EXTENSIONS)})"
        )
    it = root.rglob("*") if recursive else root.iterdir()
    found = [p for p in it if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()]
    files = sorted(p for p in found if not p.name.startswith("."))
    hidden = sorted(p.name for p in found if p.name.startswith("."))
    if hidden:  # e.g. macOS "._x.png" companions: skipped, but never without a word
        warnings.warn(
            f"image folder {str(root)!r}: {len(hidden)} hidden file(s) skipped (names starting with '.', "
            f"first: {hidden[0]}); rename them to score them",
            stacklevel=2,
        )
    if not files:
        raise InputError(
            f"image folder {str(root)!r} contains no images (looked for {', '.join(IMAGE_EXTENSIONS)}"
            f"{' recursively' if recursive else ''})"
        )
    return files


def stem_index(files: list[Path], *, role: str) -> dict[str, Path]:
    """``{stem: file}``: THE matching rule of ``genmetrics score`` and the leaderboard. Sample ids are file
    stems, so two files with one stem (``s0.png`` and ``s0.jpg``) are refused on either side, naming both.

    >>> stem_index([Path("refs/s0.png"), Path("refs/s1.jpg")], role="references")
    {'s0': PosixPath('refs/s0.png'), 's1': PosixPath('refs/s1.jpg')}
    >>> stem_index([Path("refs/s0.png"), Path("refs/s0.jpg")], role="references")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: references: ...s0...
    """
    seen: dict[str, Path] = {}
    for f in files:
        f = Path(f)
        if f.stem in seen and os.path.realpath(seen[f.stem]) == os.path.realpath(f):
            raise InputError(
                f"{role}: {str(f)!r} is given twice (directly, or through a folder and its own path); "
                "pass each image once"
            )
        if f.stem in seen:
            raise InputError(
                f"{role}: two images share the stem {f.stem!r} ({seen[f.stem]}, {f}); sample ids are "
                "file stems (names without extension), so rename or remove one"
            )
        seen[f.stem] = f
    return seen


def unused_references(
    references: list[Path], candidates: list[Path], *, ref_name: str = "references"
) -> str | None:
    """A one-line note naming the references no candidate matches (``None`` when every one is used).

    >>> unused_references([Path("000.png"), Path("001.png")], [Path("001.jpg")])
    'references: 1 reference image(s) have no candidate with the same stem and are not used (first: 000.png)'
    >>> unused_references([Path("001.png")], [Path("001.jpg")]) is None
    True
    """
    stems = {Path(c).stem for c in candidates}
    extra = [Path(r).name for r in references if Path(r).stem not in stems]
    if not extra:
        return None
    return (
        f"{ref_name}: {len(extra)} reference image(s) have no candidate with the same stem and are not used "
        f"(first: {', '.join(extra[:3])})"
    )
