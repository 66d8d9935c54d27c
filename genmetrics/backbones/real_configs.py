"""The default backbones' real architectures, typed in from their published configs, built offline with
random weights (nothing downloads), with analytic parameter counts and structurally identical reduced
variants for tests.

=========================  ============  ====================  ==========================================
name                       family        built as              published size (parameters)
=========================  ============  ====================  ==========================================
``ViT-B-32-quickgelu``     raclip        open_clip ``CLIP``     151.28 M (raclip's default weights)
``ViT-B-16-quickgelu``     raclip        open_clip ``CLIP``     149.62 M
``ViT-L-14-quickgelu``     raclip        open_clip ``CLIP``     427.62 M
``Qwen3-VL-Embedding-2B``  tpips         ``Qwen3VLModel``       2,127,532,032 (tpips' default weights)
``Qwen3.5-0.8B``           mie           ``Qwen3_5Model``       852,985,920
=========================  ============  ====================  ==========================================

* :data:`REAL_CONFIGS` holds the typed numbers; each entry names its source. The Qwen checkpoints could not
  be read from this machine (no network), so their ``config.json`` numbers were typed from public mirrors of
  those files and cross-checked against the published parameter counts, which they reproduce exactly.
* :func:`genmetrics.testing.real_models.build_real_model` builds the architecture with seeded random weights
  (``device="meta"`` builds it without memory, for counting), and
  :func:`genmetrics.testing.real_models.processor_for` gives the offline processor with the real image
  preprocessing around the tiny tokenizer: they live under ``genmetrics.testing`` because they use the
  offline tiny tokenizer, which product code never imports.
* :func:`count_parameters` counts from the typed numbers alone (closed forms per module);
  ``tests/backbones/test_real_configs.py`` checks it against a meta-device build and the published sizes.
* :func:`reduced_config` keeps a config's structure (layer counts and types, DeepStack indices, head and
  rotary dimensions, patch / merge sizes, activation) and shrinks the widths, so a test at that size runs
  the same code paths as the real model in a second.

>>> cfg = REAL_CONFIGS["Qwen3-VL-Embedding-2B"]
>>> cfg.kind, cfg.config["text_config"]["num_hidden_layers"], count_parameters("Qwen3-VL-Embedding-2B")
('qwen3_vl', 28, 2127532032)
>>> round(count_parameters("ViT-L-14-quickgelu") / 1e6, 2)
427.62
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REAL_CONFIGS",
    "REDUCED_VOCAB_SIZE",
    "RealConfig",
    "count_parameters",
    "real_config",
    "reduced_config",
]


@dataclass(frozen=True)
class RealConfig:
    """One default backbone: its typed config and where the numbers come from.

    >>> c = REAL_CONFIGS["ViT-B-16-quickgelu"]
    >>> c.family, c.kind, c.config["vision_cfg"]["patch_size"], c.published_params
    ('raclip', 'open_clip', 16, 149620000)
    """

    name: str
    family: str  # the genmetrics family that uses it by default
    kind: str  # "open_clip" | "qwen3_vl" | "qwen3_5"
    config: Mapping[str, Any]
    config_source: str
    published_params: int
    params_source: str
    #: the image processor's pixel budget (Qwen: ``size`` of preprocessor_config.json) or image side (CLIP)
    image: Mapping[str, int]


# ----------------------------------------------------------------------------------------------- open_clip
# Source: open_clip 3.3's own model configs, shipped inside the installed package as
# open_clip/model_configs/<name>.json (the test compares these typed numbers with those files). Vision heads
# are width // head_width (open_clip's VisionCfg default head_width = 64), MLP ratio 4.
# Published sizes: open_clip's docs/model_profile.csv (column mparams, millions, two decimals).
_CLIP_TEXT = {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}

_VIT_B_32 = {
    "embed_dim": 512,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
    "text_cfg": dict(_CLIP_TEXT),
}
_VIT_B_16 = {
    "embed_dim": 512,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 16},
    "text_cfg": dict(_CLIP_TEXT),
}
_VIT_L_14 = {
    "embed_dim": 768,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 224, "layers": 24, "width": 1024, "patch_size": 14},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 768, "heads": 12, "layers": 12},
}

# ------------------------------------------------------------------------------------------------ Qwen3-VL
# Source: config.json of Qwen/Qwen3-VL-2B-Instruct (Qwen/Qwen3-VL-Embedding-2B wraps the same Qwen3VLModel
# with the same Qwen3VLConfig: its checkpoint holds the same 2,127,532,032 parameters, 625 tensors), typed
# from public mirrors of that file. Published size: the safetensors metadata of both checkpoints.
# Official embedder (QwenLM/Qwen3-VL-Embedding src/models/qwen3_vl_embedding.py): images smart-resized to
# multiples of 32 within 4*32*32 .. 1800*32*32 pixels.
_QWEN3_VL_2B = {
    "text_config": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5_000_000.0,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 2048,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17],
        "hidden_act": "gelu_pytorch_tanh",
    },
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": True,
}

# ------------------------------------------------------------------------------------------------ Qwen3.5
# Source: config.json of Qwen/Qwen3.5-0.8B, typed from public mirrors of that file (24 text layers in the
# [linear x3, full] x6 pattern, a 12-block vision tower of width 768, no DeepStack). The checkpoint's
# multi-token-prediction layer (mtp_num_hidden_layers = 1) is not part of transformers' Qwen3_5Model.
# Published size: 852,985,920 parameters (the checkpoint's safetensors header, also KerasHub's preset
# metadata). Image processor (preprocessor_config.json of the Qwen3.5 / Qwen3-VL checkpoints):
# size = {shortest_edge: 65536, longest_edge: 16777216} pixels, patch 16, merge 2, mean = std = 0.5.
_QWEN3_5_0_8B = {
    "text_config": {
        "vocab_size": 248320,
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_hidden_layers": 24,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "attention_bias": False,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 12,
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_heads": 12,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 1024,
        "num_position_embeddings": 2304,
        "hidden_act": "gelu_pytorch_tanh",
    },
    "image_token_id": 248056,
    "video_token_id": 248057,
    "vision_start_token_id": 248053,
    "vision_end_token_id": 248054,
    "tie_word_embeddings": True,
}

_QWEN_PROCESSOR = {"min_pixels": 65536, "max_pixels": 16777216}
_CLIP_SRC = "open_clip 3.3 open_clip/model_configs/{}.json"
_CLIP_PARAMS_SRC = "open_clip docs/model_profile.csv (mparams)"

REAL_CONFIGS: dict[str, RealConfig] = {
    c.name: c
    for c in (
        RealConfig(
            "ViT-B-32-quickgelu",
            "raclip",
            "open_clip",
            _VIT_B_32,
            _CLIP_SRC.format("ViT-B-32-quickgelu"),
            151_280_000,
            _CLIP_PARAMS_SRC,
            {"image_size": 224},
        ),
        RealConfig(
            "ViT-B-16-quickgelu",
            "raclip",
            "open_clip",
            _VIT_B_16,
            _CLIP_SRC.format("ViT-B-16-quickgelu"),
            149_620_000,
            _CLIP_PARAMS_SRC,
            {"image_size": 224},
        ),
        RealConfig(
            "ViT-L-14-quickgelu",
            "raclip",
            "open_clip",
            _VIT_L_14,
            _CLIP_SRC.format("ViT-L-14-quickgelu"),
            427_620_000,
            _CLIP_PARAMS_SRC,
            {"image_size": 224},
        ),
        RealConfig(
            "Qwen3-VL-Embedding-2B",
            "tpips",
            "qwen3_vl",
            _QWEN3_VL_2B,
            "config.json of Qwen/Qwen3-VL-2B-Instruct = Qwen/Qwen3-VL-Embedding-2B (Qwen3VLConfig)",
            2_127_532_032,
            "safetensors metadata of Qwen/Qwen3-VL-Embedding-2B and Qwen/Qwen3-VL-2B-Instruct",
            {"min_pixels": 4 * 32 * 32, "max_pixels": 1800 * 32 * 32},  # the official embedder's budget
        ),
        RealConfig(
            "Qwen3.5-0.8B",
            "mie",
            "qwen3_5",
            _QWEN3_5_0_8B,
            "config.json of Qwen/Qwen3.5-0.8B (Qwen3_5Config)",
            852_985_920,
            "safetensors header of Qwen/Qwen3.5-0.8B (KerasHub preset metadata: the same number)",
            _QWEN_PROCESSOR,
        ),
    )
}


def real_config(name: str | RealConfig) -> RealConfig:
    """The :data:`REAL_CONFIGS` entry of ``name`` (an entry passes through); an unknown name is one error.

    >>> real_config("Qwen3.5-0.8B").kind
    'qwen3_5'
    >>> real_config("ViT-X")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: real config 'ViT-X': unknown; expected one of ViT-B-32-quickgelu, ...
    """
    if isinstance(name, RealConfig):
        return name
    try:
        return REAL_CONFIGS[name]
    except KeyError:
        from genmetrics.errors import InputError

        raise InputError(
            f"real config {name!r}: unknown; expected one of {', '.join(REAL_CONFIGS)}"
        ) from None


# ------------------------------------------------------------------------------------------- reduced sizes
#: vocabulary of the reduced Qwen configs: the offline tiny tokenizer's embedding rows
#: (``genmetrics.testing.tiny_vlm.TINY_VOCAB_SIZE``; a test keeps the two equal), so its ids stay valid
REDUCED_VOCAB_SIZE = 512


def reduced_config(name: str | RealConfig) -> dict[str, Any]:
    """The config with its structure kept and its widths shrunk (for tests).

    Kept: layer counts and layer types, DeepStack indices, attention head dimensions (so the M-RoPE
    sections and the partial rotary factor stay valid), Gated-DeltaNet head dimensions and conv kernel,
    patch / merge / temporal sizes, the learned position grid, activations, tied embeddings, context
    length. Shrunk: hidden widths, head counts, MLP widths and the vocabulary (to the tiny tokenizer's, so
    its ids stay valid).

    >>> r = reduced_config("Qwen3-VL-Embedding-2B")
    >>> r["text_config"]["num_hidden_layers"], r["vision_config"]["deepstack_visual_indexes"]
    (28, [5, 11, 17])
    >>> r["text_config"]["hidden_size"], r["text_config"]["head_dim"]
    (256, 128)
    """
    e = real_config(name)
    cfg = copy.deepcopy(dict(e.config))
    if e.kind == "open_clip":
        v, t = cfg["vision_cfg"], cfg["text_cfg"]
        v["width"] = 128  # 2 heads of open_clip's default head width 64
        t["width"], t["heads"] = 64, 2
        cfg["embed_dim"] = 32
        return cfg
    t, v = cfg["text_config"], cfg["vision_config"]
    v["hidden_size"], v["num_heads"], v["intermediate_size"] = 128, 2, 256  # vision head_dim 64 as real
    t["vocab_size"] = REDUCED_VOCAB_SIZE
    if e.kind == "qwen3_vl":
        t.update(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, intermediate_size=384)
    else:  # qwen3_5: head_dim 256, linear heads of 128 as real, one of each
        t.update(
            hidden_size=128,
            num_attention_heads=1,
            num_key_value_heads=1,
            intermediate_size=256,
            linear_num_key_heads=1,
            linear_num_value_heads=1,
        )
    v["out_hidden_size"] = t["hidden_size"]
    return cfg


# ------------------------------------------------------------------------------------------------ counting
def _vit_block(width: int, mlp: int, *, bias: bool = True) -> int:
    """Pre-norm transformer block with LayerNorms (weight + bias), fused qkv, out proj and a 2-layer MLP."""
    b = 1 if bias else 0
    attn = width * 3 * width + b * 3 * width + width * width + b * width
    return 2 * (2 * width) + attn + width * mlp + b * mlp + mlp * width + b * width


def _count_clip(cfg: Mapping[str, Any]) -> int:
    v, t, e = cfg["vision_cfg"], cfg["text_cfg"], cfg["embed_dim"]
    w, p, s = v["width"], v["patch_size"], v["image_size"]
    grid = (s // p) ** 2
    vision = 3 * p * p * w + w + (grid + 1) * w + 2 * (2 * w) + w * e  # conv, cls, pos, ln_pre/post, proj
    vision += v["layers"] * _vit_block(w, 4 * w)
    tw = t["width"]
    text = t["vocab_size"] * tw + t["context_length"] * tw + 2 * tw + tw * e  # tokens, pos, ln_final, proj
    text += t["layers"] * _vit_block(tw, 4 * tw)
    return vision + text + 1  # logit_scale


def _count_qwen_vision(v: Mapping[str, Any]) -> int:
    d, i, m2 = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"] ** 2
    patch = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * d + d  # Conv3d + bias
    blocks = v["depth"] * _vit_block(d, i)
    merged = d * m2

    def merger(norm_width: int) -> int:  # LayerNorm, Linear(merged, merged), GELU, Linear(merged, out)
        return (
            2 * norm_width + merged * merged + merged + merged * v["out_hidden_size"] + v["out_hidden_size"]
        )

    deep = len(v.get("deepstack_visual_indexes") or []) * merger(merged)  # post-shuffle norm
    return patch + v["num_position_embeddings"] * d + blocks + merger(d) + deep


def _count_qwen_text(t: Mapping[str, Any], kind: str) -> int:
    h, hd = t["hidden_size"], t["head_dim"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    gate = 2 if kind == "qwen3_5" else 1  # Qwen3.5's gated attention: q_proj also emits the output gate
    full = h * q * gate + 2 * h * kv + q * h + 2 * hd  # q, k, v, o, q_norm, k_norm
    per_layer = {"full_attention": full}
    if kind == "qwen3_5":
        nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
        dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
        conv_dim = 2 * nk * dk + nv * dv
        per_layer["linear_attention"] = (
            h * conv_dim  # in_proj_qkv
            + h * nv * dv  # in_proj_z
            + 2 * h * nv  # in_proj_b, in_proj_a
            + conv_dim * t["linear_conv_kernel_dim"]  # depthwise conv1d, no bias
            + 2 * nv  # dt_bias, A_log
            + dv  # gated RMSNorm
            + nv * dv * h  # out_proj
        )
    types = t.get("layer_types") or ["full_attention"] * t["num_hidden_layers"]
    mlp_norms = 3 * h * t["intermediate_size"] + 2 * h
    return t["vocab_size"] * h + sum(per_layer[x] + mlp_norms for x in types) + h  # embed, layers, norm


def count_parameters(name: str | RealConfig, *, reduced: bool = False) -> int:
    """Parameters of the architecture, from the typed numbers alone (tied embeddings counted once; the base
    VLM without an LM head for Qwen entries).

    >>> count_parameters("Qwen3.5-0.8B"), count_parameters("ViT-B-16-quickgelu")
    (852985920, 149620737)
    """
    e = real_config(name)
    cfg = reduced_config(e) if reduced else e.config
    if e.kind == "open_clip":
        return _count_clip(cfg)
    return _count_qwen_vision(cfg["vision_config"]) + _count_qwen_text(cfg["text_config"], e.kind)
