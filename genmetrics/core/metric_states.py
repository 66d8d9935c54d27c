"""How genmetrics names, gathers and merges ``torchmetrics`` states.

* :data:`OPTIONS_STATE_PREFIX` and :func:`options_state_name`: the empty state whose name encodes a
  metric's options (:func:`canonical` text), so ``MetricCollection`` compute groups never join metrics
  built with other options;
* :class:`AgreedGather`: the ``dist_sync_fn`` that lets every process agree on dtype and shape first;
* :data:`REDUCTIONS` and :func:`merge_pair`: how two states merge (``forward``, ``merge_state``);
* :func:`squeeze_scalars` and :func:`finite_or_nan`: values as a metric returns and reports them;
* :data:`IDENTITY_KEY`, :func:`encode_identity` / :func:`decode_identity` and :func:`identity_mismatch`: the
  metric and options a ``state_dict()`` belongs to, checked by ``load_state_dict`` and ``merge_state``;
* :func:`nonfinite_count`: how many values of a state are neither finite nor allowed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from typing import Any

import torch
from torchmetrics.utilities.distributed import gather_all_tensors

from genmetrics.errors import InputError

#: the prefix of the (always empty) state whose name encodes the metric's options: torchmetrics'
#: MetricCollection only groups metrics whose state names are equal, so differing options never share a state
OPTIONS_STATE_PREFIX = "_options_"


def canonical(value: Any) -> str:
    """A stable text for an option value (modules and other objects by type: equal options, equal text).

    >>> canonical({"b": 1.0, "a": [torch.float16, None]}) == canonical({"a": [torch.float16, None], "b": 1.0})
    True
    >>> canonical(torch.nn.Linear(2, 2))
    'torch.nn.modules.linear.Linear'
    """
    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        return repr(value)
    if isinstance(value, os.PathLike):
        return repr(os.fspath(value))
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            return f"tensor{tuple(value.shape)}:meta"
        data = value.detach().cpu().contiguous()
        return f"tensor{tuple(value.shape)}{value.dtype}:{hashlib.sha1(data.numpy().tobytes()).hexdigest()}"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{canonical(k)}:{canonical(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            )
            + "}"
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return "[" + ",".join(canonical(v) for v in items) + "]"
    return type(value).__module__ + "." + type(value).__qualname__


def options_state_name(owner: type, options: dict[str, Any]) -> str:
    """The name of the empty state that marks a metric of class ``owner`` built with ``options``: equal
    classes and options give equal names (``MetricCollection`` only groups metrics whose state names are
    equal).

    >>> options_state_name(int, {"max_db": 80.0}) == options_state_name(int, {"max_db": 80.0})
    True
    >>> options_state_name(int, {"max_db": 80.0}) == options_state_name(int, {"max_db": 60.0})
    False
    """
    key = hashlib.blake2b(
        canonical((owner.__module__, owner.__qualname__, options)).encode(), digest_size=8
    ).hexdigest()
    name = OPTIONS_STATE_PREFIX + key
    if name not in _OPTIONS_BY_STATE and len(_OPTIONS_BY_STATE) < _OPTIONS_REMEMBERED:
        _OPTIONS_BY_STATE[name] = {
            "class": f"{owner.__module__}.{owner.__qualname__}",
            "options": canonical_options(options),
        }
    return name


#: options state name -> the class and :func:`canonical_options` it marks, for the metrics built in this
#: process (so a refused ``metric_state`` can name the options that differ; bounded)
_OPTIONS_BY_STATE: dict[str, dict[str, Any]] = {}
_OPTIONS_REMEMBERED = 4096


def options_of_state(name: str) -> dict[str, Any] | None:
    """The class and :func:`canonical_options` an options state name marks, when a metric built in this
    process used it (None otherwise: the name is a hash).

    >>> options_of_state(options_state_name(int, {"max_db": 30.0}))
    {'class': 'builtins.int', 'options': {'max_db': '30.0'}}
    """
    return _OPTIONS_BY_STATE.get(name)


def canonical_options(options: dict[str, Any]) -> dict[str, str]:
    """The :func:`canonical` text of each option, by option name (sorted, so the order given does not matter).

    >>> canonical_options({"max_db": 100.0, "data_range": None})
    {'data_range': 'None', 'max_db': '100.0'}
    >>> canonical_options({"b": 1, "a": 2}) == canonical_options({"a": 2, "b": 1})
    True
    """
    return {str(k): canonical(v) for k, v in sorted(options.items(), key=lambda kv: str(kv[0]))}


class AgreedGather:
    """torchmetrics' ``dist_sync_fn`` for genmetrics states: before the gather, every process agrees on the
    dtype and the trailing shape of the tensor, so a process without any update (whose list state is
    torchmetrics' empty float placeholder) sends an empty tensor that matches the others (gloo aborts on a
    dtype mismatch). Then ``gather`` (default: torchmetrics' ``gather_all_tensors``) does the gather.

    >>> fn = AgreedGather()
    >>> fn.gather is None, callable(fn)
    (True, True)
    """

    def __init__(self, gather: Any = None) -> None:
        if isinstance(gather, AgreedGather):
            gather = gather.gather
        self.gather: Any = gather

    def __call__(self, tensor: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            # a caller's own gather (dist_sync_fn=) that works without torch.distributed (XLA, a test's fake
            # gather): there is no process group to agree through, so it gets the tensor as it is
            return (self.gather or gather_all_tensors)(tensor, group=group)
        meta = None if tensor.numel() == 0 else (tensor.dtype, tuple(tensor.shape[1:]))
        metas: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(metas, meta, group=group)
        known = [m for m in metas if m is not None]
        if known:  # empty everywhere: the placeholders already match
            dtype = functools.reduce(torch.promote_types, [m[0] for m in known])
            if tensor.numel():
                tensor = tensor.to(dtype)
            else:
                tensor = torch.empty((0, *known[0][1]), dtype=dtype, device=tensor.device)
        return (self.gather or gather_all_tensors)(tensor, group=group)


#: how genmetrics merges two states (forward, merge_state); torchmetrics' names
REDUCTIONS = ("sum", "cat", "min", "max")


def state_tensors(value: Any) -> list[Any]:
    """A state as a list of tensors (a list state as it is, a tensor state as a list of one).

    >>> state_tensors(torch.zeros(2)), state_tensors([])
    ([tensor([0., 0.])], [])
    """
    return list(value) if isinstance(value, list) else [value]


def merge_pair(reduce: Any, first: Any, second: Any) -> Any:
    """The state ``reduce`` gives for two states (first, then second), detached from any graph: how
    ``forward``, ``merge_state`` and the one-shot score merge states (``reduce`` as given to ``add_state``).

    >>> merge_pair("sum", torch.tensor(2.0), torch.tensor(3.0))
    tensor(5.)
    >>> merge_pair("cat", [torch.ones(1)], torch.zeros(2))
    [tensor([1.]), tensor([0., 0.])]
    """
    with torch.no_grad():
        if reduce == "cat":
            return [t.detach() for t in state_tensors(first) + state_tensors(second)]
        if reduce == "sum":
            return first.detach() + second.detach()
        if reduce in ("min", "max"):
            return getattr(torch, reduce)(first.detach(), second.detach())
        return reduce(torch.stack([first.detach(), second.detach()]))


def squeeze_scalars(value: Any) -> Any:
    """As torchmetrics' ``compute()`` returns it: one-element tensors as scalars, every tensor a copy.

    >>> squeeze_scalars({"mean": torch.tensor([0.5]), "per_attribute": torch.tensor([1.0, 2.0])})
    {'mean': tensor(0.5000), 'per_attribute': tensor([1., 2.])}
    """
    if isinstance(value, dict):
        return {k: squeeze_scalars(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(squeeze_scalars(v) for v in value)
    if isinstance(value, torch.Tensor):
        return (value.squeeze() if value.numel() == 1 else value).clone()
    return value


def finite_or_nan(x: float) -> float:
    """``x`` when it is finite, else NaN (one marker for "no value" in reports).

    >>> finite_or_nan(0.5), finite_or_nan(float("inf"))
    (0.5, nan)
    """
    return x if math.isfinite(x) else float("nan")


#: the ``state_dict()`` entry that names the metric and options the states belong to (a uint8 tensor of JSON
#: text, so ``torch.load(weights_only=True)`` reads it)
IDENTITY_KEY = "_genmetrics_metric"


def identity(owner: type, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """What a state belongs to: the registered name, the class and the :func:`canonical` text of each option.

    >>> identity(int, "psnr", {"max_db": 30.0})
    {'metric': 'psnr', 'class': 'builtins.int', 'options': {'max_db': '30.0'}}
    """
    return {
        "metric": name,
        "class": f"{owner.__module__}.{owner.__qualname__}",
        "options": canonical_options(options),
    }


def encode_identity(record: dict[str, Any]) -> torch.Tensor:
    """:func:`identity` as the uint8 tensor kept under :data:`IDENTITY_KEY` (:func:`decode_identity` reads it).

    >>> decode_identity(encode_identity(identity(int, "psnr", {})), "state_dict")["metric"]
    'psnr'
    """
    return torch.tensor(list(json.dumps(record, sort_keys=True).encode("utf-8")), dtype=torch.uint8)


def decode_identity(value: Any, where: str) -> dict[str, Any]:
    """The record of :func:`encode_identity`; anything else is an ``InputError`` naming ``where``.

    >>> record = identity(int, "psnr", {"max_db": 100.0})
    >>> decode_identity(encode_identity(record), "state_dict") == record
    True
    >>> decode_identity(torch.tensor([1, 2], dtype=torch.uint8), "state_dict")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: state_dict: the entry '_genmetrics_metric' ... is damaged (...); save the state again with metric.state_dict()
    """
    try:
        if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.ndim != 1:
            raise ValueError(f"expected a 1-D uint8 tensor, got {type(value).__name__}")
        record = json.loads(bytes(value.cpu().tolist()).decode("utf-8"))
        if not (
            isinstance(record, dict)
            and isinstance(record.get("metric"), str)
            and isinstance(record.get("class"), str)
            and isinstance(record.get("options"), dict)
        ):
            raise ValueError("expected {'metric', 'class', 'options'}")
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(
            f"{where}: the entry {IDENTITY_KEY!r} (which metric and options the state belongs to) is damaged "
            f"({str(e)[:120]}); save the state again with metric.state_dict()"
        ) from None
    return record


def identity_mismatch(mine: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """Why a state of ``theirs`` cannot join a metric of ``mine`` (None: same metric, same options).

    >>> a, b = identity(int, "psnr", {"max_db": 100.0}), identity(int, "psnr", {"max_db": 30.0})
    >>> identity_mismatch(a, b)
    'built with other options (max_db differ: 30.0 there, 100.0 here)'
    >>> identity_mismatch(a, identity(float, "ssim", {}))
    "of another metric ('ssim', builtins.float; this is 'psnr', builtins.int)"
    """
    if (mine["metric"], mine["class"]) != (theirs["metric"], theirs["class"]):
        return (
            f"of another metric ({theirs['metric']!r}, {theirs['class']}; this is {mine['metric']!r}, "
            f"{mine['class']})"
        )
    a, b = mine["options"], theirs["options"]
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not diff:
        return None
    shown = "; ".join(f"{b.get(k, 'default')} there, {a.get(k, 'default')} here" for k in diff[:3])
    return f"built with other options ({', '.join(diff)} differ: {shown})"


def nonfinite_count(value: torch.Tensor, allowed: tuple[float, ...] = ()) -> int:
    """How many values of a floating-point ``value`` are NaN or infinite and not one of ``allowed`` (0 for
    integer tensors).

    >>> t = torch.tensor([1.0, float("inf"), float("nan")])
    >>> nonfinite_count(t), nonfinite_count(t, (float("inf"),)), nonfinite_count(torch.tensor([3]))
    (2, 1, 0)
    """
    if not value.is_floating_point() or value.numel() == 0:
        return 0
    bad = ~torch.isfinite(value)
    for a in allowed:
        bad &= value != a
    return int(bad.sum())
