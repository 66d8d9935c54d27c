"""A metric's options survive everything torchmetrics and torch do to a metric: ``.to(device)``,
``.to(dtype)``, ``.float()`` / ``.double()`` / ``.half()``, ``set_dtype``, ``copy.deepcopy`` and a
``state_dict`` round trip loaded without pickle (``torch.load(weights_only=True)``).

The test goes over the registry: every registered metric is built from its recipe (tiny backbones), with
non-default values of the common options its constructor takes (:data:`OVERRIDES`), so a new metric is
covered by its registration alone. Two properties are checked after each step, both generic:

* the metric's own configuration (every attribute that is neither torchmetrics' / ``nn.Module``'s bookkeeping
  nor a metric state: ``precision``, ``image_size``, ``data_range``, the backbone dtype option, ...) is
  unchanged;
* torchmetrics' own attributes (``metric.dtype``, ``metric.device``) hold what torchmetrics gives a bare
  ``torchmetrics.Metric`` that went through the same steps: an option stored in one of them (the bug this pins)
  is both visible there and overwritten by the next ``.to()`` / ``set_dtype``.

The bug: ``genmetrics/mie/metric.py`` stored ``dtype=`` in ``self._dtype``, torchmetrics' dtype attribute,
which ``.to()`` / ``set_dtype`` overwrite with the states' dtype: after ``metric.to("cuda")`` the backbone
loaded in float32 instead of the requested bfloat16, and before any ``.to()`` ``metric.dtype`` was the
option (``None``).
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics
from torch import nn

import genmetrics as gm
from genmetrics.core.metric import OPTIONS_STATE_PREFIX
from tests.contract import tester as T
from tests.recipes import metric_recipe

#: non-default values of options several metrics take; each metric gets those its constructor accepts
OVERRIDES: dict[str, Any] = {
    "dtype": torch.float64,  # backbone precision (mie, tpips)
    "data_range": 255.0,
    "batch_size": 3,
}


#: a non-default ``precision`` by the option's default: pixel metrics ("auto") and model-based ones ("fp32")
PRECISION_OVERRIDES = {"auto": "float64", "fp32": "bf16"}


class _Bare(torchmetrics.Metric):
    """A bare torchmetrics metric with one float state: what torchmetrics itself keeps and does."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", default=torch.zeros(()), dist_reduce_fx="sum")

    def update(self) -> None:  # pragma: no cover - never called
        pass

    def compute(self) -> torch.Tensor:  # pragma: no cover - never called
        return self.total


#: attributes of torchmetrics' and nn.Module's own bookkeeping, and genmetrics.core.metric's bookkeeping of the
#: accumulated state (ids seen, a state loaded empty, inside forward): none of them is a metric's configuration
_BOOKKEEPING = frozenset(vars(_Bare())) | {
    "_backbones",
    "_in_forward",
    "_loaded_empty",
    "_seen_ids",
    "_id_names",
}


def configuration(metric: gm.Metric) -> dict[str, Any]:
    """The metric's own attributes: its ``__dict__`` less torchmetrics' / ``nn.Module``'s bookkeeping, its
    states and the (empty) options state."""
    states = set(metric._defaults)
    return {
        k: v
        for k, v in vars(metric).items()
        if k not in _BOOKKEEPING and k not in states and not k.startswith(OPTIONS_STATE_PREFIX)
    }


def same(a: Any, b: Any, _seen: set[tuple[int, int]] | None = None) -> bool:
    """Equal values: tensors by dtype, device and content; modules by identity or, for a copy, by type and
    tensors; containers element-wise; other objects by ``==``, else (a copy of an object without ``__eq__``,
    e.g. a tokenizer) by type and attributes, or type and ``repr``."""
    seen = set() if _seen is None else _seen
    if a is b or (id(a), id(b)) in seen:
        return True
    seen.add((id(a), id(b)))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and (a.dtype, a.device, a.shape) == (b.dtype, b.device, b.shape)
            and bool(torch.equal(a, b))
        )
    if isinstance(a, nn.Module) or isinstance(b, nn.Module):
        sa, sb = getattr(a, "state_dict", dict)(), getattr(b, "state_dict", dict)()
        return type(a) is type(b) and sa.keys() == sb.keys() and all(same(sa[k], sb[k], seen) for k in sa)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], seen) for k in a)
    if isinstance(a, (list, tuple, set, frozenset)) and isinstance(b, (list, tuple, set, frozenset)):
        if isinstance(a, (set, frozenset)):
            return type(a) is type(b) and a == b
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y, seen) for x, y in zip(a, b))
    try:
        if bool(a == b):
            return True
    except Exception:  # noqa: BLE001 - an == that fails or is not a truth value
        pass
    if type(a) is not type(b):
        return False
    if hasattr(a, "__dict__") and hasattr(b, "__dict__"):
        return same(vars(a), vars(b), seen)
    return repr(a) == repr(b)


def _pickle_free_round_trip(metric: gm.Metric, build: Callable[[], gm.Metric]) -> gm.Metric:
    """``state_dict`` -> bytes -> ``torch.load(weights_only=True)`` -> ``load_state_dict`` of a fresh metric
    built with the same options."""
    metric.persistent(True)
    buffer = io.BytesIO()
    torch.save(metric.state_dict(), buffer)
    buffer.seek(0)
    fresh = build()
    fresh.persistent(True)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    return fresh


#: the steps, applied one after the other to the metric and to a bare torchmetrics metric
STEPS: list[tuple[str, Callable[[Any], Any]]] = [
    ("to('cpu')", lambda m: m.to("cpu")),
    ("float()", lambda m: m.float()),
    ("double()", lambda m: m.double()),
    ("half()", lambda m: m.half()),
    ("set_dtype(float64)", lambda m: m.set_dtype(torch.float64)),
    ("to(float64)", lambda m: m.to(torch.float64)),
    ("set_dtype(float32)", lambda m: m.set_dtype(torch.float32)),
    ("to(torch.device('cpu'), float32)", lambda m: m.to(torch.device("cpu"), torch.float32)),
    ("deepcopy", copy.deepcopy),
]


def _options_for(name: str, recipe_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The recipe's options and the :data:`OVERRIDES` the metric's constructor takes."""
    module, cls = gm.registry.get_card(name).factory.split(":")
    params = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    out = {**recipe_kwargs, **{k: v for k, v in OVERRIDES.items() if k in params}}
    default = gm.registry.metric_options(name).get("precision")  # also through **kwargs (sad / pad / rsad)
    if default is not None:
        out["precision"] = PRECISION_OVERRIDES[ast.literal_eval(default)]
    return out


@pytest.mark.parametrize("name", T.NAMES)
def test_options_survive_to_set_dtype_copy_and_state_dict(name):
    kwargs = _options_for(name, metric_recipe(name)["kwargs"])  # a private recipe: .to() casts its backbones

    def build() -> gm.Metric:
        return gm.create_metric(name, **kwargs)

    metric, bare = build(), _Bare()
    given = configuration(metric)
    assert (metric.dtype, metric.device) == (bare.dtype, bare.device), (
        "an option sits in torchmetrics' attributes"
    )
    for step, apply in STEPS:
        metric, bare = apply(metric), apply(bare)
        assert same(configuration(metric), given), (name, step, configuration(metric), given)
        assert (metric.dtype, metric.device) == (bare.dtype, bare.device), (name, step)
        wanted = {k: v for k, v in kwargs.items() if k not in metric.RUNTIME_OPTIONS}
        assert same(metric.options(), wanted), (name, step, metric.options())
    fresh = _pickle_free_round_trip(metric, build)
    assert same(configuration(fresh), configuration(metric)), (name, "state_dict round trip")
    assert (fresh.dtype, fresh.device) == (bare.dtype, bare.device)


def test_mie_backbone_loads_in_the_requested_dtype_after_to(tmp_path):
    """End to end: the heads checkpoint names no local backbone, ``weights=`` a saved tiny Qwen3.5; the
    metric is moved with ``.to()`` and its states cast with ``set_dtype`` before its first score (as a
    Lightning module moves its metrics): the backbone still loads in the ``dtype=`` option."""
    from genmetrics.testing import tiny_qwen35_processor
    from tests.recipes.mie import tiny_backbone, tiny_heads_dir

    folder = tmp_path / "backbone"
    tiny_backbone(0).save_pretrained(folder)
    tiny_qwen35_processor().save_pretrained(folder)
    metric = gm.create_metric("mie", heads=tiny_heads_dir(0), weights=str(folder), dtype=torch.float64)
    assert metric.dtype == torch.float32  # torchmetrics' dtype of the states, not the option
    metric = metric.to("cpu").set_dtype(torch.float16)
    model = metric.mie_model()  # loaded now, after .to() and set_dtype
    dtypes = {p.dtype for n, p in model.vlm.named_parameters() if "lora" not in n}
    assert dtypes == {torch.float64}, dtypes
    assert metric.options()["dtype"] is torch.float64
