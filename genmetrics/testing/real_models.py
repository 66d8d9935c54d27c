"""Real-size models with random weights, built offline (nothing downloads), for benchmarks and tests.

The architectures are :data:`genmetrics.backbones.real_configs.REAL_CONFIGS`; this module builds them.

* :func:`build_real_model` builds the architecture with seeded random weights (``device="meta"`` builds it
  without memory, for counting). The Qwen special-token ids default to the offline tiny tokenizer's
  (``token_ids="tiny"``, :mod:`genmetrics.testing.tiny_vlm`): they index rows of the same embedding, so the
  architecture and the parameter count do not change; ``token_ids="real"`` keeps the published ids.
* :func:`processor_for` gives the offline processor with the real image preprocessing (patch 16, merge 2,
  mean / std 0.5, the checkpoint's pixel budget) around the tiny tokenizer; open_clip's tokenizer ships
  with the package.
"""

from __future__ import annotations

import copy
from typing import Any

from genmetrics.backbones.real_configs import RealConfig, real_config, reduced_config
from genmetrics.errors import InputError
from genmetrics.testing.tiny_vlm import (
    IMAGE_TOKEN_ID,
    VIDEO_TOKEN_ID,
    VISION_END_TOKEN_ID,
    VISION_START_TOKEN_ID,
    tiny_qwen3vl_processor,
)

__all__ = ["build_real_model", "hf_config", "processor_for"]


def _tiny_ids() -> dict[str, int]:
    return {
        "image_token_id": IMAGE_TOKEN_ID,
        "video_token_id": VIDEO_TOKEN_ID,
        "vision_start_token_id": VISION_START_TOKEN_ID,
        "vision_end_token_id": VISION_END_TOKEN_ID,
    }


def hf_config(name: str | RealConfig, *, reduced: bool = False, token_ids: str = "tiny") -> Any:
    """The transformers config (``Qwen3VLConfig`` / ``Qwen3_5Config``) of a Qwen entry.

    >>> cfg = hf_config("Qwen3.5-0.8B")
    >>> type(cfg).__name__, cfg.text_config.layer_types[:4], cfg.image_token_id  # tiny tokenizer's id
    ('Qwen3_5Config', ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'], 12)
    """
    e = real_config(name)
    if e.kind == "open_clip":
        raise InputError(f"{e.name} is an open_clip model; build it with build_real_model({e.name!r})")
    cfg = reduced_config(e) if reduced else copy.deepcopy(dict(e.config))
    if token_ids == "tiny":
        cfg.update(_tiny_ids())
    elif token_ids != "real":
        raise InputError(f"token_ids={token_ids!r}: expected 'tiny' (offline tokenizer) or 'real'")
    cfg.setdefault("text_config", {})["pad_token_id"] = 0
    if e.kind == "qwen3_vl":
        from transformers import Qwen3VLConfig

        return Qwen3VLConfig(**cfg, attn_implementation="sdpa")
    from transformers import Qwen3_5Config

    return Qwen3_5Config(**cfg, attn_implementation="sdpa")


def build_real_model(
    name: str | RealConfig,
    *,
    seed: int = 0,
    dtype: Any = None,
    device: Any = "cpu",
    reduced: bool = False,
    token_ids: str = "tiny",
) -> Any:
    """The architecture with seeded random weights, in eval mode (nothing downloads).

    open_clip entries: ``open_clip.create_model(name, pretrained=None)``; Qwen entries: the base VLM
    (``Qwen3VLModel`` / ``Qwen3_5Model``, sdpa attention) built directly on ``device`` in ``dtype``
    (``device="meta"``: no memory, for counting). The caller's RNG is not advanced.

    >>> from genmetrics.backbones.real_configs import count_parameters
    >>> m = build_real_model("Qwen3-VL-Embedding-2B", device="meta")
    >>> type(m).__name__, sum(p.numel() for p in m.parameters()) == count_parameters("Qwen3-VL-Embedding-2B")
    ('Qwen3VLModel', True)
    >>> r = build_real_model("Qwen3.5-0.8B", reduced=True)
    >>> len(r.language_model.layers), len(r.visual.blocks)
    (24, 12)
    """
    import torch

    e = real_config(name)
    dtype = torch.float32 if dtype is None else dtype
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if e.kind == "open_clip":
            import open_clip

            with torch.device(device):
                if reduced:
                    from open_clip.model import CLIP

                    cfg = reduced_config(e)
                    model = CLIP(
                        cfg["embed_dim"], cfg["vision_cfg"], cfg["text_cfg"], quick_gelu=cfg["quick_gelu"]
                    )
                else:
                    model = open_clip.create_model(e.name, pretrained=None, device=device)
            return model.to(dtype=dtype).eval()
        from transformers import AutoModel  # Qwen3VLModel or Qwen3_5Model, from the config's type

        cfg = hf_config(e, reduced=reduced, token_ids=token_ids)
        with torch.device(device):
            model = AutoModel.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    return model.eval()


def processor_for(name: str | RealConfig) -> Any:
    """Offline preprocessing of the real checkpoint: a ``Qwen3VLProcessor`` with the real image settings
    (patch 16, merge 2, mean / std 0.5, the pixel budget of :attr:`RealConfig.image`) around the tiny
    tokenizer, or open_clip's tokenizer (shipped with the package) for CLIP entries.

    >>> p = processor_for("Qwen3.5-0.8B")
    >>> p.image_processor.size["shortest_edge"], p.image_processor.size["longest_edge"], p.image_processor.patch_size
    (65536, 16777216, 16)
    >>> p.tokenizer.model_max_length
    262144
    """
    e = real_config(name)
    if e.kind == "open_clip":
        import open_clip

        return open_clip.get_tokenizer(e.name)
    budget = e.image
    side = int(round(budget["max_pixels"] ** 0.5))
    side -= side % 32
    proc = tiny_qwen3vl_processor(side, min_pixels=int(budget["min_pixels"]))
    proc.image_processor.size = {"shortest_edge": budget["min_pixels"], "longest_edge": budget["max_pixels"]}
    # the released tokenizers' context (= max_position_embeddings), not the tiny tokenizer's 512: MIE takes
    # its default context limit from it, and 4 images of 1024 px are 4096 image tokens
    proc.tokenizer.model_max_length = int(e.config["text_config"]["max_position_embeddings"])
    return proc
