"""genmetrics.options: a number too large for a float (a 400-digit integer: ``float()`` of it raises
OverflowError) is refused as bad input naming the option."""

from __future__ import annotations

import pytest

from genmetrics import create_metric
from genmetrics.errors import InputError
from genmetrics.options import integer, number

HUGE = 10**400  # a JSON or Python integer that no float holds


@pytest.mark.parametrize("value", [HUGE, -HUGE])
def test_an_option_too_large_for_a_float_is_named(value):
    with pytest.raises(InputError, match="option max_db: expected a finite number"):
        create_metric("psnr", max_db=value)
    with pytest.raises(InputError, match="option n: expected an integer"):
        integer("n", value, lo=1)
    with pytest.raises(InputError, match="option x"):
        number("x", value)
