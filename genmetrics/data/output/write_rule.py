"""The write rule (docs/errors.md, "Writing files"): a file is written only inside the folder the user chose
(``root``), never through a symbolic link.

* a destination that is a symbolic link is refused (the file it points to stays byte-identical), and so is one
  whose folder resolves outside ``root`` (a link planted as a sub-folder): :func:`destination`,
  :func:`make_folder`;
* files are opened with :data:`NOFOLLOW` (POSIX ``O_NOFOLLOW``; on Windows the ``lstat`` check of
  :func:`destination` stands alone) and :data:`CLOEXEC`.
"""

from __future__ import annotations

import os
from pathlib import Path

from genmetrics.errors import InputError

#: open flags of every write: never through a link, not inherited by child processes
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# ------------------------------------------------------------------------------------------ the write rule
def _within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # another drive (Windows)
        return False


def refuse_link(p: Path, name: str) -> None:
    """Refuse ``p`` (named ``name`` in the error) when it is a symbolic link: genmetrics never writes through one.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "link").symlink_to(Path(d) / "target")
    ...     refuse_link(Path(d) / "plain.txt", "--out")  # not a link: nothing happens
    ...     try:
    ...         refuse_link(Path(d) / "link", "--out")
    ...     except InputError as e:
    ...         print("is a symbolic link" in str(e))
    True
    """
    if p.is_symlink():
        raise InputError(
            f"{name}: {str(p)!r} is a symbolic link (to {os.readlink(p)!r}); genmetrics never writes through "
            "a link: remove the link or choose another name"
        )


def _make_dirs(folder: Path, base: Path, name: str) -> None:
    """Create ``base`` (the user's folder) and the folders from it down to ``folder``; a component that is a
    link (or anything but a folder) is refused before anything is created through it."""
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{name}: the folder {str(base)!r} cannot be created ({e.strerror or e})") from None
    cur = base
    for part in folder.relative_to(base).parts:
        cur = cur / part
        refuse_link(cur, name)
        if cur.exists() and not cur.is_dir():
            raise InputError(f"{name}: {str(cur)!r} is a file where a folder is needed; move it away")
        if not cur.exists():
            try:
                os.mkdir(cur)
            except FileExistsError:  # made by another process meanwhile
                pass


def destination(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, what: str | None = None
) -> Path:
    """THE write rule, checked before anything is written to ``path``; returns ``path`` made absolute, with
    its folder created. ``root`` is the folder the user chose (default: the folder ``path`` is in); ``what``
    names the destination in the error (default: the path).

    Refused with :class:`~genmetrics.errors.InputError`: ``path`` outside ``root`` (``..``), a folder
    between them that is a symbolic link or resolves outside ``root``, and ``path`` itself being a link.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     target = Path(d) / "precious.txt"
    ...     _ = target.write_text("keep")
    ...     (Path(d) / "out").mkdir()
    ...     (Path(d) / "out" / "results.jsonl").symlink_to(target)  # a link planted in the output folder
    ...     ok = destination(Path(d) / "out" / "plots" / "a.png", root=Path(d) / "out")
    ...     try:
    ...         destination(Path(d) / "out" / "results.jsonl", root=Path(d) / "out")
    ...     except InputError as e:
    ...         print("refused:", "is a symbolic link" in str(e), target.read_text())
    ...     ok.parent.is_dir()
    refused: True keep
    True
    """
    p = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root)) if root is not None else p.parent
    name = what or str(path)
    if not _within(str(p.parent), str(base)):
        raise InputError(
            f"{name}: {str(p)!r} is outside the folder {str(base)!r}; genmetrics writes only inside the "
            "folder you chose"
        )
    _make_dirs(p.parent, base, name)
    real_root, real_parent = os.path.realpath(base), os.path.realpath(p.parent)
    if not _within(real_parent, real_root):
        raise InputError(
            f"{name}: its folder {str(p.parent)!r} resolves to {real_parent!r}, outside {str(base)!r} (a "
            "symbolic link?); genmetrics never writes outside the folder you chose: remove the link"
        )
    refuse_link(p, name)
    return p


def make_folder(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, what: str | None = None
) -> Path:
    """The folder ``path`` (created when missing) under the write rule: not a link, inside ``root``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     make_folder(Path(d) / "out" / "plots", root=Path(d) / "out").is_dir()
    True
    """
    p = destination(path, root=root, what=what)
    if p.exists() and not p.is_dir():
        raise InputError(f"{what or str(path)}: {str(p)!r} is a file; expected a folder")
    p.mkdir(exist_ok=True)
    return p
