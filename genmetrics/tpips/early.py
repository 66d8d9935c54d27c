"""Early fusion (Appendix C.2): one sequence ``[text | x1 patches | x2 patches | r1 | r2]`` with a custom
boolean 4D mask (text causal among itself; patches see the text and both images; ``r_k`` sees the text, the
patches of ``x_k`` and itself), M-RoPE positions built here (text ``(t,0,0)`` for ``t = 1..M``, patches of
both images ``(0,h,w)``, both registers ``(M+1,0,0)``), one learned register vector; ``f = cos(h_r1, h_r2)``.
Symmetric and ``f(x,x) = 1`` by construction; each pair enters in a canonical order (by content hash), so
``f(a, b) = f(b, a)`` holds bitwise as well. Both images of a pair share one token grid
(:meth:`~genmetrics.backbones.qwen_vl.QwenResize.pair_size`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genmetrics.backbones.qwen_vl import VisionFeatures, linear_attention_layers
from genmetrics.errors import InputError
from genmetrics.tpips.base import VLMBase
from genmetrics.tpips.common import prompt_for, unit_cosine
from genmetrics.tpips.fusion import Fusion, FusionOptions, check_head_tensors

__all__ = ["EarlyFusion", "early_inputs", "early_registers"]


def early_inputs(
    model: VLMBase, fa: list[VisionFeatures], fb: list[VisionFeatures], aspects: list[str]
) -> dict[str, Any]:
    """The Appendix C.2 inputs for a batch of pairs: ids, 4D bool mask ``[B,1,S,S]`` (True = may attend),
    positions ``(3,B,S)``, patch/register masks and the register indices.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("early")
    >>> fa = model.vision_features(model.resized(model.load_images(random_images(2, 64, seed=1))))
    >>> fb = model.vision_features(model.resized(model.load_images(random_images(2, 64, seed=2))))
    >>> inp = early_inputs(model, fa, fb, ["color", "color"])
    >>> inp["mask"].dtype, inp["mask"].shape[:2], inp["position_ids"].shape[:2]
    (torch.bool, torch.Size([2, 1]), torch.Size([3, 2]))
    """
    texts = []
    for a in aspects:
        instr = prompt_for("early", model.clip_aspect(a), model.prompts)
        texts.append(
            model.text_ids("<|im_start|>system\n")
            + model.text_ids(instr)
            + model.text_ids("<|im_end|>\n<|im_start|>user\n")
        )
    B = len(aspects)
    for x, y in zip(fa, fb):
        if x.grid != y.grid:
            raise InputError(
                f"early fusion needs both images on the same token grid, got {x.grid} and {y.grid}"
            )
    lens = [len(t) + fa[i].n_tokens + fb[i].n_tokens + 2 for i, t in enumerate(texts)]
    S = max(lens)
    ids = torch.full((B, S), model.pad_id, dtype=torch.long)
    pos = torch.zeros((3, B, S), dtype=torch.long)
    mask = torch.zeros((B, 1, S, S), dtype=torch.bool)
    patch = torch.zeros((B, S), dtype=torch.bool)
    reg = torch.zeros((B, S), dtype=torch.bool)
    r_idx = torch.zeros((B, 2), dtype=torch.long)
    for i, t in enumerate(texts):
        M, N = len(t), fa[i].n_tokens
        gh, gw = fa[i].grid
        x1, x2, r1, r2 = M, M + N, M + 2 * N, M + 2 * N + 1
        ids[i, :M] = torch.tensor(t)
        ids[i, x1:r1] = model.image_token_id
        patch[i, x1:r1] = True
        reg[i, r1] = reg[i, r2] = True
        r_idx[i] = torch.tensor([r1, r2])
        # positions: text (t, 0, 0) with t = 1..M; patches (0, h, w) for both images; registers (M+1, 0, 0)
        pos[0, i, :M] = torch.arange(1, M + 1)
        hh = torch.arange(gh).repeat_interleave(gw)
        ww = torch.arange(gw).repeat(gh)
        for s in (x1, x2):
            pos[1, i, s : s + N] = hh
            pos[2, i, s : s + N] = ww
        pos[0, i, r1] = pos[0, i, r2] = M + 1
        m = mask[i, 0]
        m[:M, :M] = torch.tril(torch.ones(M, M, dtype=torch.bool))  # text: causal among itself
        m[x1:r1, :M] = True  # patches: all text ...
        m[x1:r1, x1:r1] = True  # ... and both images
        m[r1, :M] = m[r2, :M] = True  # registers: text ...
        m[r1, x1:x2] = True  # ... r1 -> x1 patches
        m[r2, x2:r1] = True  # ... r2 -> x2 patches
        m[r1, r1] = m[r2, r2] = True  # ... and itself
        for p in range(lens[i], S):  # padding attends to itself only; nothing attends to padding
            m[p, p] = True
    dev = model.device
    return {
        "input_ids": ids.to(dev),
        "mask": mask.to(dev),
        "position_ids": pos.to(dev),
        "patch_mask": patch.to(dev),
        "register_mask": reg.to(dev),
        "register_index": r_idx.to(dev),
        "lengths": lens,
    }


def early_registers(
    model: VLMBase,
    register: torch.Tensor,
    fa: list[VisionFeatures],
    fb: list[VisionFeatures],
    aspects: list[str],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states ``h_r1``, ``h_r2`` (``[B,D]`` float32) of the two registers, both starting from the
    learned ``register`` vector.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("early")
    >>> features = model.vision_features(model.resized(model.load_images(random_images(2, 64))))
    >>> h1, h2 = early_registers(model, model.fusion.register, features[:1], features[1:], ["color"])
    >>> tuple(h1.shape), tuple(h2.shape), h1.dtype
    ((1, 64), (1, 64), torch.float32)
    """
    inp = early_inputs(model, fa, fb, aspects)
    features = [f for pair in zip(fa, fb) for f in pair]  # sequence order: x1 then x2 per row
    embeds, ds = model.embed_inputs(inp["input_ids"], inp["patch_mask"], features)
    embeds = torch.where(inp["register_mask"].unsqueeze(-1), register.to(embeds.dtype), embeds)
    mask = inp["mask"]
    if model.attn_implementation == "eager":  # eager adds the mask: give it 0 / -inf
        mask = torch.zeros(mask.shape, dtype=embeds.dtype, device=mask.device).masked_fill(
            ~mask, torch.finfo(embeds.dtype).min
        )
    hidden, _ = model.run_language_model(embeds, mask, inp["position_ids"], inp["patch_mask"], ds)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return hidden[rows, inp["register_index"][:, 0]].float(), hidden[
        rows, inp["register_index"][:, 1]
    ].float()


class EarlyFusion(Fusion):
    """Appendix C.2 (see the module docstring): ``f = cos(h_r1, h_r2)``; one learned register vector
    (initialised to the mean token embedding). Needs softmax attention in every layer and an attention
    implementation that takes a 4D mask (``sdpa`` or ``eager``): anything else is refused.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("early")
    >>> a, b = model.load_images(random_images(2, 64, seed=1)), model.load_images(random_images(2, 64, seed=2))
    >>> s = model.fusion.pair_scores(model, a, b, ["color", "overall"])
    >>> tuple(s.shape), bool(((s >= -1) & (s <= 1)).all())
    ((2,), True)
    """

    name = "early"
    value_range = (-1.0, 1.0)

    def __init__(self, base: VLMBase, options: FusionOptions) -> None:
        super().__init__()
        linear = linear_attention_layers(base.backbone)
        if linear:
            raise InputError(
                f"early fusion needs softmax attention in every language layer, but this backbone has "
                f"{len(linear)} linear-attention layers (e.g. Qwen3.5's Gated-DeltaNet, layers {linear[:8]}) "
                "that ignore custom attention masks, so the Appendix C.2 mask cannot be applied; use "
                "variant='late' or 'mid', or a Qwen3-VL backbone (Qwen/Qwen3-VL-Embedding-2B)"
            )
        impl = base.attn_implementation
        if impl not in ("sdpa", "eager"):
            raise InputError(
                f"early fusion needs attn_implementation 'sdpa' (or 'eager') for its custom 4D mask; "
                f"the backbone uses {impl!r}: load it with attn_implementation='sdpa'"
            )
        with torch.no_grad():
            init = base.language_model.embed_tokens.weight.float().mean(0)
        self.register = nn.Parameter(init.clone().to(base.device))

    def pair_scores(
        self, base: VLMBase, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B]`` early-fusion similarities of image pairs (resized to a shared grid per pair).

        ``f`` is symmetric by construction (both images' patches share positions, the registers swap); to make
        it symmetric in floating point too, each pair enters the sequence in one canonical order (by content
        hash), so ``f(a, b)`` and ``f(b, a)`` run the identical computation."""
        ra, rb = base.resized_pairs(a, b)
        both, n = ra + rb, len(ra)
        keys = base.content_keys(both)
        first = [i if keys[i] <= keys[n + i] else n + i for i in range(n)]
        order = first + [n + i if f == i else i for i, f in enumerate(first)]
        feats = base.vision_features([both[j] for j in order], keys=[keys[j] for j in order])
        fa, fb = feats[:n], feats[n:]
        outs = []
        for i in range(0, len(a), base.batch_size):
            sl = slice(i, i + base.batch_size)
            h1, h2 = early_registers(base, self.register, fa[sl], fb[sl], aspects[sl])
            if torch.is_grad_enabled() and h1.requires_grad:
                outs.append(F.cosine_similarity(h1, h2, dim=-1, eps=1e-12))
            else:
                outs.append(unit_cosine(h1, h2))
        return torch.cat(outs, 0)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The trained register vector as ``{"register": [d]}`` (CPU, contiguous), as saved in an adapter folder."""
        return {"register": self.register.detach().cpu().contiguous()}

    def load_head_state_dict(self, state: dict[str, torch.Tensor], *, source: str = "head state") -> None:
        """Load the register vector from ``state`` after checking its names and shapes; an error names
        ``source``."""
        state = check_head_tensors(state, self.head_state_dict(), source=source)
        with torch.no_grad():
            self.register.copy_(state["register"].to(self.register.device, self.register.dtype))
