"""The training loop's one use of a private accelerate name, isolated here.

accelerate keeps one process-wide ``AcceleratorState`` and refuses an ``Accelerator`` with another
``mixed_precision`` than the first one of the process ("restart your runtime completely"). It offers no
public way to start over; its own test utilities (``accelerate.test_utils.testing.AccelerateTestCase``)
call ``AcceleratorState._reset_state()`` between tests, as this module does. Several fits in one process
with different precisions (tests, notebooks) need it. Only that refusal triggers the reset, and the process
group (``PartialState``) is kept. ``tests/train/test_accelerate_state.py`` fails loudly when accelerate
renames the method or rewords the refusal.
"""

from __future__ import annotations

from typing import Any

from accelerate import Accelerator
from accelerate.state import AcceleratorState

#: the private name used here (the scan in tests/test_private_access.py allows it in this file only)
PRIVATE_APIS = ("accelerate.state.AcceleratorState._reset_state",)


def _is_precision_refusal(err: ValueError) -> bool:
    text = str(err)
    return "already been initialized" in text and "mixed_precision" in text


def new_accelerator(**kwargs: Any) -> Accelerator:
    """``Accelerator(**kwargs)``; when an earlier Accelerator of this process used another
    ``mixed_precision``, accelerate's process-wide state is reset first (the process group stays)."""
    try:
        return Accelerator(**kwargs)
    except ValueError as e:
        if not _is_precision_refusal(e):
            raise
    AcceleratorState._reset_state()
    return Accelerator(**kwargs)
