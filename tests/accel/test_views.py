"""genmetrics.accel.views.batch_view: a batch found again behind its rows, by public torch API only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from genmetrics.accel.views import batch_view

PACKAGE = Path(__file__).resolve().parents[2] / "genmetrics"


def _cases():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 4, 5, generator=g)
    cl = x.contiguous(memory_format=torch.channels_last)
    return {
        "rows": list(x.unbind(0)),
        "a slice of rows": list(x.unbind(0))[2:5],
        "channels_last rows": list(cl.unbind(0)),
        "every other row": [x[0], x[2], x[4]],
        "one row": [x[3]],
        "rows reversed": list(x.unbind(0))[::-1],
        "a row twice": [x[1], x[1]],
        "rows of two tensors": [x[0], torch.rand(6, 3, 4, 5, generator=g)[1]],  # offsets as one batch's
        "expanded rows": list(x[:1].expand(4, 3, 4, 5).unbind(0)),
        "rows of a wider view": [x[0, :2], x[1, :2], x[2, :2]],
        "rows reinterpreted": [x[0], x[1].view(torch.int32)],
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_a_view_when_found_is_the_stack_of_the_rows_without_a_copy(name):
    """Parity with ``torch.stack`` wherever a view is returned; a refused case (None) is one whose rows are
    not evenly spaced rows of one storage with one dtype, shape and strides."""
    items = _cases()[name]
    v = batch_view(items)
    refusable = {"rows reversed", "a row twice", "rows of two tensors", "expanded rows", "rows reinterpreted"}
    if v is None:
        assert name in refusable, f"{name}: a batch view was expected"
        return
    assert name not in refusable, f"{name}: rows that are not one batch were viewed as one"
    assert torch.equal(v, torch.stack(items)) and v.dtype == items[0].dtype
    assert v.untyped_storage().data_ptr() == items[0].untyped_storage().data_ptr()  # no copy


def test_rows_that_autograd_follows_are_never_viewed():
    """A view built from the first row would carry only that row's graph: the caller must stack them."""
    x = torch.rand(3, 3, 4, 4, requires_grad=True)
    assert batch_view(list(x.unbind(0))) is None
    assert batch_view(list(x.detach().unbind(0))) is not None


def test_no_module_reads_a_tensor_s_private_base():
    """``Tensor._base`` is private torch API; the rows of a batch are matched by storage and offsets."""
    offenders = [
        f"{p.relative_to(PACKAGE.parent)}:{n.lineno}"
        for p in PACKAGE.rglob("*.py")
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.Attribute) and n.attr == "_base"
    ]
    assert not offenders, f"Tensor._base read in {offenders}"
