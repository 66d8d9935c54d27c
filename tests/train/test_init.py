"""genmetrics.train: the package's example runs."""

from __future__ import annotations

import doctest


def test_module_example_runs():
    import genmetrics.train

    failed, attempted = doctest.testmod(genmetrics.train, optionflags=doctest.ELLIPSIS)
    assert attempted > 5 and failed == 0
