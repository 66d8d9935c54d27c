"""MIE: the Multi-subject Interaction Evaluator (MIBE paper, section 3.2) on a Qwen3.5 / Qwen3-VL backbone.

One sequence per candidate image::

    <|im_start|>user\\n{instruction}\\n
    Reference 1: <|vision_start|><|image_pad|>...<|vision_end|>\\n
    ...                                           (one labelled block per reference, 1..8)
    Prompt: {prompt}\\n
    Generated image: <|vision_start|><|image_pad|>...<|vision_end|><|im_end|>\\n<|im_start|>assistant\\n

The final hidden state (post-norm) of the last token — always the same fixed token, the ``\\n`` after
``assistant`` — feeds two fp32 heads: the rank head (1 scalar, the score) and the diagnostic head (3
logits: existence, appearance, interaction). Sequences are right-padded, so a causal model reads the
same values whatever else is in the batch (the Gated-DeltaNet layers of Qwen3.5 are causal too).

The vision tower is frozen. Its output is computed once per distinct image in a call (images are
identified by content), so the references of a pair are encoded once and shared by both candidates:
the tower sees ``references + 2`` images per pair. An optional LRU cache keeps features across calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genmetrics.errors import InputError, WeightsUnavailableError

DIMENSIONS = ("existence", "appearance", "interaction")
MAX_REFERENCES = 8
MIN_REFERENCES = 1
TUNING_MODES = ("lora_layer", "layer_only")
CONFIG_NAME = "mie_config.json"
HEADS_NAME = "heads.safetensors"
ADAPTER_DIR = "adapter"
FORMAT_VERSION = 1

#: backbone aliases -> hub ids (Qwen3.5 VLMs; any Qwen3.5 or Qwen3-VL checkpoint id or folder also works)
BACKBONES: dict[str, str] = {
    "0.8b": "Qwen/Qwen3.5-0.8B",
    "2b": "Qwen/Qwen3.5-2B",
    "4b": "Qwen/Qwen3.5-4B",
    "qwen3.5-0.8b": "Qwen/Qwen3.5-0.8B",
    "qwen3.5-2b": "Qwen/Qwen3.5-2B",
    "qwen3.5-4b": "Qwen/Qwen3.5-4B",
}
#: tiny random backbones built in code (tests and smoke runs; scores are meaningless). ``tiny-qwen35`` is
#: ``genmetrics.testing.tiny_qwen35`` cut to 2 text layers (one Gated-DeltaNet, one full attention).
TINY_BACKBONES = ("tiny-qwen35", "tiny-qwen3vl")
TINY_QWEN35_TEXT = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}
DEFAULT_BACKBONE = "4b"

DEFAULT_INSTRUCTION = (
    "You are given reference images of several subjects, a prompt and a generated image. "
    "Judge whether every subject is present (existence), looks like its reference (appearance), "
    "and does what the prompt says (interaction)."
)


@dataclass
class MIEOutput:
    """``score`` [B] (rank-head scalar, higher = better binding) and ``diagnostics`` [B,3] logits
    (existence, appearance, interaction; > 0 means "passes"). Both fp32."""

    score: torch.Tensor
    diagnostics: torch.Tensor

    @property
    def probabilities(self) -> torch.Tensor:
        """``sigmoid(diagnostics)``: per-dimension probability of passing."""
        return torch.sigmoid(self.diagnostics)

    def __len__(self) -> int:
        return int(self.score.shape[0])


@dataclass
class _Image:
    key: str
    grid: torch.Tensor  # [3] (t, h, w) in patches
    n_tokens: int


@dataclass
class _Sequence:
    ids: list[int]
    image_keys: list[str]
    truncated: bool = False

    @property
    def cost(self) -> int:
        return len(self.ids)


@dataclass
class MIEBatch:
    """Tokenised sequences plus the vision features they need (built by :meth:`MIEModel.prepare`)."""

    sequences: list[_Sequence]
    images: dict[str, _Image]
    features: dict[str, tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def truncated(self) -> list[bool]:
        return [s.truncated for s in self.sequences]


def resolve_backbone_name(name: str) -> str:
    """Alias (``"0.8b"``, ``"2b"``, ``"4b"``, ``"qwen3.5-4b"``) -> hub id; anything else unchanged."""
    return BACKBONES.get(str(name).lower(), str(name))


def build_backbone(name: str, *, device: Any = None, dtype: Any = None) -> tuple[nn.Module, Any]:
    """``(vlm, processor)`` for a backbone alias, hub id or local folder (see :data:`BACKBONES`), or a
    tiny random one (:data:`TINY_BACKBONES`, seed 0, for tests)."""
    if name in TINY_BACKBONES:
        from genmetrics import testing

        if name == "tiny-qwen35":
            model, proc = tiny_backbone(0), testing.tiny_qwen35_processor()
        else:
            model, proc = testing.tiny_qwen3vl(0), testing.tiny_qwen3vl_processor()
        if device is not None:
            model = model.to(device)
        return model, proc
    from genmetrics.backbones.hf import load_vlm

    return load_vlm(resolve_backbone_name(name), dtype=dtype, device=device)


def tiny_backbone(seed: int = 0) -> nn.Module:
    """The ``tiny-qwen35`` backbone: a random 2-layer Qwen3.5 VLM (fast enough for CPU tests)."""
    from genmetrics import testing

    return testing.tiny_qwen35(seed, text_config=dict(TINY_QWEN35_TEXT))


def _core_vlm(backbone: nn.Module) -> nn.Module:
    """The base VLM (``.visual`` + ``.language_model``) inside a model or a ``*ForConditionalGeneration``."""
    m = backbone
    for _ in range(3):
        if hasattr(m, "visual") and hasattr(m, "language_model"):
            return m
        inner = getattr(m, "model", None)
        if inner is None:
            break
        m = inner
    raise InputError(
        f"MIE needs a Qwen3.5 or Qwen3-VL vision-language model (with .visual and .language_model), got "
        f"{type(backbone).__name__}; load one with genmetrics.backbones.hf.load_vlm or pass backbone='4b'"
    )


def image_key(im: Any) -> str:
    """Content hash of an RGB PIL image (size + pixels)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{im.size[0]}x{im.size[1]}:{im.mode}".encode())
    h.update(im.tobytes())
    return h.hexdigest()


class MIEModel(nn.Module):
    """Dual-head MIE evaluator.

    Args:
        backbone: a Qwen3.5 (``Qwen3_5Model`` / ``Qwen3_5ForConditionalGeneration``) or Qwen3-VL model.
        processor: its ``Qwen3VLProcessor`` (tokenizer + image processor).
        tuning: ``"lora_layer"`` — LoRA (r, alpha, dropout) on every linear layer of the language tower
            except the last ``last_k`` decoder layers, which train fully, plus the heads;
            ``"layer_only"`` — the last ``last_k`` decoder layers and the heads, no LoRA. When
            ``last_k > 0`` the final norm of the language tower trains with the last layers. The vision
            tower and the token embeddings never train. ``None``: no adapter, everything but the heads
            frozen (inference with untrained or externally loaded heads).
        last_k: number of final decoder layers trained fully (0 allowed).
        lora_r, lora_alpha, lora_dropout: LoRA settings (alpha defaults to 2r).
        instruction: the instruction text at the start of every sequence.
        max_length: context limit in tokens (default: the smaller of the tokenizer's
            ``model_max_length`` and the model's ``max_position_embeddings``). A prompt that does not fit
            is truncated by the tokenizer (with a warning) so the candidate image and the read-out token
            always survive; ``truncate_prompt=False`` makes it an error instead.
        token_budget: padded tokens per forward batch (``batch * longest sequence``).
        max_batch_size: optional cap on sequences per forward batch.
        vision_cache_size: images whose vision features are kept across calls (LRU; 0 = off). Within one
            call every distinct image is always encoded once.
        backbone_name: how to rebuild the backbone when loading a saved checkpoint (hub id, folder or
            alias); defaults to the model config's ``_name_or_path``.
    """

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        *,
        tuning: str | None = "lora_layer",
        last_k: int = 2,
        lora_r: int = 16,
        lora_alpha: int | None = None,
        lora_dropout: float = 0.05,
        instruction: str = DEFAULT_INSTRUCTION,
        max_length: int | None = None,
        truncate_prompt: bool = True,
        token_budget: int = 16384,
        max_batch_size: int | None = None,
        vision_cache_size: int = 0,
        max_references: int = MAX_REFERENCES,
        backbone_name: str | None = None,
        _adapter_path: str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        if processor is None or not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
            raise InputError("MIE needs the backbone's processor (with .tokenizer and .image_processor); "
                             "load both with genmetrics.backbones.hf.load_vlm")
        if tuning is not None and tuning not in TUNING_MODES:
            raise InputError(f"tuning={tuning!r} is not supported; expected one of {TUNING_MODES} or None")
        vlm = _core_vlm(backbone)
        n_layers = len(vlm.language_model.layers)
        if not isinstance(last_k, int) or isinstance(last_k, bool) or not 0 <= last_k <= n_layers:
            raise InputError(f"last_k must be an integer in 0..{n_layers} (the language tower's layers), got {last_k!r}")
        if tuning == "lora_layer" and last_k == n_layers:
            raise InputError(f"tuning='lora_layer' with last_k={last_k} trains all {n_layers} language layers fully and "
                             "leaves none for LoRA; use a smaller last_k or tuning='layer_only'")
        if not 1 <= int(max_references) <= 64:
            raise InputError(f"max_references must be in 1..64, got {max_references!r}")
        if token_budget < 1:
            raise InputError(f"token_budget must be >= 1, got {token_budget}")
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tuning = tuning
        self.last_k = int(last_k) if tuning is not None else 0
        self.lora = {"r": int(lora_r), "alpha": int(2 * lora_r if lora_alpha is None else lora_alpha),
                     "dropout": float(lora_dropout)}
        self.instruction = instruction
        self.truncate_prompt = truncate_prompt
        self.token_budget = int(token_budget)
        self.max_batch_size = max_batch_size
        self.max_references = int(max_references)
        self.vision_cache_size = int(vision_cache_size)
        self._vision_cache: OrderedDict[str, tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]] = OrderedDict()
        #: counters: ``images_encoded`` (images through the vision tower), ``vision_calls`` (tower calls)
        self.stats = {"images_encoded": 0, "vision_calls": 0, "sequences": 0, "forward_batches": 0}
        cfg = vlm.config
        self.backbone_name = backbone_name or getattr(cfg, "_name_or_path", "") or ""
        text_cfg = getattr(cfg, "text_config", cfg)
        self.hidden_size = int(text_cfg.hidden_size)
        self.merge = int(cfg.vision_config.spatial_merge_size)
        self.image_token_id = int(cfg.image_token_id)
        self._vs_id = int(getattr(cfg, "vision_start_token_id", None) or self.tokenizer.convert_tokens_to_ids("<|vision_start|>"))
        self._ve_id = int(getattr(cfg, "vision_end_token_id", None) or self.tokenizer.convert_tokens_to_ids("<|vision_end|>"))
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None and pad != self.image_token_id else 0)
        tok_max = getattr(self.tokenizer, "model_max_length", None) or 10**9
        pos_max = getattr(text_cfg, "max_position_embeddings", None) or 10**9
        self.max_length = int(max_length if max_length is not None else min(tok_max if tok_max < 10**8 else 10**9, pos_max))
        self._deepstack = bool(getattr(cfg.vision_config, "deepstack_visual_indexes", None))
        self._segments: dict[str, list[int]] = {}

        # The backbone's own parameters are frozen first; the tuning mode unfreezes what it trains.
        vlm.requires_grad_(False)
        self.__dict__["_peft"] = None  # the peft wrapper around self.vlm (not a submodule: same parameters)
        if tuning == "lora_layer":
            if _adapter_path is not None:
                from genmetrics.backbones.hf import load_peft_adapter

                self.__dict__["_peft"] = load_peft_adapter(vlm, _adapter_path, is_trainable=True)
            else:
                from genmetrics.backbones.hf import add_lora

                exclude = r".*visual.*"
                if self.last_k:
                    tail = "|".join(str(i) for i in range(n_layers - self.last_k, n_layers))
                    exclude += rf"|.*language_model\.layers\.({tail})\..*"
                self.__dict__["_peft"] = add_lora(vlm, r=self.lora["r"], alpha=self.lora["alpha"],
                                                  dropout=self.lora["dropout"], exclude_modules=exclude)
            for n, p in vlm.named_parameters():
                p.requires_grad_("lora_" in n and "visual" not in n)
        self.vlm = vlm
        for n in self.full_layer_names():
            self.vlm.get_parameter(n).requires_grad_(True)

        self.rank_head = nn.Linear(self.hidden_size, 1, dtype=torch.float32)
        self.diag_head = nn.Linear(self.hidden_size, len(DIMENSIONS), dtype=torch.float32)
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            for head in (self.rank_head, self.diag_head):
                head.weight.copy_(torch.randn(head.weight.shape, generator=g) * 0.02)
                head.bias.zero_()
        dev = next(vlm.parameters()).device
        self.rank_head.to(dev)
        self.diag_head.to(dev)

    # ------------------------------------------------------------------ parameters
    def full_layer_names(self) -> list[str]:
        """Names (relative to ``self.vlm``) of the backbone parameters trained fully: the last ``last_k``
        decoder layers and, when ``last_k > 0``, the final norm."""
        if not self.last_k:
            return []
        n_layers = len(self.vlm.language_model.layers)
        prefixes = tuple(f"language_model.layers.{i}." for i in range(n_layers - self.last_k, n_layers))
        return [n for n, _ in self.vlm.named_parameters()
                if n.startswith(prefixes) or n.startswith("language_model.norm.")]

    def trainable_parameter_names(self) -> list[str]:
        """Names of the parameters with ``requires_grad`` (relative to this module)."""
        return [n for n, p in self.named_parameters() if p.requires_grad]

    def _apply(self, fn: Any, recurse: bool = True) -> MIEModel:  # heads stay fp32 whatever the backbone dtype
        super()._apply(fn, recurse)
        for head in (self.rank_head, self.diag_head):
            for p in head.parameters():
                if p.dtype != torch.float32:
                    p.data = p.data.float()
        return self

    @property
    def device(self) -> torch.device:
        return self.rank_head.weight.device

    # ------------------------------------------------------------------ inputs
    def _ids(self, text: str) -> list[int]:
        ids = self._segments.get(text)
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._segments) < 4096:
                self._segments[text] = ids
        return ids

    def _validate(self, references: Any, prompts: Any, candidates: Any) -> tuple[list[list[Any]], list[str], list[Any]]:
        return validate_inputs(references, prompts, candidates, max_references=self.max_references)

    def _image_entries(self, items: list[Any], names: list[str], images: dict[str, _Image],
                       pixels: dict[str, torch.Tensor]) -> list[str]:
        """PIL-convert, hash and preprocess images; returns their keys (new ones added to ``images``)."""
        from genmetrics.data.images import to_pil

        keys = []
        todo: list[tuple[str, Any]] = []
        for x, name in zip(items, names):
            im = to_pil(x, name=name)
            k = image_key(im)
            keys.append(k)
            if k not in images and all(k != t[0] for t in todo):
                todo.append((k, im))
        if todo:
            out = self.processor.image_processor(images=[im for _, im in todo], return_tensors="pt")
            grids = out["image_grid_thw"]
            sizes = grids.prod(-1).tolist()
            for (k, _), g, pv in zip(todo, grids, torch.split(out["pixel_values"], sizes)):
                images[k] = _Image(key=k, grid=g.clone(), n_tokens=int(g.prod()) // self.merge**2)
                pixels[k] = pv
        return keys

    def _image_block(self, img: _Image) -> list[int]:
        return [self._vs_id] + [self.image_token_id] * img.n_tokens + [self._ve_id]

    def _sequence(self, ref_keys: list[str], prompt: str, cand_key: str, images: dict[str, _Image], index: int) -> _Sequence:
        head = self._ids(f"<|im_start|>user\n{self.instruction}\n")
        ids = list(head)
        for j, k in enumerate(ref_keys):
            ids += self._ids(f"Reference {j + 1}: ") + self._image_block(images[k]) + self._ids("\n")
        ids += self._ids("Prompt: ")
        tail = self._ids("\n") + self._ids("Generated image: ") + self._image_block(images[cand_key]) + \
            self._ids("<|im_end|>\n<|im_start|>assistant\n")
        room = self.max_length - len(ids) - len(tail)
        if room < 1:
            raise InputError(
                f"sample {index}: the instruction and its {len(ref_keys) + 1} images take {len(ids) + len(tail)} tokens, "
                f"more than the context limit max_length={self.max_length}; use fewer or smaller images, or raise max_length"
            )
        p_ids = list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        truncated = False
        if len(p_ids) > room:
            if not self.truncate_prompt:
                raise InputError(f"prompts[{index}]: {len(p_ids)} tokens do not fit the {room} tokens left in the context "
                                 f"(max_length={self.max_length}); shorten it or pass truncate_prompt=True")
            # Truncated by the tokenizer (never by slicing ids of the whole sequence); the candidate image
            # and the read-out token come after the prompt, so they always survive.
            p_ids = list(self.tokenizer(prompt, add_special_tokens=False, truncation=True, max_length=room)["input_ids"])
            truncated = True
            warnings.warn(f"MIE: prompt {index} has more tokens than fit the context ({self.max_length}); "
                          f"truncated to {room} tokens", stacklevel=4)
        ids += p_ids + tail
        return _Sequence(ids=ids, image_keys=list(ref_keys) + [cand_key], truncated=truncated)

    def prepare(self, references: Any, prompts: Any, candidates: Any, *, _batch: MIEBatch | None = None,
                _pixels: dict[str, torch.Tensor] | None = None, _encode: bool = True) -> MIEBatch:
        """Validate, tokenise and preprocess (no model call). Appends to ``_batch`` when given."""
        refs, texts, cands = self._validate(references, prompts, candidates)
        batch = _batch if _batch is not None else MIEBatch(sequences=[], images={})
        pixels = _pixels if _pixels is not None else {}
        start = len(batch.sequences)
        for i, (r, p, c) in enumerate(zip(refs, texts, cands)):
            ref_keys = self._image_entries(r, [f"references[{i}][{j}]" for j in range(len(r))], batch.images, pixels)
            (cand_key,) = self._image_entries([c], [f"candidates[{i}]"], batch.images, pixels)
            batch.sequences.append(self._sequence(ref_keys, p, cand_key, batch.images, start + i))
        if _encode:
            self._encode(batch, pixels)
        return batch

    def prepare_pairs(self, references: Any, prompts: Any, candidates_a: Any, candidates_b: Any) -> MIEBatch:
        """Sequences ``[a_0..a_{n-1}, b_0..b_{n-1}]`` for n pairs sharing references and prompt; each
        distinct reference image goes through the vision tower once."""
        pixels: dict[str, torch.Tensor] = {}
        batch = self.prepare(references, prompts, candidates_a, _pixels=pixels, _encode=False)
        batch = self.prepare(references, prompts, candidates_b, _batch=batch, _pixels=pixels, _encode=False)
        self._encode(batch, pixels)
        return batch

    # ------------------------------------------------------------------ vision
    @torch.no_grad()
    def _encode(self, batch: MIEBatch, pixels: dict[str, torch.Tensor]) -> None:
        from genmetrics.data.batching import map_batches

        need = []
        for k in batch.images:
            if k in batch.features:
                continue
            hit = self._vision_cache.get(k)
            if hit is not None:
                self._vision_cache.move_to_end(k)
                batch.features[k] = hit
            else:
                need.append(k)
        if not need:
            return
        dev = self.device
        vis_dtype = next(self.vlm.visual.parameters()).dtype
        budget = max(self.token_budget * self.merge**2, 1)
        chunks: list[list[str]] = [[]]
        used = 0
        for k in need:
            n = int(batch.images[k].grid.prod())
            if chunks[-1] and used + n > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(k)
            used += n

        def run(keys: list[str]) -> None:
            pv = torch.cat([pixels[k] for k in keys]).to(dev, vis_dtype)
            grid = torch.stack([batch.images[k].grid for k in keys]).to(dev)
            out = self.vlm.get_image_features(pv, grid, return_dict=True)
            self.stats["vision_calls"] += 1
            self.stats["images_encoded"] += len(keys)
            self._vision_output_cls = type(out)
            deep = getattr(out, "deepstack_features", None) if self._deepstack else None
            for i, k in enumerate(keys):
                feat = (out.pooler_output[i].detach(), tuple(d[i].detach() for d in deep) if deep else None)
                batch.features[k] = feat
                if self.vision_cache_size > 0:
                    self._vision_cache[k] = feat
                    self._vision_cache.move_to_end(k)
                    while len(self._vision_cache) > self.vision_cache_size:
                        self._vision_cache.popitem(last=False)

        for chunk in chunks:
            map_batches(lambda sl, c=chunk: run(c[sl]), len(chunk), len(chunk))

    def clear_vision_cache(self) -> None:
        self._vision_cache.clear()

    # ------------------------------------------------------------------ forward
    def _mm_outputs(self, keys: list[str], feats: dict[str, Any], dtype: torch.dtype) -> Any:
        pooled = tuple(feats[k][0].to(self.device, dtype) for k in keys)
        cls = getattr(self, "_vision_output_cls", None)
        if self._deepstack:
            levels = len(feats[keys[0]][1])
            deep = [tuple(feats[k][1][lvl].to(self.device, dtype) for k in keys) for lvl in range(levels)]
            if cls is None:
                from transformers.models.qwen3_vl.modeling_qwen3_vl import (
                    BaseModelOutputWithDeepstackFeatures as cls,
                )
            return cls(pooler_output=pooled, deepstack_features=deep)
        if cls is None:
            from transformers.modeling_outputs import BaseModelOutputWithPooling as cls
        return cls(pooler_output=pooled)

    def _forward_rows(self, batch: MIEBatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [batch.sequences[r] for r in rows]
        dev = self.device
        length = max(s.cost for s in seqs)
        ids = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : s.cost] = torch.tensor(s.ids, dtype=torch.long)
            mask[i, : s.cost] = 1
        mm_types = (ids == self.image_token_id).to(torch.int32)
        keys = [k for s in seqs for k in s.image_keys]
        grid = torch.stack([batch.images[k].grid for k in keys])
        emb_dtype = self.vlm.get_input_embeddings().weight.dtype
        out = self.vlm(
            input_ids=ids.to(dev), attention_mask=mask.to(dev), mm_token_type_ids=mm_types.to(dev),
            image_grid_thw=grid.to(dev), mm_encoder_outputs={"image": self._mm_outputs(keys, batch.features, emb_dtype)},
            use_cache=False,
        )
        last = torch.tensor([s.cost - 1 for s in seqs], device=dev)
        h = out.last_hidden_state[torch.arange(len(seqs), device=dev), last]
        self.stats["forward_batches"] += 1
        self.stats["sequences"] += len(seqs)
        with torch.autocast(device_type=dev.type, enabled=False):
            h = h.float()
            return self.rank_head(h).squeeze(-1), self.diag_head(h)

    def forward(self, batch: MIEBatch) -> MIEOutput:
        """Score every sequence of a prepared batch (differentiable w.r.t. the trainable parameters).

        Sequences are grouped into token-budget batches (``token_budget`` padded tokens each); the
        outputs come back in input order. CUDA out-of-memory halves a group and retries."""
        from genmetrics.data.batching import map_batches, token_budget_batches

        n = len(batch.sequences)
        if n == 0:
            raise InputError("nothing to score: the batch is empty")
        groups = token_budget_batches([s.cost for s in batch.sequences], self.token_budget,
                                      max_batch_size=self.max_batch_size)
        score = [None] * n
        diag = [None] * n
        for g in groups:
            parts = map_batches(lambda sl, g=g: (g[sl], self._forward_rows(batch, g[sl])), len(g), len(g))
            for rows, (s, d) in parts:
                for j, r in enumerate(rows):
                    score[r], diag[r] = s[j], d[j]
        return MIEOutput(score=torch.stack(score), diagnostics=torch.stack(diag))

    def score(self, references: Any, prompts: Any, candidates: Any) -> MIEOutput:
        """Score candidates: ``references`` list[list[image]] (1..8 per sample), ``prompts`` list[str]
        (or one str for all), ``candidates`` list[image]. Returns :class:`MIEOutput` with ``score`` [B]
        and ``diagnostics`` [B,3] (fp32, on the model's device). No gradients."""
        with torch.no_grad():
            batch = self.prepare(references, prompts, candidates)
            return self.forward(batch)

    def score_pairs(self, references: Any, prompts: Any, candidates_a: Any, candidates_b: Any) -> tuple[MIEOutput, MIEOutput]:
        """Score both candidates of n pairs; the references of a pair are encoded once."""
        with torch.no_grad():
            batch = self.prepare_pairs(references, prompts, candidates_a, candidates_b)
            out = self.forward(batch)
        n = len(out) // 2
        return (MIEOutput(out.score[:n], out.diagnostics[:n]), MIEOutput(out.score[n:], out.diagnostics[n:]))

    # ------------------------------------------------------------------ save / load
    def config_dict(self) -> dict[str, Any]:
        return {
            "format": "genmetrics-mie", "version": FORMAT_VERSION, "backbone": self.backbone_name,
            "tuning": self.tuning, "last_k": self.last_k, "lora": self.lora, "instruction": self.instruction,
            "hidden_size": self.hidden_size, "dimensions": list(DIMENSIONS), "max_references": self.max_references,
            "max_length": self.max_length,
        }

    def trained_state_dict(self) -> dict[str, torch.Tensor]:
        """The heads and the fully trained backbone layers (not the LoRA adapter, which peft saves)."""
        sd = {f"rank_head.{k}": v for k, v in self.rank_head.state_dict().items()}
        sd.update({f"diag_head.{k}": v for k, v in self.diag_head.state_dict().items()})
        for n in self.full_layer_names():
            sd[f"backbone.{n}"] = self.vlm.get_parameter(n)
        return {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}

    def load_trained_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        expected = set(self.trained_state_dict())
        got = set(sd)
        if got != expected:
            missing, extra = sorted(expected - got)[:5], sorted(got - expected)[:5]
            raise WeightsUnavailableError(
                f"MIE heads checkpoint does not match this model (missing {missing}, unexpected {extra}); was it "
                f"trained with another tuning mode, last_k or backbone? This model: tuning={self.tuning}, last_k={self.last_k}"
            )
        with torch.no_grad():
            for k, v in sd.items():
                if k.startswith("backbone."):
                    p = self.vlm.get_parameter(k[len("backbone."):])
                else:
                    head, _, attr = k.partition(".")
                    p = getattr(getattr(self, head), attr)
                if p.shape != v.shape:
                    raise WeightsUnavailableError(f"MIE checkpoint tensor {k} has shape {tuple(v.shape)}, the model "
                                                  f"expects {tuple(p.shape)}; the checkpoint is for another backbone")
                p.copy_(v.to(p.device, p.dtype))

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        if self._peft is None:
            return {}
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu() for k, v in get_peft_model_state_dict(self._peft).items()}

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write ``mie_config.json``, ``heads.safetensors`` (heads + fully trained layers) and, for
        ``lora_layer``, the peft adapter in ``adapter/``. Reload with :meth:`from_pretrained`."""
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        save_file(self.trained_state_dict(), str(out / HEADS_NAME), metadata={"format": "genmetrics-mie"})
        if self._peft is not None:
            self._peft.save_pretrained(str(out / ADAPTER_DIR), safe_serialization=True)
        tmp = out / (CONFIG_NAME + ".tmp")
        tmp.write_text(json.dumps(self.config_dict(), indent=2), encoding="utf-8")
        os.replace(tmp, out / CONFIG_NAME)
        return out

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | os.PathLike,
        backbone: nn.Module | None = None,
        processor: Any = None,
        *,
        device: Any = None,
        dtype: Any = None,
        **overrides: Any,
    ) -> MIEModel:
        """Load a checkpoint written by :meth:`save_pretrained` (a folder or a hub id). Without
        ``backbone`` the backbone named in the checkpoint is loaded (weights policy of DESIGN section 7)."""
        folder = resolve_heads(path_or_id)
        cfg = read_config(folder)
        if backbone is None:
            name = cfg.get("backbone") or ""
            if not name:
                raise WeightsUnavailableError(
                    f"MIE checkpoint {str(path_or_id)!r} does not name its backbone; pass backbone= and processor=")
            backbone, processor = build_backbone(name, device=device, dtype=dtype)
        elif processor is None:
            raise InputError("from_pretrained: pass the processor together with the backbone")
        tuning = cfg["tuning"]
        adapter = folder / ADAPTER_DIR if tuning == "lora_layer" else None
        if adapter is not None and not (adapter / "adapter_config.json").is_file():
            raise WeightsUnavailableError(f"MIE checkpoint {str(folder)!r} is lora_layer but has no {ADAPTER_DIR}/adapter_config.json; "
                                          "re-save it with MIEModel.save_pretrained")
        kwargs = dict(tuning=tuning, last_k=int(cfg["last_k"]), lora_r=cfg["lora"]["r"], lora_alpha=cfg["lora"]["alpha"],
                      lora_dropout=cfg["lora"]["dropout"], instruction=cfg["instruction"],
                      max_references=int(cfg.get("max_references", MAX_REFERENCES)),
                      backbone_name=cfg.get("backbone") or None)
        kwargs.update(overrides)
        model = cls(backbone, processor, _adapter_path=adapter, **kwargs)
        from genmetrics.backbones.weights import load_state_dict

        model.load_trained_state_dict(load_state_dict(folder / HEADS_NAME))
        if device is not None:
            model.to(device)
        return model.eval()


def validate_inputs(
    references: Any, prompts: Any, candidates: Any, *, max_references: int = MAX_REFERENCES
) -> tuple[list[list[Any]], list[str], list[Any]]:
    """Check MIE inputs without loading anything heavy: ``references`` one list of 1..``max_references``
    images per candidate, one prompt per candidate (or one for all), no missing candidate, files exist.
    Returns ``(references, prompts, candidates)`` as plain lists; bad input is an ``InputError``."""
    from genmetrics.data.images import as_image_list
    from genmetrics.metric import as_text_list

    if candidates is None:
        raise InputError("candidates: missing; MIE scores one generated image per sample")
    cands = as_image_list(candidates, name="candidates")
    if not cands:
        raise InputError("candidates: empty; pass at least one generated image")
    for i, c in enumerate(cands):
        _check_image(c, f"candidates[{i}]", "every sample needs a generated image")
    n = len(cands)
    if references is None:
        raise InputError(f"references: missing; MIE needs {MIN_REFERENCES} to {max_references} reference images per sample")
    if isinstance(references, (torch.Tensor, str, bytes, os.PathLike)) or not isinstance(references, Sequence):
        raise InputError("references: expected a list with one list of reference images per sample "
                         f"(list[list[image]]), got {type(references).__name__}")
    refs = list(references)
    if len(refs) != n:
        raise InputError(f"references: got {len(refs)} reference sets for {n} candidates; pass one list of "
                         "reference images per candidate")
    out_refs: list[list[Any]] = []
    for i, r in enumerate(refs):
        if r is None:
            raise InputError(f"references[{i}] is missing; MIE needs {MIN_REFERENCES} to {max_references} reference "
                             "images per sample")
        items = as_image_list(r, name=f"references[{i}]")
        if not MIN_REFERENCES <= len(items) <= max_references:
            raise InputError(f"references[{i}]: got {len(items)} reference images; MIE takes {MIN_REFERENCES} to "
                             f"{max_references} per sample (the paper uses 2, 4, 6, 8)")
        for j, x in enumerate(items):
            _check_image(x, f"references[{i}][{j}]", "remove it or give the image")
        out_refs.append(items)
    if prompts is None:
        raise InputError("prompts (condition): missing; MIE needs the generation prompt of every sample")
    texts = as_text_list(prompts, name="condition")
    if len(texts) == 1 and n > 1:
        texts = texts * n
    if len(texts) != n:
        raise InputError(f"condition: got {len(texts)} prompts for {n} candidates; pass one prompt per candidate "
                         "(or one for all)")
    return out_refs, texts, cands


def _check_image(x: Any, name: str, fix: str) -> None:
    if x is None:
        raise InputError(f"{name} is missing (None); {fix}")
    if isinstance(x, (str, os.PathLike)):
        p = Path(x)
        if not p.is_file():
            raise InputError(f"{name}: image file {str(p)!r} does not exist; check the path")
    elif isinstance(x, (list, tuple, dict)):
        raise InputError(f"{name}: expected one image (path, PIL image or tensor [3,H,W]), got a {type(x).__name__}")


def read_config(folder: Path) -> dict[str, Any]:
    p = folder / CONFIG_NAME
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise WeightsUnavailableError(f"MIE checkpoint {str(folder)!r}: cannot read {CONFIG_NAME} ({e})") from None
    if cfg.get("format") != "genmetrics-mie" or int(cfg.get("version", 0)) > FORMAT_VERSION:
        raise WeightsUnavailableError(f"{str(p)!r} is not a genmetrics MIE checkpoint of a known version")
    return cfg


_TRAIN_HINT = (
    "Train heads with `genmetrics train mie --data silver.jsonl --out DIR` (see docs/mie.md), then pass "
    "heads=DIR (Python) or --heads DIR (command line); a hub id of a published MIE checkpoint also works."
)


def resolve_heads(path_or_id: str | os.PathLike) -> Path:
    """A local checkpoint folder (holding ``mie_config.json``) or a hub id -> local folder."""
    from genmetrics.backbones.weights import offline, weights_unavailable

    s = os.fspath(path_or_id)
    p = Path(s).expanduser()
    if p.exists():
        if p.is_dir() and (p / CONFIG_NAME).is_file():
            return p
        raise WeightsUnavailableError(
            f"MIE heads {s!r}: expected a folder holding {CONFIG_NAME}, {HEADS_NAME} (written by `genmetrics train mie` "
            f"or MIEModel.save_pretrained). {_TRAIN_HINT}")
    if not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", s) or s.startswith((".", "/", "~")):
        raise WeightsUnavailableError(f"MIE heads {s!r}: no such folder. {_TRAIN_HINT}")
    from genmetrics.backbones.hf import hf_cache_dir

    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s, cache_dir=str(hf_cache_dir()), local_files_only=offline()))
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear error
        err = weights_unavailable(f"MIE heads {s}", [str(hf_cache_dir()), "the Hugging Face Hub"], "heads=", e)
        raise WeightsUnavailableError(f"{err} {_TRAIN_HINT}") from None


def no_heads_error() -> WeightsUnavailableError:
    return WeightsUnavailableError(
        "the mie metric needs trained heads (rank + diagnostic heads and their adapter); none are bundled. "
        + _TRAIN_HINT
    )


def mie_loss(
    win: MIEOutput,
    lose: MIEOutput,
    diag_targets_win: torch.Tensor | None = None,
    diag_targets_lose: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    diag_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``alpha * L_rank + beta * L_diag``.

    ``L_rank = mean(-log sigmoid(s_w - s_l))`` (Bradley-Terry over the two candidates of each pair);
    ``L_diag`` = binary cross-entropy of the diagnostic logits of both candidates against soft labels
    in [0, 1], averaged over the pairs that have labels (``diag_mask`` [n] bool; all when None).
    Returns ``(loss, {"rank": ..., "diag": ...})``.
    """
    import torch.nn.functional as F

    rank = -F.logsigmoid(win.score - lose.score).mean()
    diag = rank.new_zeros(())
    if beta and diag_targets_win is not None and diag_targets_lose is not None:
        m = torch.ones(win.score.shape[0], dtype=torch.bool, device=win.score.device) if diag_mask is None else diag_mask.to(win.score.device)
        if bool(m.any()):
            logits = torch.cat([win.diagnostics[m], lose.diagnostics[m]])
            target = torch.cat([diag_targets_win[m], diag_targets_lose[m]]).to(logits)
            diag = F.binary_cross_entropy_with_logits(logits, target)
    loss = alpha * rank + beta * diag
    return loss, {"rank": float(rank.detach()), "diag": float(diag.detach()), "loss": float(loss.detach())}
