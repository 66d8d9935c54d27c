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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.base import VLMBase
from genmetrics.tpips.fusion import EncodedFusion, FusionOptions, check_head_tensors
from genmetrics.tpips.late import embedding_sequences

__all__ = [
    "TEXT_NORMS",
    "MidEncoding",
    "MidFusion",
    "MidFusionHead",
    "initial_weight",
    "mid_distance",
    "mid_features",
    "probe_indices",
]


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
        mlp = self.mlps[layer]
        dtype = next(mlp.parameters()).dtype  # the head may have been cast (model.to(torch.bfloat16))
        return F.softplus(mlp(t.to(dtype)).float())

    def forward(self, text_means: list[torch.Tensor]) -> list[torch.Tensor]:
        """The channel weights ``w_l(c)`` of each probe layer, one per averaged instruction state in
        ``text_means``."""
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


@dataclass
class MidEncoding:
    """Per probe layer ``l`` (outer lists) and encoded row (inner lists): ``phi[l][r]`` the unit-normalised
    image-token states ``[N_r, d]`` (``N_r`` tokens of that row's grid, ``grids[r]``) and ``text[l][r]`` the
    mean instruction-token state ``[d]``.

    >>> enc = MidEncoding(phi=[[torch.zeros(4, 8)]], text=[[torch.zeros(8)]], grids=[(2, 2)])
    >>> len(enc.phi), tuple(enc.phi[0][0].shape), enc.grids[0]
    (1, (4, 8), (2, 2))
    """

    phi: list[list[torch.Tensor]]
    text: list[list[torch.Tensor]]
    grids: list[tuple[int, int]]


def mid_features(
    base: VLMBase,
    probe_layers: Sequence[int],
    images: list[torch.Tensor],
    aspects: list[str],
    *,
    keys: list[str] | None = None,
) -> MidEncoding:
    """Per (image, aspect): unit-normalised image-token states ``[N,d]`` and the instruction-token mean, per
    probe layer (the late-fusion sequences, ``probe_layers`` captured in the same pass).

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("mid")
    >>> images = model.resized(model.load_images(random_images(2, 64)))
    >>> enc = mid_features(model, model.fusion.probe_layers, images, ["color", "color"])
    >>> len(enc.phi) == len(model.fusion.probe_layers), tuple(enc.phi[0][0].shape)
    (True, (4, 64))
    """
    feats = base.vision_features(images, keys=keys)
    phis: list[list[torch.Tensor]] = [[] for _ in probe_layers]
    texts: list[list[torch.Tensor]] = [[] for _ in probe_layers]
    for i in range(0, len(images), base.batch_size):
        sl = slice(i, i + base.batch_size)
        batch = base.build_sequences(embedding_sequences(base, feats[sl], aspects[sl], "mid"))
        _, cap = base.run_batch(batch, capture=probe_layers)
        for j, li in enumerate(probe_layers):
            h = cap[li].float()
            for b, span in enumerate(batch.spans):
                s0, s1 = span.images[0]
                assert span.instruction is not None  # embedding_sequences always has one
                t0, t1 = span.instruction
                phis[j].append(F.normalize(h[b, s0:s1], dim=-1))
                texts[j].append(h[b, t0:t1].mean(0))
    return MidEncoding(phi=phis, text=texts, grids=[f.grid for f in feats])


def mid_distance(head: MidFusionHead, enc: MidEncoding, ra: list[int], rb: list[int]) -> torch.Tensor:
    """``f = -sum_l mean_t ||w_l * (phi_l(a) - phi_l(b))||^2`` for the encoded rows ``ra`` / ``rb``.

    Rows may come from images of different token grids (the default smart resize gives each pair its own
    grid): rows with the same number of tokens are computed together, so each value is that pair's own
    computation, whatever else is in the batch. Both images of one pair must share a grid (``InputError``
    otherwise: Eq. 3 compares token ``t`` of one image with token ``t`` of the other).

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("mid")
    >>> images = model.resized(model.load_images(random_images(2, 64)))
    >>> enc = mid_features(model, model.fusion.probe_layers, images, ["color", "color"])
    >>> mid_distance(model.fusion.head, enc, [0, 1], [0, 1]).tolist(), bool(mid_distance(model.fusion.head, enc, [0], [1]) < 0)
    ([0.0, 0.0], True)
    """
    groups: dict[int, list[int]] = {}
    for i, (r, q) in enumerate(zip(ra, rb)):
        if enc.grids[r] != enc.grids[q]:
            raise InputError(
                f"mid fusion compares two images token by token, but pair {i} has token grids {enc.grids[r]} "
                f"and {enc.grids[q]}; bring both images of a pair to one size (TPIPSModel does: "
                "QwenResize.pair_size)"
            )
        groups.setdefault(int(enc.phi[0][r].shape[0]), []).append(i)
    parts, order = [], []
    for rows in groups.values():
        ga, gb = [ra[i] for i in rows], [rb[i] for i in rows]
        total = None
        for j in range(len(head.mlps)):
            phi_a = torch.stack([enc.phi[j][r] for r in ga])
            phi_b = torch.stack([enc.phi[j][r] for r in gb])
            ta = torch.stack([enc.text[j][r] for r in ga])
            tb = torch.stack([enc.text[j][r] for r in gb])
            # The instruction precedes the image and attention is causal, so both passes see the same text
            # states; averaging the two weights makes f exactly symmetric in floating point as well.
            w = 0.5 * (head.channel_weights(j, ta) + head.channel_weights(j, tb))
            d = ((w.unsqueeze(1) * (phi_a - phi_b)) ** 2).sum(-1).mean(-1)
            total = d if total is None else total + d
        assert total is not None  # at least one probe layer
        parts.append(total)
        order += rows
    values = torch.cat(parts)
    inverse = torch.argsort(torch.tensor(order, device=values.device))
    return 0.0 - values[inverse]  # 0 - x: no negative zero for identical images


class MidFusion(EncodedFusion):
    """Eq. 3 over the probe layers (see the module docstring); both images of a pair are brought to one token
    grid (:meth:`~genmetrics.tpips.base.VLMBase.resized_pairs`) because Eq. 3 compares them token by token.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("mid")
    >>> a, b = model.load_images(random_images(1, 64, seed=1)), model.load_images(random_images(1, 96, seed=2))
    >>> s = model.fusion.pair_scores(model, a, b, ["color"])
    >>> bool(s[0] < 0), float(model.fusion.pair_scores(model, a, a, ["color"])[0])
    (True, 0.0)
    """

    name = "mid"
    value_range = (float("-inf"), 0.0)

    def __init__(self, base: VLMBase, options: FusionOptions) -> None:
        super().__init__()
        self.probe_layers = probe_indices(len(base.language_model.layers), options.probe_layers)
        self.mid_hidden = int(options.mid_hidden)
        w0 = (
            initial_weight(options.temperature, len(self.probe_layers))
            if options.mid_init is None
            else float(options.mid_init)
        )
        self.head = MidFusionHead(
            base.hidden_size,
            len(self.probe_layers),
            self.mid_hidden,
            init_weight=w0,
            text_norm=options.mid_text_norm,
        ).to(base.device)

    def pair_images(
        self, base: VLMBase, a: list[torch.Tensor], b: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The two sides of each pair resized to one common size (the backbone's pair policy)."""
        return base.resized_pairs(a, b)

    def encode(
        self, base: VLMBase, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
    ) -> MidEncoding:
        """The probe layers' image features and instruction means of ``images`` under ``aspects`` (a
        :class:`MidEncoding`); ``keys`` name the images for the vision cache."""
        return mid_features(base, self.probe_layers, images, aspects, keys=keys)

    def compare(self, encoding: Any, rows_a: list[int], rows_b: list[int]) -> torch.Tensor:
        """``[R]`` channel-weighted distances between the encodings at ``rows_a`` and ``rows_b``."""
        return mid_distance(self.head, encoding, rows_a, rows_b)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The trained head's tensors, named ``head.*`` (CPU, contiguous), as saved in an adapter folder."""
        return {f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}

    def load_head_state_dict(self, state: dict[str, torch.Tensor], *, source: str = "head state") -> None:
        """Load the head from ``state`` after checking its names and shapes; an error names ``source``."""
        state = check_head_tensors(state, self.head_state_dict(), source=source)
        self.head.load_state_dict({k[len("head.") :]: v for k, v in state.items()})

    def config(self) -> dict[str, Any]:
        """The options an adapter folder stores for this variant: probe layers, head width, text norm."""
        return {
            "probe_layers": self.probe_layers,
            "mid_hidden": self.mid_hidden,
            "mid_text_norm": self.head.text_norm,
        }

    @classmethod
    def options_from_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """The constructor options stored in an adapter's ``config`` (older adapters without ``mid_text_norm``
        get ``"none"``)."""
        out: dict[str, Any] = {
            "mid_text_norm": config.get("mid_text_norm", "none")
        }  # older adapters: no norm
        if config.get("probe_layers"):
            out["probe_layers"] = config["probe_layers"]
        if config.get("mid_hidden"):
            out["mid_hidden"] = config["mid_hidden"]
        return out
