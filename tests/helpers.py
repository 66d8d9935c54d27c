"""Helpers shared by test files (importable without torch: a fresh interpreter of a test may import them)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from genmetrics.errors import WeightsUnavailableError


def assert_unknown_name_named(module: object, name: str) -> None:
    """``module.name`` (a lazily exporting package) is an ``AttributeError`` naming the module and ``name``."""
    what = f"module {getattr(module, '__name__', module)!r} has no attribute {name!r}"
    with pytest.raises(AttributeError, match=re.escape(what)):
        getattr(module, name)


def raised(call: Callable[[], object], error: type[BaseException] = WeightsUnavailableError) -> str:
    """The text of the ``error`` that ``call()`` raises (the test fails when it raises none)."""
    with pytest.raises(error) as info:
        call()
    return str(info.value)


def run_python(code: str, *, env: dict[str, str] | None = None, cwd=None, timeout: float = 300) -> str:
    """Run ``code`` in a fresh interpreter (``python -c``); it must exit 0 (else its stderr's tail is the
    failure). Returns its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@contextlib.contextmanager
def held_by_child(code: str) -> Iterator[subprocess.Popen]:
    """A child interpreter running ``code``, which prints ``held`` once it holds what the test needs held (a
    lock) and then sleeps: entered when it has said so, killed (and reaped) on exit."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        yield p
    finally:
        p.kill()
        p.wait()
