"""Numbers as the reports show them: an estimate and its interval always to the same digits, chosen from the
interval's width (two significant digits of the width), so no digit is shown that the interval does not
support and none is dropped that it does. Light: standard library only."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_DECIMALS", "decimals", "fmt", "fmt_ci", "fmt_p", "unit_suffix"]

#: the most decimals a fixed-point number is shown with
MAX_DECIMALS = 6
_SIG = 4  # significant digits of a value shown alone (or with a zero-width interval)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def decimals(*values: Any, width: Any = None) -> int | None:
    """The decimals shared by ``values``: two significant digits of ``width`` when it is positive, else
    four significant digits of the largest value; ``None`` when fixed point does not suit (a value of 1e6 or
    more, or all below 1e-3): the numbers are then shown in scientific notation.

    >>> decimals(24.66, 23.0, 25.1, width=2.1), decimals(0.8123, width=0.034), decimals(100.0), decimals(2e-5)
    (1, 3, 1, None)
    """
    vals = [abs(float(v)) for v in values if _finite(v)]
    big = max(vals, default=0.0)
    if big >= 1e6 or 0 < big < 1e-3:
        return None
    if _finite(width) and width > 0:
        d = 1 - math.floor(math.log10(width))
    else:
        d = _SIG - 1 - math.floor(math.log10(big)) if big > 0 else 0
    return min(max(d, 0), MAX_DECIMALS)


def _one(x: Any, d: int | None, signed: bool) -> str:
    if not _finite(x):
        return "–" if x is None else str(x)
    sign = "+" if signed else ""
    return f"{x:{sign}.{d}f}" if d is not None else f"{x:{sign}.{_SIG - 1}e}"


def fmt(x: Any, *, signed: bool = False) -> str:
    """A number alone (4 significant digits; ``signed``: with its sign); "–" for a missing value.

    >>> fmt(1234.5678), fmt(0.5, signed=True), fmt(None), fmt(3e-7)
    ('1235', '+0.5', '–', '3e-07')
    """
    if not _finite(x):
        return "–" if x is None else str(x)
    return f"{x:+.{_SIG}g}" if signed else f"{x:.{_SIG}g}"


def fmt_ci(est: Any, low: Any, high: Any, *, signed: bool = False) -> tuple[str, str, str]:
    """The estimate and the ends of its interval, all three to the same decimals (:func:`decimals` of the
    interval's width).

    >>> fmt_ci(24.66, 23.0, 25.12), fmt_ci(17.4, 17.0, 18.83, signed=True), fmt_ci(100.0, 100.0, 100.0)
    (('24.7', '23.0', '25.1'), ('+17.4', '+17.0', '+18.8'), ('100.0', '100.0', '100.0'))
    """
    width = high - low if _finite(low) and _finite(high) else None
    d = decimals(est, low, high, width=width)
    return _one(est, d, signed), _one(low, d, signed), _one(high, d, signed)


def fmt_p(p: float, n_boot: int) -> str:
    """A bootstrap p-value; below the resolution ``1 / n_boot`` it is shown as a bound.

    >>> fmt_p(0.0321, 1000), fmt_p(0.0, 1000)
    ('0.032', '< 0.001')
    """
    return f"< {1 / n_boot:.2g}" if p < 1 / n_boot else f"{p:.3f}"


def unit_suffix(entry: dict[str, Any]) -> str:
    """`` (unit)`` of a summary column entry (its metric card's unit), or ``""`` for a unitless one.

    >>> unit_suffix({"unit": "dB"}), unit_suffix({})
    (' (dB)', '')
    """
    u = entry.get("unit") or ""
    return f" ({u})" if u else ""
