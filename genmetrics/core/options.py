"""Checks for options and environment variables: every value is checked when the metric or run is created,
and a bad one raises :class:`~genmetrics.errors.InputError` naming the option (or variable), what was
expected and what arrived.

* :func:`number`, :func:`integer`, :func:`choice`, :func:`template`, :func:`flag` check one option;
* :func:`env` reads a ``GENMETRICS_*`` variable (the only place that does), parsed and checked by the
  kind registered in :data:`ENV_VARS` (docs/errors.md lists them).

Nothing here imports torch; it is cheap to import anywhere.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genmetrics.errors import InputError

__all__ = [
    "COUNT_MAX",
    "ENV_VARS",
    "INT64_MAX",
    "SEED_MAX",
    "EnvVar",
    "choice",
    "env",
    "flag",
    "integer",
    "number",
    "seed",
    "template",
]

#: the largest integer torch and numpy take (an int64); every integer option is at most this
INT64_MAX = 2**63 - 1
#: the largest random seed every generator of a run takes (numpy's legacy seeding: 32 bits)
SEED_MAX = 2**32 - 1
#: the largest count of items per batch (or micro-batch): torch sizes its batch tensors with it and indexes
#: some of them with 32-bit integers
COUNT_MAX = 2**31 - 1
#: the most data-loading worker processes a run starts (each one is a process holding a copy of the dataset
#: object; far more than any machine's cores)
MAX_WORKERS = 256


def _who(name: str, owner: str | None) -> str:
    return f"{owner}: option {name}" if owner else f"option {name}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is None and hi is None:
        return ""
    # an infinite end is never in the range: its bracket is open ("(0.0, inf)"), as the check is
    left, right = ("(" if lo_open or lo is None else "["), (")" if hi_open or hi is None else "]")
    return f" in {left}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{right}"


def _parse_number(name: str, value: Any, owner: str | None, what: str) -> float:
    """A number from a number or a numeric string (``"3"``, ``"1e-3"``), else an error naming ``name``."""
    if isinstance(value, bool) or value is None:
        raise InputError(f"{_who(name, owner)}: expected {what}, got {value!r}")
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise InputError(f"{_who(name, owner)}: expected {what}, got the text {value!r}") from None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int of hundreds of digits
        raise InputError(
            f"{_who(name, owner)}: expected {what}, got {type(value).__name__} {value!r}"[:300]
        ) from None


def number(
    name: str,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    owner: str | None = None,
) -> float:
    """A finite float in the given range (a numeric string is accepted: CLI values arrive as text).

    >>> number("lr", "1e-3", lo=0.0, lo_open=True)
    0.001
    >>> number("lr", 0, lo=0.0, lo_open=True, owner="train")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: train: option lr: expected a finite number in (0.0, inf), got 0
    """
    what = "a finite number" + _range_text(lo, hi, lo_open, hi_open)
    v = _parse_number(name, value, owner, what)
    ok = (
        math.isfinite(v)
        and (lo is None or (v > lo if lo_open else v >= lo))
        and (hi is None or (v < hi if hi_open else v <= hi))
    )
    if not ok:
        raise InputError(f"{_who(name, owner)}: expected {what}, got {value!r}")
    return v


def integer(
    name: str, value: Any, *, lo: int | None = None, hi: int | None = None, owner: str | None = None
) -> int:
    """An integer in ``[lo, hi]`` (``3.0`` and ``"3"`` are accepted; ``3.5``, ``True``, ``nan`` are not).

    >>> integer("epochs", "3", lo=1), integer("epochs", 3.0, lo=1)
    (3, 3)
    >>> integer("batch_size", 3.5)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: option batch_size: expected an integer, got 3.5
    """
    what = "an integer" + _range_text(lo, hi, False, False)
    if isinstance(value, int) and not isinstance(value, bool):
        v: Any = value  # exact: a float would round integers above 2**53
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        v = int(value)
    else:
        v = _parse_number(name, value, owner, what)
        if not math.isfinite(v) or not float(v).is_integer():
            raise InputError(f"{_who(name, owner)}: expected {what}, got {value!r}")
        v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise InputError(f"{_who(name, owner)}: expected {what}, got {_short(value)}")
    if not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise InputError(
            f"{_who(name, owner)}: expected {what}, got {_short(value)}, which does not fit in 64 bits (torch and "
            "numpy take integers in [-2**63, 2**63 - 1])"
        )
    return v


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "..."


def seed(name: str, value: Any, *, owner: str | None = None) -> int:
    """A random seed: an integer in ``[0, 2**32 - 1]``, what every generator a run seeds takes (numpy's
    legacy ``np.random.seed`` refuses larger ones; torch, Python's ``random`` and ``np.random.default_rng``
    take them too).

    >>> seed("seed", 3407)
    3407
    >>> seed("run.seed", 2**64 + 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: option run.seed: expected an integer in [0, 4294967295], got 18446744073709551617; seeds ...
    """
    try:
        return integer(name, value, lo=0, hi=SEED_MAX, owner=owner)
    except InputError as e:
        raise InputError(
            f"{e}; seeds are integers in [0, 2**32 - 1] (numpy's generators take no larger ones)"
        ) from None


def choice(name: str, value: Any, choices: Sequence[str], *, owner: str | None = None) -> str:
    """``value`` when it is one of ``choices``; else an error naming the option, with the closest choice.

    >>> choice("variant", "mid", ("late", "mid", "early"))
    'mid'
    >>> choice("variant", "lates", ("late", "mid", "early"), owner="tpips")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: tpips: option variant: expected one of 'late', 'mid', 'early', got 'lates'; did you mean 'late'?
    """
    if not isinstance(value, str) or value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(
            f"{_who(name, owner)}: expected one of {', '.join(map(repr, choices))}, got {value!r}{hint}"
        )
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def flag(name: str, value: Any, *, owner: str | None = None) -> bool:
    """A bool, or its text form from a config or command line (``1/true/yes/on``, ``0/false/no/off``).

    >>> flag("resume", True), flag("resume", "yes"), flag("resume", "0")
    (True, True, False)
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise InputError(f"{_who(name, owner)}: expected true or false, got {value!r}")


def template(name: str, value: Any, *, slots: int = 1, owner: str | None = None) -> str:
    """A ``str.format`` template with exactly ``slots`` positional ``{}`` slots and no other field.

    >>> template("prompt_template", "a photo of {}")
    'a photo of {}'
    >>> template("prompt_template", "a {} of {}")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: option prompt_template: expected a template with exactly 1 '{}' slot(s) and no other field, got 'a {} of {}' (2 field(s): ['', ''])
    """
    if not isinstance(value, str):
        raise InputError(f"{_who(name, owner)}: expected a text template with {slots} '{{}}', got {value!r}")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
    except ValueError as e:
        raise InputError(
            f"{_who(name, owner)}: {value!r} is not a valid template ({e}); write literal braces as "
            "'{{' and '}}'"
        ) from None
    if len(fields) != slots or any(f != "" for f in fields):
        raise InputError(
            f"{_who(name, owner)}: expected a template with exactly {slots} '{{}}' slot(s) and no "
            f"other field, got {value!r} ({len(fields)} field(s): {fields!r})"
        )
    return value


# ------------------------------------------------------------------------------------------ environment
@dataclass(frozen=True)
class EnvVar:
    """A ``GENMETRICS_*`` environment variable: its name, how its value is parsed (``kind``), what it does.

    >>> ENV_VARS["GENMETRICS_PROGRESS"].kind, sorted(ENV_VARS)[0]
    ('progress', 'GENMETRICS_BACKBONE_PROVIDER')
    """

    name: str
    kind: str  # "path", "flag", "int", "progress", "text"
    help: str
    lo: int | None = None


ENV_VARS: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar(
            "GENMETRICS_HOME", "path", "root of the weights and feature caches (default ~/.cache/genmetrics)"
        ),
        EnvVar("GENMETRICS_OFFLINE", "flag", "1/true: never download (as HF_HUB_OFFLINE)"),
        EnvVar(
            "GENMETRICS_PROGRESS",
            "progress",
            "1/true/yes/on: progress bars always, 0/false/no/off: never, unset: a bar on a terminal",
        ),
        EnvVar(
            "GENMETRICS_MAX_PIXELS",
            "int",
            "largest image accepted, in pixels (decompression-bomb guard)",
            lo=1,
        ),
        EnvVar(
            "GENMETRICS_FAST_PATHS",
            "text",
            "unset/exact: only fast paths that give the reference bits; off: none; all, or a comma list of "
            "names (psnr_native, onednn_packed_linear): those too, although they may change last bits",
        ),
        EnvVar(
            "GENMETRICS_BACKBONE_PROVIDER",
            "text",
            "'package.module:function' that supplies backbones (tests)",
        ),
    )
}


def env(name: str, default: Any = None) -> Any:
    """The value of the registered ``GENMETRICS_*`` variable ``name``, parsed by its kind; ``default`` when
    it is unset or empty. A bad value raises :class:`InputError` naming the variable.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_MAX_PIXELS": "4096"}):
    ...     env("GENMETRICS_MAX_PIXELS")
    4096
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_MAX_PIXELS": ""}):  # empty: the default
    ...     env("GENMETRICS_MAX_PIXELS", default=7)
    7
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_MAX_PIXELS": "many"}):
    ...     env("GENMETRICS_MAX_PIXELS")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: environment variable GENMETRICS_MAX_PIXELS: expected an integer in [1, inf), got the text 'many'; fix or unset it ...
    """
    spec = ENV_VARS[name]
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    raw = raw.strip()
    try:
        if spec.kind == "flag":
            return flag(name, raw)
        if spec.kind == "int":
            return integer(name, raw, lo=spec.lo)
        if spec.kind == "progress":  # read as "1" or "0" (also yes/no, true/false, on/off)
            return "1" if flag(name, raw) else "0"
    except InputError as e:
        msg = str(e).replace(f"option {name}", f"environment variable {name}", 1)
        raise InputError(f"{msg}; fix or unset it ({spec.help})") from None
    if spec.kind == "path":
        path = _expand(raw, what=f"environment variable {name}")
        if path.exists() and not path.is_dir():
            raise InputError(
                f"environment variable {name}: {raw!r} is a file; expected a folder (created when "
                f"missing); fix or unset it ({spec.help})"
            )
        return path
    return raw


def expand_user(path: str | os.PathLike, *, what: str = "path") -> Path:
    """``Path(path).expanduser()``, with an error naming ``what`` when ``~user`` names no user (Python's
    own message is "Could not determine home directory")."""
    return _expand(str(path), what=what)


def _expand(raw: str, *, what: str) -> Path:
    try:
        return Path(raw).expanduser()
    except RuntimeError:
        user = raw[1:].split("/", 1)[0].split(os.sep, 1)[0]
        raise InputError(
            f"{what} {raw!r}: '~{user}' names no user on this machine (no home directory); give the "
            "folder as an absolute path"
        ) from None


def check_environment() -> None:
    """Check every set ``GENMETRICS_*`` variable (called when a run or command starts)."""
    for name in ENV_VARS:
        env(name)


def device(name: str, value: Any, *, owner: str | None = None) -> Any:
    """A torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``auto`` where allowed) or a
    ``torch.device``; an unknown one (``gpu``) is bad input, not a missing environment."""
    if value is None or not isinstance(value, str):
        return value
    if not re.fullmatch(r"(auto|cpu|mps|meta|xpu|cuda(:\d+)?)", value.strip()):
        raise InputError(
            f"{_who(name, owner)}: unknown device {value!r}; expected cpu, cuda, cuda:N or mps "
            "(or auto where the command offers it)"
        )
    return value.strip()
