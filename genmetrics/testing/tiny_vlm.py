"""Tiny random Qwen3-VL / Qwen3.5 vision-language models, built in code, for tests.

Nothing here touches the network or the Hugging Face cache: the tokenizer is a byte-level BPE trained
in memory on a fixed corpus, the processors are real ``transformers`` classes configured in code, and
the models are real ``transformers`` classes with random weights (seeded). Everything runs on CPU in
well under a second per build, so the TPIPS and MIE code paths (vision tower caching, DeepStack, M-RoPE,
custom 4D masks, Gated-DeltaNet layers, LoRA) can be exercised in unit tests.

Public entry points (re-exported by ``genmetrics.testing``):

* :func:`tiny_tokenizer` - ``PreTrainedTokenizerFast`` with the Qwen chat special tokens.
* :func:`tiny_qwen3vl_processor` / :func:`tiny_qwen35_processor` - ``Qwen3VLProcessor`` (Qwen3.5 uses the
  same processor class in transformers 5.24).
* :func:`tiny_qwen3vl` / :func:`tiny_qwen3vl_for_generation` - ``Qwen3VLModel`` /
  ``Qwen3VLForConditionalGeneration``.
* :func:`tiny_qwen35` / :func:`tiny_qwen35_for_generation` - ``Qwen3_5Model`` /
  ``Qwen3_5ForConditionalGeneration``.
* :func:`tiny_qwen3vl_config` / :func:`tiny_qwen35_config` - the configs alone.

Special-token ids are fixed (see :data:`SPECIAL_TOKENS`): ``<|endoftext|>`` is 0, ``<|image_pad|>`` is
:data:`IMAGE_TOKEN_ID`, etc., and every id is < :data:`TINY_VOCAB_SIZE`.

transformers and tokenizers are imported lazily (inside the functions), so importing this module is cheap.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2VLImageProcessor,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5Model,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLModel,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

__all__ = [
    "IMAGE_TOKEN_ID",
    "SPECIAL_TOKENS",
    "TINY_CHAT_TEMPLATE",
    "TINY_VOCAB_SIZE",
    "VIDEO_TOKEN_ID",
    "VISION_END_TOKEN_ID",
    "VISION_START_TOKEN_ID",
    "tiny_qwen35",
    "tiny_qwen35_config",
    "tiny_qwen35_for_generation",
    "tiny_qwen35_processor",
    "tiny_qwen3vl",
    "tiny_qwen3vl_config",
    "tiny_qwen3vl_for_generation",
    "tiny_qwen3vl_processor",
    "tiny_tokenizer",
]

#: Special tokens, in id order (ids 0..len-1), the same set and order as the Qwen2/Qwen3 tokenizers
#: (which place them after the BPE vocabulary at 151643...). ``<think>``/``</think>`` and the tool-call
#: tokens are Qwen3 additions.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",  # 0  eos / pad / unk
    "<|im_start|>",  # 1
    "<|im_end|>",  # 2
    "<|object_ref_start|>",  # 3
    "<|object_ref_end|>",  # 4
    "<|box_start|>",  # 5
    "<|box_end|>",  # 6
    "<|quad_start|>",  # 7
    "<|quad_end|>",  # 8
    "<|vision_start|>",  # 9
    "<|vision_end|>",  # 10
    "<|vision_pad|>",  # 11
    "<|image_pad|>",  # 12
    "<|video_pad|>",  # 13
    "<tool_call>",  # 14
    "</tool_call>",  # 15
    "<think>",  # 16
    "</think>",  # 17
)
VISION_START_TOKEN_ID = SPECIAL_TOKENS.index("<|vision_start|>")
VISION_END_TOKEN_ID = SPECIAL_TOKENS.index("<|vision_end|>")
IMAGE_TOKEN_ID = SPECIAL_TOKENS.index("<|image_pad|>")
VIDEO_TOKEN_ID = SPECIAL_TOKENS.index("<|video_pad|>")

#: Embedding rows of the tiny models; the tokenizer (specials + 256 bytes + merges) stays below it.
TINY_VOCAB_SIZE = 512
_BPE_TARGET_SIZE = 480  # trainer target, specials included

# Qwen2/Qwen3 pre-tokenizer split (same regex as transformers' Qwen3_5Tokenizer).
_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Fixed training corpus for the merges: words that the metric prompts use, so that they tokenize into a
# handful of tokens. Any other text still tokenizes (byte-level fallback over all 256 bytes).
_CORPUS = (
    "Represent the similarity of the image based on lighting.",
    "Represent the similarity of the image based on the pose of the cat.",
    "Measure the similarity between the two images based on color, texture, shape and style.",
    "Measure the similarity between the two images based on the overall layout and composition.",
    "Which image is the odd one out: left, middle or right? Answer with one word.",
    "Rate the similarity of the two images from 0 to 10. The score is",
    "You are given reference images of several subjects, a prompt and a generated image.",
    "Reference 1, Reference 2, Reference 3, Reference 4. Prompt: a dog and a cat playing in the park.",
    "Is every subject present, does it look right, and does it do what the prompt says?",
    "existence appearance interaction subject subjects person people object objects",
    "a photo of a man, a woman, a person with glasses, smiling, young, old, hair, face, background",
    "system user assistant You are a helpful assistant. Describe the image in detail.",
    "the of and to in is that for with on as by at from this it be are was were an or not",
    "red green blue black white yellow orange purple brown gray dark bright light shadow",
    "camera view angle scene object material identity position count size number text",
    "The quick brown fox jumps over the lazy dog. 0123456789 ()[]{}<>.,;:!?'\"-_/\\|@#$%^&*+=~`",
)


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    """Train the tiny byte-level BPE once per process and return its serialisation."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_TARGET_SIZE,
        min_frequency=1,
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:  # pragma: no cover - guards a tokenizers behaviour change
            raise RuntimeError(
                f"tiny tokenizer: special token {t!r} got id {tok.token_to_id(t)}, expected {i}"
            )
    if tok.get_vocab_size() > TINY_VOCAB_SIZE:  # pragma: no cover
        raise RuntimeError(f"tiny tokenizer has {tok.get_vocab_size()} tokens > {TINY_VOCAB_SIZE}")
    return tok.to_str()


#: A compact Qwen3-VL-style chat template (system / user / assistant; string or list content; image and
#: video items become ``<|vision_start|><|image_pad|><|vision_end|>`` which the processor then expands).
TINY_CHAT_TEMPLATE = (
    "{%- set image_count = namespace(value=0) -%}"
    "{%- set video_count = namespace(value=0) -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for content in message['content'] -%}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}"
    "{%- set image_count.value = image_count.value + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Picture ' + image_count.value|string + ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif content['type'] == 'video' or 'video' in content -%}"
    "{%- set video_count.value = video_count.value + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Video ' + video_count.value|string + ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in content -%}"
    "{{- content['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def tiny_tokenizer(*, padding_side: str = "right", model_max_length: int = 512) -> Any:
    """A small offline byte-level BPE tokenizer with the Qwen chat special tokens.

    * ``transformers.PreTrainedTokenizerFast`` (``TokenizersBackend`` in transformers 5), built from a
      ``tokenizers`` BPE trained in memory on a fixed corpus (deterministic; ~480 tokens: the 18
      :data:`SPECIAL_TOKENS` at ids 0..17, the 256 byte symbols, then merges). Byte-level, so any Unicode
      text tokenizes and decodes losslessly.
    * ``eos_token = pad_token = unk_token = "<|endoftext|>"`` (id 0), no BOS, no automatically added
      special tokens (like Qwen).
    * ``model_max_length`` (default 512) and ``padding_side`` ("right" or "left") as given; truncation
      side is "right".
    * ``chat_template`` set to :data:`TINY_CHAT_TEMPLATE`.

    >>> tok = tiny_tokenizer()
    >>> ids = tok("a cat sat on the mat")["input_ids"]
    >>> tok.decode(ids), tok.eos_token_id, tok.pad_token_id
    ('a cat sat on the mat', 0, 0)
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    backend = Tokenizer.from_str(_tokenizer_json())
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        extra_special_tokens=[t for t in SPECIAL_TOKENS if t != "<|endoftext|>"],
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side="right",
        clean_up_tokenization_spaces=False,
        chat_template=TINY_CHAT_TEMPLATE,
    )
    return tok


def _image_processor(image_size: int, min_pixels: int | None) -> Any:
    factor = 32  # patch_size * merge_size
    if image_size < factor or image_size % factor:
        raise ValueError(f"image_size must be a positive multiple of {factor}, got {image_size}")
    return Qwen2VLImageProcessor(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        min_pixels=factor * factor if min_pixels is None else min_pixels,
        max_pixels=image_size * image_size,
    )


def _video_processor(image_size: int) -> Any:
    return Qwen3VLVideoProcessor(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": 32 * 32 * 2, "longest_edge": image_size * image_size * 8},
        min_frames=2,
        max_frames=8,
    )


def tiny_qwen3vl_processor(
    image_size: int = 64, *, padding_side: str = "right", min_pixels: int | None = None
) -> Any:
    """A real ``transformers.Qwen3VLProcessor`` built offline around :func:`tiny_tokenizer`.

    Image processor: ``Qwen2VLImageProcessor`` (torchvision backend) with patch_size 16, merge_size 2,
    temporal_patch_size 2, image_mean = image_std = 0.5 (the Qwen3-VL checkpoint values, not the
    Qwen2-VL/CLIP defaults), ``size = {"shortest_edge": min_pixels (default 32*32),
    "longest_edge": image_size**2}``. A 64x64 image becomes ``image_grid_thw = [1, 4, 4]`` (16 patches of
    16x16, i.e. ``pixel_values`` rows of 3*2*16*16 = 1536 values) and 16 / 2**2 = 4 ``<|image_pad|>``
    tokens in the text. ``image_size`` must be a multiple of 32; larger images are downscaled to at most
    ``image_size**2`` pixels (aspect kept, sides multiples of 32).

    Video processor: ``Qwen3VLVideoProcessor`` with the same patch settings (required by the processor
    constructor; not used by the metrics). Chat template: :data:`TINY_CHAT_TEMPLATE`.

    >>> from PIL import Image
    >>> proc = tiny_qwen3vl_processor()
    >>> turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a cat"}]}]
    >>> text = proc.apply_chat_template(turn, tokenize=False)
    >>> batch = proc(text=[text], images=[Image.new("RGB", (64, 64))], return_tensors="pt")
    >>> batch["image_grid_thw"].tolist(), int((batch["input_ids"] == 12).sum())  # 16 patches -> 4 image tokens
    ([[1, 4, 4]], 4)
    """
    return Qwen3VLProcessor(
        image_processor=_image_processor(image_size, min_pixels),
        tokenizer=tiny_tokenizer(padding_side=padding_side),
        video_processor=_video_processor(image_size),
        chat_template=TINY_CHAT_TEMPLATE,
    )


def tiny_qwen35_processor(
    image_size: int = 64, *, padding_side: str = "right", min_pixels: int | None = None
) -> Any:
    """Processor for :func:`tiny_qwen35`.

    transformers 5.24 maps model type ``qwen3_5`` to the same ``Qwen3VLProcessor`` class (and the same
    ``Qwen2VLImageProcessor`` / ``Qwen3VLVideoProcessor``), so this is :func:`tiny_qwen3vl_processor`.
    The tiny Qwen3.5 config uses the same special-token ids as the tiny Qwen3-VL config.

    >>> type(tiny_qwen35_processor()).__name__
    'Qwen3VLProcessor'
    """
    return tiny_qwen3vl_processor(image_size, padding_side=padding_side, min_pixels=min_pixels)


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _vision_config(**extra: Any) -> dict[str, Any]:
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 64,  # an 8x8 learned grid, bilinearly resampled to each image grid
        **extra,
    }


def tiny_qwen3vl_config(**overrides: Any) -> Any:
    """The tiny ``Qwen3VLConfig`` used by :func:`tiny_qwen3vl` (~0.23M parameters).

    * text: vocab 512, hidden 64, 2 layers, 4 heads (head_dim 16), 2 KV heads, intermediate 128,
      M-RoPE ``mrope_section=[4, 2, 2]`` (interleaved, sums to head_dim/2), rope_theta 5e6,
      max_position_embeddings 2048.
    * vision: depth 2, hidden 32, 2 heads, intermediate 64, patch 16, temporal patch 2, spatial merge 2,
      ``out_hidden_size`` 64 (= text hidden), ``deepstack_visual_indexes=[0]`` (one DeepStack feature,
      added to the output of text layer 0), 8x8 learned position grid.
    * token ids: image 12, video 13, vision_start 9, vision_end 10 (see :data:`SPECIAL_TOKENS`).
    * ``attn_implementation="sdpa"``, ``tie_word_embeddings=False``.

    ``overrides`` are merged into the top-level kwargs; nested dicts ``text_config=`` / ``vision_config=``
    are merged key by key (e.g. ``tiny_qwen3vl_config(text_config={"num_hidden_layers": 4})``).

    >>> cfg = tiny_qwen3vl_config(text_config={"num_hidden_layers": 4})
    >>> cfg.text_config.num_hidden_layers, cfg.text_config.hidden_size, cfg.image_token_id  # merged, rest kept
    (4, 64, 12)
    """
    base: dict[str, Any] = {
        "text_config": {
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6,
            "pad_token_id": 0,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        },
        "vision_config": _vision_config(deepstack_visual_indexes=[0]),
        "image_token_id": IMAGE_TOKEN_ID,
        "video_token_id": VIDEO_TOKEN_ID,
        "vision_start_token_id": VISION_START_TOKEN_ID,
        "vision_end_token_id": VISION_END_TOKEN_ID,
        "tie_word_embeddings": False,
        "attn_implementation": "sdpa",
    }
    return Qwen3VLConfig(**_merge(base, overrides))


def tiny_qwen35_config(**overrides: Any) -> Any:
    """The tiny ``Qwen3_5Config`` used by :func:`tiny_qwen35` (~0.3M parameters).

    * text: vocab 512, hidden 64, 4 layers with ``layer_types = ["linear_attention"] * 3 +
      ["full_attention"]`` (the real 3:1 Gated-DeltaNet : gated full attention pattern), 4 heads with
      head_dim 32 (``partial_rotary_factor`` 0.25 -> 8 rotary dims, ``mrope_section=[2, 1, 1]``), 2 KV
      heads, intermediate 128; linear attention: conv kernel 4, 2 key heads and 4 value heads of dim 16.
      The Gated-DeltaNet runs through the pure-torch fallback (``torch_chunk_gated_delta_rule``,
      ``causal_conv1d_fn``) when flash-linear-attention / causal-conv1d are not installed.
    * vision: as Qwen3-VL's (depth 2, hidden 32, patch 16, merge 2, ``out_hidden_size`` 64) but Qwen3.5
      has no DeepStack.
    * token ids as :func:`tiny_qwen3vl_config`; ``attn_implementation="sdpa"``.

    >>> tiny_qwen35_config().text_config.layer_types
    ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']
    """
    base: dict[str, Any] = {
        "text_config": {
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6,
            "pad_token_id": 0,
            "eos_token_id": 0,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
        },
        "vision_config": _vision_config(),
        "image_token_id": IMAGE_TOKEN_ID,
        "video_token_id": VIDEO_TOKEN_ID,
        "vision_start_token_id": VISION_START_TOKEN_ID,
        "vision_end_token_id": VISION_END_TOKEN_ID,
        "tie_word_embeddings": False,
        "attn_implementation": "sdpa",
    }
    merged = _merge(base, overrides)
    text = merged["text_config"]
    if "num_hidden_layers" in overrides.get("text_config", {}) and "layer_types" not in overrides.get(
        "text_config", {}
    ):
        n = text["num_hidden_layers"]
        text["layer_types"] = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(n)]
    return Qwen3_5Config(**merged)


def _build(model_cls: Any, config: Any, seed: int) -> Any:
    """A random ``model_cls`` for ``config`` (fp32, SDPA attention, eval mode), built through the public
    auto class that maps ``config`` to ``model_cls``. fork_rng keeps the caller's global RNG stream untouched."""
    auto = _auto_class_for(model_cls)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = auto.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    if type(model) is not model_cls:
        raise TypeError(
            f"{auto.__name__}.from_config built a {type(model).__name__}, expected {model_cls.__name__}"
        )
    return model.eval()


def _auto_class_for(model_cls: Any) -> Any:
    """transformers' auto class that builds ``model_cls`` from its config: ``AutoModelForImageTextToText``
    for a ``...ForConditionalGeneration`` class, else ``AutoModel``.

    >>> from transformers import Qwen3VLForConditionalGeneration, Qwen3VLModel
    >>> _auto_class_for(Qwen3VLModel).__name__, _auto_class_for(Qwen3VLForConditionalGeneration).__name__
    ('AutoModel', 'AutoModelForImageTextToText')
    """
    from transformers import AutoModel, AutoModelForImageTextToText

    return (
        AutoModelForImageTextToText if model_cls.__name__.endswith("ForConditionalGeneration") else AutoModel
    )


def tiny_qwen3vl(seed: int = 0, **overrides: Any) -> Any:
    """A random ``transformers.Qwen3VLModel`` (base model, no LM head), fp32, eval mode, CPU.

    Config: :func:`tiny_qwen3vl_config` (``overrides`` go there). The same ``seed`` always gives the
    same weights (``torch.manual_seed(seed)`` inside a forked RNG, so the caller's RNG is not advanced).
    Pair it with :func:`tiny_qwen3vl_processor`.

    >>> import torch
    >>> a, b = tiny_qwen3vl(0), tiny_qwen3vl(0)
    >>> all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters())), a.training
    (True, False)
    """
    return _build(Qwen3VLModel, tiny_qwen3vl_config(**overrides), seed)


def tiny_qwen3vl_for_generation(seed: int = 0, **overrides: Any) -> Any:
    """``Qwen3VLForConditionalGeneration`` (base model + untied ``lm_head``) with the tiny config.

    For the generative baselines (triplet head answering left/middle/right, digit-logit scoring).

    >>> tuple(tiny_qwen3vl_for_generation().lm_head.weight.shape)  # [vocab, hidden]
    (512, 64)
    """
    return _build(Qwen3VLForConditionalGeneration, tiny_qwen3vl_config(**overrides), seed)


def tiny_qwen35(seed: int = 0, **overrides: Any) -> Any:
    """A random ``transformers.Qwen3_5Model`` (Qwen3.5 VLM base model), fp32, eval mode, CPU.

    Config: :func:`tiny_qwen35_config` (3 Gated-DeltaNet linear-attention layers + 1 full-attention
    layer). Deterministic in ``seed``. Pair it with :func:`tiny_qwen35_processor`.

    >>> from PIL import Image
    >>> proc, model = tiny_qwen35_processor(), tiny_qwen35()
    >>> turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a cat"}]}]
    >>> text = proc.apply_chat_template(turn, tokenize=False)
    >>> batch = proc(text=[text], images=[Image.new("RGB", (64, 64))], return_tensors="pt")
    >>> model(**batch).last_hidden_state.shape == (*batch["input_ids"].shape, 64)
    True
    """
    return _build(Qwen3_5Model, tiny_qwen35_config(**overrides), seed)


def tiny_qwen35_for_generation(seed: int = 0, **overrides: Any) -> Any:
    """``Qwen3_5ForConditionalGeneration`` with the tiny Qwen3.5 config.

    >>> type(tiny_qwen35_for_generation()).__name__, tuple(tiny_qwen35_for_generation().lm_head.weight.shape)
    ('Qwen3_5ForConditionalGeneration', (512, 64))
    """
    return _build(Qwen3_5ForConditionalGeneration, tiny_qwen35_config(**overrides), seed)
