"""Image files on disk: which files of a folder are images, and the one rule that matches candidates to
references (sample ids are file stems). Plain file-system work, importing neither torch nor Pillow, so that
a command checks its folders before anything heavy is imported; :mod:`genmetrics.data.io.images` re-exports
these names (the image input contract).
"""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

from genmetrics.errors import InputError

__all__ = ["IMAGE_EXTENSIONS", "broken_link", "list_images", "stem_index", "unused_references"]

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
            raise broken_link(root)
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
    found, others = [], []
    for p in it:
        if p.suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        if p.is_file() or (p.is_symlink() and not p.exists()):
            # a broken symbolic link (or a loop) is a missing image: listed, so the reader names it (or skips
            # and reports it, per --on-error) instead of the run scoring fewer images without a word
            found.append(p)
        elif not (recursive and p.is_dir()):  # a recursive listing looks inside a folder named x.png
            others.append(p.name)
    if others:  # a folder named x.png, a socket, a device: not image files, skipped but named
        warnings.warn(
            f"image folder {str(root)!r}: {len(others)} entr{'y' if len(others) == 1 else 'ies'} with an "
            f"image extension skipped, not being files (first: {sorted(others)[0]}); rename or remove them",
            stacklevel=2,
        )
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


def broken_link(path: Path) -> InputError:
    """The error for a symbolic link whose target is missing, or that points back to itself (a loop).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "x.png").symlink_to("x.png")
    ...     "points back to itself" in str(broken_link(Path(d) / "x.png"))
    True
    """
    target = os.readlink(path)
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return InputError(
                f"{str(path)!r} is a symbolic link that points back to itself (a loop, through {target!r}); "
                "point it at the image or remove it"
            )
    return InputError(
        f"{str(path)!r} is a broken symbolic link (to {target!r}, which does not exist); fix or remove it"
    )


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
