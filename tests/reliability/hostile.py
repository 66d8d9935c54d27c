"""The harness of the hostile-input cases (none of their ids is in ``catalogue.py``).

The cases live in the test file of the module they attack (``tests/<package>/test_<module>.py``): each
declares ``HOSTILE = Cases()``, registers cases with ``@HOSTILE.case(id, cls, what)`` and collects them with
``test_hostile = HOSTILE.test()``. Each case plants one fault in a fresh folder and runs genmetrics on it (the
Python API and, where a command exists, the CLI in-process through ``genmetrics.cli.main.main``; the
non-UTF-8 cases run a real subprocess). The test checks the five guarantees of docs/errors.md ("Hostile
inputs") around every case:

- no code execution: a pickle payload would create ``ctx.marker``; it never exists afterwards;
- no write outside the output folder: the whole case folder except ``ctx.out`` (and folders a case names
  with ``ctx.allow``) is snapshot after set-up and compared after the run -- names, link targets, sizes,
  mtimes and SHA-256 of every file;
- no data loss / no silent wrong result / no raw traceback: asserted by the case itself (``ctx.refused``
  expects the documented error class and fragments; ``ctx.cli`` expects the exit code, exactly one
  ``error:`` line and no ``Traceback``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from genmetrics.errors import GenmetricsError


# --------------------------------------------------------------------------------------------- harness
class Payload:
    """Unpickling this creates ``marker`` -- it stands for any code a crafted file could run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def snapshot(root: Path, skip: list[Path]) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed) except those under ``skip``: kind, link target,
    size, mtime and SHA-256."""
    out: dict[str, tuple] = {}
    skip_s = [str(s) for s in skip]
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if any(p == s or p.startswith(s + os.sep) for s in skip_s):
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                out[p] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[p] = ("dir",)
            else:
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[p] = ("file", st.st_size, st.st_mtime_ns, digest)
    return out


@dataclass
class Ctx:
    root: Path
    capsys: Any
    monkeypatch: Any
    allowed: list[Path] = field(default_factory=list)
    frozen: dict[str, tuple] | None = None

    def __post_init__(self) -> None:
        self.out = self.root / "out"
        self.inp = self.root / "in"
        self.inp.mkdir()
        self.outside_dir = self.root / "outside"
        self.outside_dir.mkdir()
        self.outside = self.outside_dir / "precious.txt"
        self.outside.write_bytes(b"user data genmetrics must never touch\n")
        self.marker = self.outside_dir / "PAYLOAD_RAN"
        self.allowed.append(self.out)

    def allow(self, p: Path) -> None:
        self.allowed.append(p)

    def freeze(self) -> None:
        """Call after set-up: from here on nothing outside ``out`` (and ``allow``-ed paths) may change."""
        self.frozen = snapshot(self.root, self.allowed)

    def payload(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(Payload(self.marker)))
        return path

    def refused(self, fn: Callable[[], Any], *fragments: str, exc: Any = GenmetricsError) -> str:
        with pytest.raises(exc) as e:
            fn()
        msg = str(e.value)
        for f in fragments:
            assert f in msg, (f, msg)
        return msg

    def cli(self, argv: list[str], code: int = 2, *fragments: str) -> str:
        from genmetrics.cli.main import main

        self.capsys.readouterr()
        rc = main(argv)
        out = self.capsys.readouterr()
        assert "Traceback" not in out.err + out.out, out.err
        assert rc == code, (rc, out.err)
        if code == 0:
            return out.out
        lines = [
            ln
            for ln in out.err.splitlines()
            if ln.strip() and not ln.startswith(("warning:", "note:", "WARNING", "ERROR:root"))
        ]
        assert len(lines) == 1 and lines[0].startswith("error: "), out.err
        for f in fragments:
            assert f in lines[0], (f, lines[0])
        return lines[0]


@dataclass(frozen=True)
class Hostile:
    id: str
    cls: str  # pickle | link | poison | fault | silent
    what: str
    run: Callable[[Ctx], None]
    cli: bool = False
    slow: bool = False
    xfail: str | None = None  # a bug found: strict xfail with this reason
    xfail_strict: bool = True


class Cases(list):
    """The hostile cases of one test file, and the parametrised test that runs them."""

    def case(self, id: str, cls: str, what: str, **kw: Any):
        """Register the decorated ``fn(ctx)`` as the case ``id`` (``cls``: pickle|link|poison|fault|silent)."""

        def deco(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
            self.append(Hostile(id, cls, what, fn, **kw))
            return fn

        return deco

    def test(self) -> Callable[..., None]:
        """The test that runs every case of this list in a fresh folder and checks the guarantees after it."""

        @pytest.mark.parametrize("case", [_param(c) for c in self])
        def test_hostile(case: Hostile, tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
            ctx = Ctx(tmp_path, capsys, monkeypatch)
            case.run(ctx)
            assert ctx.frozen is not None, "the case never called ctx.freeze()"
            assert not ctx.marker.exists(), "a pickle payload ran"
            after = snapshot(tmp_path, ctx.allowed)
            changed = sorted(k for k in set(ctx.frozen) | set(after) if ctx.frozen.get(k) != after.get(k))
            assert not changed, f"written outside the output folder: {changed}"

        return test_hostile


def _param(c: Hostile) -> Any:
    marks: list[Any] = []
    if c.slow:
        marks.append(pytest.mark.slow)
    if c.xfail:
        marks.append(pytest.mark.xfail(strict=c.xfail_strict, reason=c.xfail))
    return pytest.param(c, id=c.id, marks=marks)


def all_cases() -> list[Hostile]:
    """Every hostile case of the test suite: the ``Cases`` of every test file that declares one."""
    tests = Path(__file__).resolve().parents[1]
    found: list[Hostile] = []
    for path in sorted(tests.rglob("test_*.py")):
        if "HOSTILE = Cases()" not in path.read_text(encoding="utf-8"):
            continue
        name = ".".join(("tests", *path.relative_to(tests).with_suffix("").parts))
        if str(path.parent) not in sys.path:  # its helpers (lb_fakes, _data) import as pytest finds them
            sys.path.insert(0, str(path.parent))
        found += importlib.import_module(name).HOSTILE
    return found


# ---------------------------------------------------------------------------------------- shared set-ups
def _train_cfg(out: Path, **kw):
    from genmetrics.train import TrainLoopConfig

    base = dict(
        out_dir=out, lr=0.05, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0.0, seed=3, progress=False
    )
    return TrainLoopConfig(**{**base, **kw})


def _toy():
    from tests.train.toy import Toy, make_data

    return Toy, make_data


def _plant_link(link: Path, target: Path | str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(target), str(link))


def _images(folder: Path, n: int = 2, size: int = 16, seed: int = 0) -> Path:
    from genmetrics.testing import random_images, write_images

    write_images(folder, random_images(n, size, seed=seed))
    return folder


def _png(path: Path, w: int, h: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("1", (w, h)).save(path)
    return path


def _tmpfs(ctx: Ctx, size: str) -> Path:
    import subprocess

    mnt = ctx.out / "disk"
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    ctx.monkeypatch.setattr(ctx, "_mounted", mnt, raising=False)
    return mnt


def _umount(mnt: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _read_only(ctx: Ctx) -> Path:
    import subprocess

    mnt = _tmpfs(ctx, "1m")
    r = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True)
    if r.returncode != 0:
        _umount(mnt)
        pytest.skip("cannot remount read-only here")
    return mnt
