"""The one private accelerate use (genmetrics.train._accelerate_state): a second ``mixed_precision`` in one process
resets accelerate's process-wide state, only on that refusal, and the reset still exists in the installed
accelerate (red when accelerate renames it or rewords the refusal)."""

from __future__ import annotations

import pytest
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from genmetrics.train import _accelerate_state as S
from genmetrics.train._accelerate_state import new_accelerator


def test_accelerate_precision_reset_still_works():
    """accelerate refuses a second precision in one process; the isolated reset (the one private name the
    loop uses) must still exist and be triggered by that refusal's wording. Red when accelerate changes."""
    assert callable(getattr(AcceleratorState, "_reset_state", None))
    assert new_accelerator(mixed_precision="no", cpu=True).mixed_precision == "no"
    with pytest.raises(ValueError, match="already been initialized.*mixed_precision"):
        Accelerator(mixed_precision="bf16", cpu=True)
    assert new_accelerator(mixed_precision="bf16", cpu=True).mixed_precision == "bf16"
    assert new_accelerator(mixed_precision="no", cpu=True).mixed_precision == "no"


def test_any_other_refusal_is_raised_without_a_reset(monkeypatch):
    resets = []
    monkeypatch.setattr(AcceleratorState, "_reset_state", classmethod(lambda cls, *a, **k: resets.append(1)))

    def refuse(**kwargs):
        raise ValueError("gradient_accumulation_steps must be >= 1")

    monkeypatch.setattr(S, "Accelerator", refuse)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        new_accelerator(gradient_accumulation_steps=0)
    assert resets == []


def test_the_private_name_is_declared():
    assert S.PRIVATE_APIS == ("accelerate.state.AcceleratorState._reset_state",)
