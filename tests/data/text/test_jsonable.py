"""JSON values from Python ones (genmetrics.data.text.jsonable): tensors, numpy values and paths become JSON
values, NaN becomes null and infinities the largest double, keys become strings; what ``json`` then writes
reads back equal."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from genmetrics.data.text.jsonable import jsonable


def test_a_nested_value_round_trips_through_json():
    value = {
        "t": torch.tensor([[1.5, 2.0]]),
        "scalar": torch.tensor(3),
        "np": np.float32(0.25),
        "path": Path("a") / "b.png",
        "nums": (1, -2.5, math.nan, math.inf, -math.inf),
        7: {"nested": [np.int64(4), "s", None, True]},
    }
    got = jsonable(value)
    assert json.loads(json.dumps(got, allow_nan=False)) == got
    assert got == {
        "t": [[1.5, 2.0]],
        "scalar": 3,
        "np": 0.25,
        "path": str(Path("a") / "b.png"),
        "nums": [1, -2.5, None, 1e308, -1e308],
        "7": {"nested": [4, "s", None, True]},
    }


@pytest.mark.parametrize("x", [1, 2.5, "s", None, True, [1, [2]], {"a": {"b": 1}}])
def test_json_values_are_unchanged(x):
    assert jsonable(x) == x


def test_an_object_whose_item_fails_is_kept():
    class Item:
        def item(self):
            raise ValueError("only one element tensors can be converted")

    x = Item()
    assert jsonable(x) is x


def test_jsonable_never_imports_torch():
    code = (
        "import sys; from genmetrics.data.text.jsonable import jsonable; "
        "assert jsonable({'a': float('nan')}) == {'a': None}; assert 'torch' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_a_numpy_array_becomes_nested_lists_like_its_tensor(dtype):
    """An ndarray (not only a numpy scalar) is a JSON value, equal to what the same tensor gives; NaN in it
    becomes null as anywhere else."""
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    if np.issubdtype(dtype, np.floating):
        a[1, 2] = np.nan
    got = jsonable({"a": a})
    assert got == jsonable({"a": torch.from_numpy(a)})
    assert json.loads(json.dumps(got, allow_nan=False)) == got
    assert jsonable(np.array(2.5)) == 2.5  # a 0-d array is its one value
