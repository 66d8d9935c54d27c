"""Mid fusion (Eq. 3): per probe layer ``l`` the image-token states are unit-normalised (``phi_l``), channel
weights ``w_l(c) = softplus(MLP_l(mean instruction-token state at layer l))`` and
``f = -sum_l mean_t ||w_l * (phi_l(x1) - phi_l(x2))||^2``.

Initialisation (a stability fix, not in the paper): every weight starts at ``w0 = sqrt(tau / L)`` for ``L``
probe layers, so the Eq. 2 logits ``f / tau`` start as ``-mean_l mean_t ||phi_l(x1) - phi_l(x2)||^2`` in
``[-4, 0]``: the first-step loss is near ``ln 3`` and the gradients are bounded whatever ``tau``, ``L`` and the
model width (with ``w0 = 1``, ``tau = 0.0025`` and 20 layers the logits reach ``-3e4``).

MLP input (option ``text_norm``, not in the paper): ``"layer"`` (default) gives each MLP the averaged
instruction state after a LayerNorm without parameters, so the text conditioning reaches the weights whatever
the backbone's hidden-state scale; ``"none"`` is the paper-literal raw average. Without it the tiny backbone's
text states (norm about 0.1) left the MLPs' hidden units nearly constant and the trained weights for "color" and
"position" identical (cosine 1.000): the channel weights were not aspect-conditioned (docs/tpips.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.late import single_items


def initial_weight(temperature: float, n_layers: int) -> float:
    """``w0 = sqrt(tau / L)``: the Eq. 2 logits start as minus the mean squared unit-feature distance.

    >>> initial_weight(0.0025, 25)  # the paper's tau for mid fusion, 25 probe layers
    0.01
    """
    return math.sqrt(float(temperature) / max(1, int(n_layers)))


#: MLP input choices (``text_norm``): LayerNorm without parameters (default), or the raw average (paper-literal)
TEXT_NORMS = ("layer", "none")


class MidFusionHead(nn.Module):
    """Text-conditioned channel weights ``w_l(c) = softplus(MLP_l(norm(mean text state)))`` per probe layer.

    The last linear layer starts at zero weight and bias ``softplus^-1(init_weight)``, so every weight
    starts at ``init_weight`` (see :func:`initial_weight`). ``text_norm="layer"`` normalises the MLP input
    (zero mean, unit variance over channels, no parameters); ``"none"`` feeds the raw average.

    >>> head = MidFusionHead(hidden_size=64, n_layers=2, mlp_hidden=16, init_weight=0.5)
    >>> w = head([torch.randn(3, 64), torch.randn(3, 64)])  # one averaged instruction state per sample
    >>> len(w), tuple(w[0].shape), torch.allclose(w[0], torch.full((3, 64), 0.5))  # every weight starts at 0.5
    (2, (3, 64), True)
    """

    def __init__(
        self,
        hidden_size: int,
        n_layers: int,
        mlp_hidden: int = 256,
        init_weight: float = 1.0,
        text_norm: str = "layer",
    ):
        super().__init__()
        if not init_weight > 0:
            raise InputError(f"mid-fusion init_weight must be positive, got {init_weight!r}")
        if text_norm not in TEXT_NORMS:
            raise InputError(f"mid_text_norm={text_norm!r}: expected one of {', '.join(TEXT_NORMS)}")
        self.text_norm = text_norm
        bias = init_weight + math.log(
            -math.expm1(-init_weight)
        )  # softplus^-1, stable for small and large values
        self.mlps = nn.ModuleList()
        for _ in range(n_layers):
            fc1, fc2 = nn.Linear(hidden_size, mlp_hidden), nn.Linear(mlp_hidden, hidden_size)
            nn.init.zeros_(fc2.weight)
            nn.init.constant_(fc2.bias, bias)
            self.mlps.append(nn.Sequential(fc1, nn.GELU(), fc2))

    def channel_weights(self, layer: int, text_mean: torch.Tensor) -> torch.Tensor:
        """``w_l(c)`` of probe layer number ``layer`` from the averaged instruction state(s) ``[..., d]``."""
        t = text_mean.float()
        if self.text_norm == "layer":
            t = F.layer_norm(t, t.shape[-1:])
        return F.softplus(self.mlps[layer](t))

    def forward(self, text_means: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.channel_weights(j, t) for j, t in enumerate(text_means)]


def probe_indices(n_layers: int, probe_layers: int | Sequence[int]) -> list[int]:
    """``probe_layers`` evenly spaced layers (the last included), or explicit indices.

    >>> probe_indices(28, 4), probe_indices(28, [0, 5]), probe_indices(2, 20)  # capped at the layer count
    ([0, 9, 18, 27], [0, 5], [0, 1])
    """
    if isinstance(probe_layers, int):
        if probe_layers <= 0:
            raise InputError(f"probe_layers must be positive, got {probe_layers}")
        k = min(probe_layers, n_layers)
        if k == 1:
            return [n_layers - 1]
        return sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})
    idx = sorted({int(i) % n_layers for i in probe_layers})
    if not idx:
        raise InputError("probe_layers: empty list")
    return idx


def mid_features(
    model: Any, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
) -> dict[str, list]:
    """Per (image, aspect): unit-normalised image-token states ``[N,d]`` and the instruction-token mean, per
    probe layer.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("mid")
    >>> enc = mid_features(model, model.resized(model.load_images(random_images(2, 64))), ["color", "color"])
    >>> sorted(enc), len(enc["phi"]) == len(model.probe_layers)
    (['phi', 'text'], True)
    """
    feats = model.vision_features(images, keys=keys)
    phis: list[list[torch.Tensor]] = [[] for _ in model.probe_layers]
    texts: list[list[torch.Tensor]] = [[] for _ in model.probe_layers]
    for i in range(0, len(images), model.batch_size):
        batch = model._build_single(
            single_items(model, feats[i : i + model.batch_size], aspects[i : i + model.batch_size])
        )
        _, cap = model.run_batch(batch, capture=model.probe_layers)
        for j, li in enumerate(model.probe_layers):
            h = cap[li].float()
            for b, span in enumerate(batch["spans"]):
                s0, s1 = span["images"][0]
                t0, t1 = span["instruction"]
                phis[j].append(F.normalize(h[b, s0:s1], dim=-1))
                texts[j].append(h[b, t0:t1].mean(0))
    return {"phi": phis, "text": texts}


def mid_distance(head: MidFusionHead, enc: dict[str, list], ra: list[int], rb: list[int]) -> torch.Tensor:
    """``f = -sum_l mean_t ||w_l * (phi_l(a) - phi_l(b))||^2`` for the encoded rows ``ra`` / ``rb``.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("mid")
    >>> enc = mid_features(model, model.resized(model.load_images(random_images(2, 64))), ["color", "color"])
    >>> mid_distance(model.head, enc, [0, 1], [0, 1]).tolist(), bool(mid_distance(model.head, enc, [0], [1]) < 0)
    ([0.0, 0.0], True)
    """
    total = None
    for j in range(len(head.mlps)):
        phi_a = torch.stack([enc["phi"][j][r] for r in ra])
        phi_b = torch.stack([enc["phi"][j][r] for r in rb])
        ta = torch.stack([enc["text"][j][r] for r in ra])
        tb = torch.stack([enc["text"][j][r] for r in rb])
        # The instruction precedes the image and attention is causal, so both passes see the same text
        # states; averaging the two weights makes f exactly symmetric in floating point as well.
        w = 0.5 * (head.channel_weights(j, ta) + head.channel_weights(j, tb))
        d = ((w.unsqueeze(1) * (phi_a - phi_b)) ** 2).sum(-1).mean(-1)
        total = d if total is None else total + d
    assert total is not None  # at least one probe layer
    return 0.0 - total  # 0 - x: no negative zero for identical images
