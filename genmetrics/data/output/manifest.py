"""The run manifest: versions, platform, command and time of a run (:func:`manifest`)."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def package_versions(
    names: Iterable[str] = (
        "genmetrics",
        "torch",
        "torchvision",
        "open_clip_torch",
        "transformers",
        "peft",
        "accelerate",
        "torchmetrics",
        "numpy",
        "scipy",
        "pillow",
    ),
) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` for a package that is not installed), for manifests.

    >>> v = package_versions(["genmetrics", "no-such-package"])
    >>> isinstance(v["genmetrics"], str), v["no-such-package"]
    (True, None)
    """
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    if out.get("genmetrics") is None and "genmetrics" in out:  # a source checkout that is not installed
        out["genmetrics"] = "source checkout (not installed)"
    return out


def _command() -> str:
    """The command line, with ``python -m genmetrics`` for ``.../genmetrics/__main__.py``."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "genmetrics":
        argv[0] = "python -m genmetrics"
    return " ".join(argv)


def manifest(**extra: Any) -> dict[str, Any]:
    """Versions, platform, command and time, plus whatever the caller adds (options, weights, seed).

    >>> m = manifest(seed=0)
    >>> m["seed"], {"created", "versions"} <= set(m)
    (0, True)
    """
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": _command(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": package_versions(),
        **extra,
    }
