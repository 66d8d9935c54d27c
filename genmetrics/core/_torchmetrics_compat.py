"""The private members of ``torchmetrics.Metric`` (and ``torch.nn.Module``) that genmetrics still touches,
in one place. Everything else in :mod:`genmetrics.core.metric` uses public torchmetrics API:
``add_state``, ``reset``, ``metric_state``, ``update_count``, ``sync_context``, ``sync`` / ``unsync``,
``state_dict``, ``persistent``, the ``dist_sync_fn`` option and ``torchmetrics.utilities``' public helpers.

Each use below has no public equivalent in torchmetrics 1.4 - 1.9 (the versions ``pyproject.toml``
admits); ``tests/core/test_torchmetrics_compat.py`` checks every one of them against the installed torchmetrics
and fails with a message naming the member when a release renames or drops it:

=====================  =============================================================================
``_update_count``      written when a state is restored, merged or loaded (``update_count`` is a
                       read-only property). torchmetrics' own ``Running`` wrapper writes it the same way.
``_computed``          the cached ``compute()`` value, dropped whenever the state changes outside
                       ``update()`` (``merge_state`` and ``restore_state``; torchmetrics' own
                       ``merge_state`` leaves a stale cached value).
``_is_synced``         read by ``forward`` to refuse a synced metric, as torchmetrics' ``forward`` does.
``_forward_cache``     written by ``forward``: Lightning's ``self.log(name, metric)`` reads the batch
                       value from it for ``on_step`` logging.
``nn.Module._apply``   :class:`BackbonesFollowTo`: the only hook through which ``.to()`` / ``.cuda()``
                       reach a module; the frozen backbones are kept outside ``_modules`` (so they are not
                       in ``state_dict()`` or ``parameters()``) and must still move with the metric.
=====================  =============================================================================

Measured reason to keep them rather than re-implement: the alternatives are a second update per
``forward`` (``tests/contract`` shows ``forward`` equals one ``update``; a second one would double the
backbone work) or a private copy of the whole state per one-shot ``compute(...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

#: the private members, by the job they do (the test reads this table)
MEMBERS = {
    "update_count": "_update_count",
    "cached_value": "_computed",
    "synced": "_is_synced",
    "forward_cache": "_forward_cache",
    "reported_dtype": "_dtype",
}


def set_update_count(metric: Any, count: int) -> None:
    """Set the number of updates torchmetrics counts (``metric.update_count``) and drop the cached
    ``compute()`` value: the state was changed outside ``update()``.

    >>> import genmetrics as gm
    >>> m = gm.create_metric("psnr")
    >>> set_update_count(m, 3)
    >>> m.update_count
    3
    """
    setattr(metric, MEMBERS["update_count"], int(count))
    setattr(metric, MEMBERS["cached_value"], None)


def set_reported_dtype(metric: Any, dtype: Any) -> None:
    """Make ``metric.dtype`` report ``dtype`` after genmetrics' ``set_dtype`` cast the states, as torchmetrics'
    own ``set_dtype`` does (it uses that dtype for the empty tensor a rank without data sends in a sync).

    >>> import torch, genmetrics as gm
    >>> m = gm.create_metric("psnr")
    >>> set_reported_dtype(m, torch.float64)
    >>> m.dtype
    torch.float64
    """
    setattr(metric, MEMBERS["reported_dtype"], dtype)


def is_synced(metric: Any) -> bool:
    """Whether the metric's states are currently the gathered states of every process (inside
    ``sync()`` / ``sync_context()``).

    >>> import genmetrics as gm
    >>> is_synced(gm.create_metric("psnr"))
    False
    """
    return bool(getattr(metric, MEMBERS["synced"]))


def set_forward_cache(metric: Any, value: Any) -> None:
    """Record ``forward``'s batch value where torchmetrics keeps it (Lightning logs it per step).

    >>> import genmetrics as gm
    >>> m = gm.create_metric("psnr")
    >>> set_forward_cache(m, 1.0)
    >>> getattr(m, MEMBERS["forward_cache"])
    1.0
    """
    setattr(metric, MEMBERS["forward_cache"], value)


class BackbonesFollowTo:
    """Mixin: ``.to(device)`` / ``.cuda()`` / ``.to(dtype)`` also move the modules in ``self._backbones``
    (frozen backbones kept out of ``state_dict()`` and ``parameters()``); ``set_dtype`` (which casts states
    only) does not go through here.

    >>> import torch, genmetrics as gm
    >>> from genmetrics.testing import tiny_dino
    >>> m = gm.create_metric("dino", backbone=tiny_dino()).to(torch.float64)
    >>> next(m.backbones()["backbone"].parameters()).dtype
    torch.float64
    """

    def _apply(self, fn: Any, exclude_state: Sequence[str] = "") -> nn.Module:
        # a plain mixin (typed as such) placed before torchmetrics.Metric, whose _apply takes exclude_state
        this = super()._apply(fn, exclude_state)  # type: ignore[misc]
        for module in self.__dict__.get("_backbones", {}).values():
            module._apply(fn)
        return this
