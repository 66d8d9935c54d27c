"""What TPIPS says when its trained adapter cannot be had, and the check that says it before torch is imported.

:func:`precheck` is the ``tpips`` card's pre-check (:func:`genmetrics.backbones.precheck.check_metric`): the
command line calls it with the metric's options and reports, in start-up time, what the metric would after
importing torch and transformers.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from genmetrics.backbones.precheck import hub_folder_missing, missing_folder
from genmetrics.backbones.weights import unavailable_error

__all__ = ["ADAPTER_HINT", "CONFIG_NAME", "precheck"]

#: the file that makes a folder a TPIPS adapter (read first by the loader)
CONFIG_NAME = "tpips.json"

ADAPTER_HINT = (
    "Fix: pass the folder written by `genmetrics train tpips` (OUT/final) or TPIPSModel.save_pretrained "
    "(adapter=... / --adapter), or a hub id of a published TPIPS adapter."
)


def precheck(options: Mapping[str, Any]) -> None:
    """Raise what ``TPIPS(**options)`` would for its ``adapter`` when that is known without loading anything:
    a path that is no folder, a folder without ``tpips.json``, or a hub id in no cache while downloads are off or the hub cannot be reached.
    No adapter, a built model (``backbone=``), an existing folder or a hub that answers: left to the metric.

    >>> precheck({"adapter": "./no/such/adapter"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights 'no/such/adapter' are not available. ... No such TPIPS adapter folder. ...
    """
    adapter = options.get("adapter")
    if adapter is None or options.get("backbone") is not None:
        return
    value = os.fspath(adapter)
    err = missing_folder(value, what="TPIPS adapter", hint=ADAPTER_HINT, marker=CONFIG_NAME)
    if err is not None:
        raise err
    missing = hub_folder_missing(value)
    if missing is not None:
        looked, why = missing
        raise unavailable_error(value, looked, hint=ADAPTER_HINT, why=why)
