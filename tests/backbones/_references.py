"""Independent second computations for the real-size parity checks (tests and benchmarks/real_size.py).

* :func:`official_embeddings`: Qwen3-VL-Embedding's image embedding as its official embedder computes it
  (QwenLM/Qwen3-VL-Embedding, ``src/models/qwen3_vl_embedding.py``: a system turn with the instruction, a
  user turn with the image, the chat template with the generation prompt, images resized by
  ``qwen_vl_utils.fetch_image`` (``smart_resize`` to multiples of 32 within the pixel budget, PIL resize),
  the processor told not to resize again, right padding, the plain model forward, the last attended token's
  final hidden state, L2-normalised). Written from those facts with transformers only, no genmetrics code.
* :func:`authors_mie`: the MIE authors' forward (one chat turn: references, candidate, then the scoring
  text; the processor's own preprocessing of the unresized images; the final hidden state of the last valid
  token into two fp32 heads), the same facts as ``tests/mie/test_authors_parity.py`` follows.
"""

from __future__ import annotations

import math
import unicodedata

import torch
import torch.nn.functional as F

MIE_TEMPLATE = (
    "You are evaluating a multi-subject personalization result. The first images are subject references. "
    "The last image is the generated candidate. Prompt: {prompt}"
)


def official_smart_resize(
    height: int, width: int, factor: int = 32, min_pixels: int = 4 * 32 * 32, max_pixels: int = 1800 * 32 * 32
) -> tuple[int, int]:
    """``qwen_vl_utils.smart_resize``: round each side to a multiple of ``factor``; scale down (floor) or up
    (ceil) by one common factor when the area leaves ``[min_pixels, max_pixels]``."""

    def by(n: float, how) -> int:
        return how(n / factor) * factor

    h = max(factor, by(height, round))
    w = max(factor, by(width, round))
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, by(height / beta, math.floor))
        w = max(factor, by(width / beta, math.floor))
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = by(height * beta, math.ceil)
        w = by(width * beta, math.ceil)
    return h, w


def _instruction(text: str) -> str:
    text = text.strip()
    if text and not unicodedata.category(text[-1]).startswith("P"):
        text += "."
    return text


@torch.no_grad()
def official_embeddings(vlm, processor, images, instructions) -> torch.Tensor:
    """``[B, D]`` float32 unit embeddings of PIL ``images`` under their ``instructions``, one padded batch."""
    conversations = [
        [
            {"role": "system", "content": [{"type": "text", "text": _instruction(ins)}]},
            {"role": "user", "content": [{"type": "image", "image": im}]},
        ]
        for im, ins in zip(images, instructions)
    ]
    texts = [
        processor.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations
    ]
    resized = []
    for im in images:
        im = im.convert("RGB")
        h, w = official_smart_resize(im.height, im.width)
        resized.append(im.resize((w, h)))  # PIL's default resampling for RGB: bicubic
    proc_tok = processor.tokenizer
    old_side = proc_tok.padding_side
    proc_tok.padding_side = "right"
    try:
        inputs = processor(text=texts, images=resized, padding=True, do_resize=False, return_tensors="pt")
    finally:
        proc_tok.padding_side = old_side
    p = next(vlm.parameters())
    inputs = {
        k: (v.to(p.device, p.dtype) if k == "pixel_values" else v.to(p.device)) for k, v in inputs.items()
    }
    hidden = vlm(**inputs, use_cache=False).last_hidden_state
    mask = inputs["attention_mask"]
    col = mask.shape[1] - mask.flip(dims=[1]).argmax(dim=1) - 1  # the last attended token
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return F.normalize(hidden[rows, col].float(), p=2, dim=-1)


def copy_head(head: torch.nn.Module) -> torch.nn.Module:
    """An independent ``Linear -> GELU -> Linear`` (fp32) holding the weights of ``head``."""
    lin1, lin2 = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    out = torch.nn.Sequential(
        torch.nn.Linear(lin1.in_features, lin1.out_features),
        torch.nn.GELU(),
        torch.nn.Linear(lin2.in_features, lin2.out_features),
    ).float()
    with torch.no_grad():
        out[0].weight.copy_(lin1.weight)
        out[0].bias.copy_(lin1.bias)
        out[2].weight.copy_(lin2.weight)
        out[2].bias.copy_(lin2.bias)
    return out.to(lin1.weight.device)


@torch.no_grad()
def authors_mie(vlm, processor, score_head, classification_head, references, prompt, candidate):
    """``(score [1], diagnostics [1,3])`` of one sample, the authors' way (PIL images, unresized)."""
    content = [{"type": "image"} for _ in references] + [
        {"type": "image"},
        {"type": "text", "text": MIE_TEMPLATE.format(prompt=prompt)},
    ]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=False
    )
    x = processor(
        text=[text], images=[*references, candidate], return_tensors="pt", padding=False, truncation=False
    )
    p = next(vlm.parameters())
    keep = {
        k: (v.to(p.device, p.dtype) if k == "pixel_values" else v.to(p.device))
        for k, v in x.items()
        if k in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
    }
    hidden = vlm(**keep, use_cache=False).last_hidden_state
    last = keep["attention_mask"].sum(1) - 1
    h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()
    return score_head(h).squeeze(-1), classification_head(h)
