"""MIE: the Multi-subject Interaction Evaluator (MIBE paper, section 3.2 and Appendix E) on Qwen3.5 / Qwen3-VL.

The evaluator the paper's numbers came from (the authors' ``mie/model.py`` and ``MIE_Inference``):

* one chat turn per candidate, rendered with the processor's chat template (no generation prompt):
  the reference images first, the candidate last, then the text :data:`PROMPT_TEMPLATE`; the text is
  tokenised as a whole, exactly as the processor does it (the ids equal ``processor(text, images)``);
* the final hidden state (post-norm) of the last valid token feeds two fp32 heads, each
  ``Linear(h, h/2) -> GELU -> Linear(h/2, n)``: ``score_head`` (n = 1, the score) and
  ``classification_head`` (n = 3 logits: existence, appearance, interaction);
* tuning modes: ``layer_only`` (the heads + the top ``unfreeze_layers`` = 4 language layers) and
  ``lora_layer`` (LoRA r 16, alpha 32, dropout 0 on the attention and MLP projections of the vision and
  the language towers, plus the top 4 language layers); ``None`` trains the heads only.

Reference vision features are computed once per pair and shared by its two candidates (the vision
tower is the same for both), also while training. Sequences of equal length are batched without
padding (the two candidates of a pair have equal length when their images have the same size), so a
forward never computes padding. :meth:`MIEModel.score` runs in eval mode whatever mode the model was in.
Checkpoints (genmetrics' format and the authors' layout) are read and written by
:mod:`genmetrics.mie.checkpoint`.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from peft import LoraConfig, inject_adapter_in_model
from PIL import Image
from torch import nn

from genmetrics.backbones.hf import quiet_peft
from genmetrics.backbones.qwen_vl import (
    VisionCache,
    VisionFeatures,
    core_vlm,
    feature_scope,
    image_key,
    mm_encoder_outputs,
)
from genmetrics.core.metric import as_text_list
from genmetrics.data.io.batching import map_batches
from genmetrics.data.io.images import as_image_list, to_pil
from genmetrics.errors import InputError
from genmetrics.mie.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from genmetrics.mie.common import (
    BACKBONES,
    DEFAULT_BACKBONE,
    DEFAULT_TUNING,
    DIMENSIONS,
    IMAGE_SIZE,
    LORA_DEFAULTS,
    LORA_TARGETS,
    MAX_REFERENCES,
    MIN_REFERENCES,
    PROMPT_TEMPLATE,
    TUNING_MODES,
    UNFREEZE_LAYERS,
    build_backbone,
    canonical_name,
    image_size_option,
    resolve_backbone_name,
)

__all__ = [
    "BACKBONES",
    "DEFAULT_BACKBONE",
    "DEFAULT_TUNING",
    "DIMENSIONS",
    "IMAGE_SIZE",
    "LORA_DEFAULTS",
    "LORA_TARGETS",
    "MAX_REFERENCES",
    "MIN_REFERENCES",
    "PROMPT_TEMPLATE",
    "TUNING_MODES",
    "UNFREEZE_LAYERS",
    "MIEBatch",
    "MIEModel",
    "MIEOutput",
    "build_backbone",
    "canonical_name",
    "fit_image",
    "resolve_backbone_name",
    "validate_inputs",
]


@dataclass
class MIEOutput:
    """``score`` [B] (score-head scalar, higher = better) and ``diagnostics`` [B,3] logits (existence,
    appearance, interaction; > 0 means "passes"). Both fp32.

    >>> out = MIEOutput(score=torch.tensor([0.7]), diagnostics=torch.tensor([[0.0, 2.0, -2.0]]))
    >>> len(out), [round(p, 4) for p in out.probabilities[0].tolist()]
    (1, [0.5, 0.8808, 0.1192])
    """

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
    ids: torch.Tensor  # [L] long
    image_keys: list[str]

    @property
    def cost(self) -> int:
        return int(self.ids.numel())


@dataclass
class MIEBatch:
    """Tokenised sequences plus the vision features they need (built by :meth:`MIEModel.prepare`).

    Two samples that share their two references need three distinct images, not four:

    >>> from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> refs, cands = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> batch = model.prepare([list(refs), list(refs)], ["a cat and a dog", "two friends"], [cands[0], cands[0]])
    >>> len(batch), len(batch.images)
    (2, 3)
    """

    sequences: list[_Sequence]
    images: dict[str, _Image]
    pixels: dict[str, torch.Tensor] = field(default_factory=dict)
    features: dict[str, VisionFeatures] = field(default_factory=dict)
    #: the key of each image file already in the batch, by path: a file named again is not decoded again
    keys_by_path: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sequences)


def fit_image(im: Any, size: int | None) -> Any:
    """Downscale so the longer side is at most ``size`` px, aspect ratio kept (``None``: unchanged).

    >>> from PIL import Image
    >>> fit_image(Image.new("RGB", (1000, 500)), 512).size, fit_image(Image.new("RGB", (100, 50)), 512).size
    ((512, 256), (100, 50))
    """
    if size is None or max(im.size) <= size:
        return im
    scale = size / max(im.size)
    return im.resize(
        (max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale))), Image.Resampling.BICUBIC
    )


class MIEModel(nn.Module):
    """The MIE evaluator: a Qwen3.5 / Qwen3-VL backbone, a score head and a diagnostic head.

    Args:
        backbone: a Qwen3.5 or Qwen3-VL model (base model or ``*ForConditionalGeneration``).
        processor: its ``Qwen3VLProcessor`` (tokenizer, image processor and chat template).
        tuning: ``"layer_only"`` (default, Appendix E), ``"lora_layer"`` or ``None`` (heads only). See the
            module docstring; the vision tower trains only through LoRA in ``lora_layer``.
        unfreeze_layers: top language layers trained fully (4 in the paper).
        lora_r, lora_alpha, lora_dropout: LoRA settings of ``lora_layer`` (16, 32, 0.0).
        lora_target_modules: the linear layers that get LoRA (a pattern over module names, or a list).
        prompt_template: the text after the images; ``{prompt}`` is replaced by the generation prompt.
        image_size: images are downscaled so their longer side is at most this many px (aspect kept), then
            resized by the processor (multiples of 32). ``None``: the processor's resizing only (its own pixel
            budget), as the authors' code scores and trains; a checkpoint in the authors' layout loads with
            ``None``. Saved with the checkpoint and read back.
        max_length: context limit in tokens; a longer sample is an error naming it (the authors never
            truncate: cutting image tokens would break the image/feature alignment).
        token_budget: tokens per forward batch (sequences of equal length are batched, without padding).
        vision_cache_size: images whose vision features are kept across calls in eval mode (LRU; 0 = off).
            Within one call every distinct image is always encoded once.
        backbone_name: how to rebuild the backbone when loading a saved checkpoint.

    On the tiny random Qwen3.5 (untrained heads: the numbers mean nothing, the shapes and the round trip
    do); scoring is deterministic, and a saved checkpoint loads back to the same scores:

    >>> import tempfile
    >>> from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor
    >>> proc = tiny_qwen35_processor()
    >>> model = MIEModel(tiny_qwen35(), proc, unfreeze_layers=1).eval()
    >>> refs, cands = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> args = ([list(refs), [refs[0]]], ["a cat and a dog", "a cat"], cands)  # 2 and 1 reference images
    >>> out = model.score(*args)
    >>> tuple(out.score.shape), tuple(out.diagnostics.shape), torch.equal(out.score, model.score(*args).score)
    ((2,), (2, 3), True)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = model.save_pretrained(d)
    ...     again = MIEModel.from_pretrained(d, tiny_qwen35(), proc)
    >>> torch.allclose(again.score(*args).score, out.score, atol=1e-6)
    True
    """

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        *,
        tuning: str | None = DEFAULT_TUNING,
        unfreeze_layers: int = UNFREEZE_LAYERS,
        lora_r: int = LORA_DEFAULTS["r"],
        lora_alpha: int = LORA_DEFAULTS["alpha"],
        lora_dropout: float = LORA_DEFAULTS["dropout"],
        prompt_template: str = PROMPT_TEMPLATE,
        image_size: int | None = IMAGE_SIZE,
        max_length: int | None = None,
        token_budget: int = 16384,
        max_batch_size: int | None = None,
        vision_cache_size: int = 0,
        max_references: int = MAX_REFERENCES,
        num_error_classes: int = len(DIMENSIONS),
        lora_target_modules: Any = LORA_TARGETS,
        backbone_name: str | None = None,
    ) -> None:
        super().__init__()
        if (
            processor is None
            or not hasattr(processor, "tokenizer")
            or not hasattr(processor, "image_processor")
        ):
            raise InputError(
                "MIE needs the backbone's processor (with .tokenizer and .image_processor); "
                "load both with genmetrics.backbones.hf.load_vlm"
            )
        if (
            getattr(processor, "chat_template", None) is None
            and getattr(processor.tokenizer, "chat_template", None) is None
        ):
            raise InputError(
                "MIE renders its input with the processor's chat template, and this processor has none; "
                "load the processor of a chat (instruct) checkpoint"
            )
        if tuning is not None and tuning not in TUNING_MODES:
            raise InputError(
                f"tuning={tuning!r} is not supported; expected one of {TUNING_MODES} or None (heads only)"
            )
        if "{prompt}" not in prompt_template:
            raise InputError(f"prompt_template must contain '{{prompt}}', got {prompt_template!r}")
        vlm = core_vlm(backbone, what="MIE backbone")
        n_layers = len(vlm.language_model.layers)
        if not isinstance(unfreeze_layers, int) or isinstance(unfreeze_layers, bool) or unfreeze_layers < 0:
            raise InputError(f"unfreeze_layers must be an integer >= 0, got {unfreeze_layers!r}")
        if not 1 <= int(max_references) <= 64:
            raise InputError(f"max_references must be in 1..64, got {max_references!r}")
        if token_budget < 1:
            raise InputError(f"token_budget must be >= 1, got {token_budget}")
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tuning = tuning
        # like the authors' unfreeze_last_layers: min(requested, available)
        self.unfreeze_layers = min(int(unfreeze_layers), n_layers) if tuning is not None else 0
        self.lora = {"r": int(lora_r), "alpha": int(lora_alpha), "dropout": float(lora_dropout)}
        self.prompt_template = prompt_template
        self.image_size = image_size_option(image_size)
        self.token_budget = int(token_budget)
        self.max_batch_size = max_batch_size
        self.max_references = int(max_references)
        self._vision_cache = VisionCache(max_items=int(vision_cache_size))
        self._texts: OrderedDict[tuple[int, str], list[int]] = OrderedDict()
        #: counters: ``images_encoded`` (images through the vision tower), ``vision_calls`` (tower calls)
        self.stats = {"images_encoded": 0, "vision_calls": 0, "sequences": 0, "forward_batches": 0}
        cfg = vlm.config
        self.backbone_name = backbone_name or getattr(cfg, "name_or_path", "") or ""
        text_cfg = getattr(cfg, "text_config", cfg)
        self.hidden_size = int(text_cfg.hidden_size)
        self.merge = int(cfg.vision_config.spatial_merge_size)
        self.image_token_id = int(cfg.image_token_id)
        tok_max = getattr(self.tokenizer, "model_max_length", None) or 10**9
        pos_max = getattr(text_cfg, "max_position_embeddings", None) or 10**9
        self.max_length = int(
            max_length if max_length is not None else min(tok_max if tok_max < 10**8 else 10**9, pos_max)
        )
        self._deepstack = bool(getattr(cfg.vision_config, "deepstack_visual_indexes", None))

        vlm.requires_grad_(False)
        self.vlm = vlm
        self.lora_target_modules = lora_target_modules
        #: what :meth:`from_pretrained` applied (tensor counts per file part)
        self.load_report: dict[str, Any] = {}
        if tuning == "lora_layer":
            self.add_lora(self.lora, lora_target_modules)
        for n in self.full_layer_names():
            self.vlm.get_parameter(n).requires_grad_(True)
        h = self.hidden_size
        self.score_head = nn.Sequential(nn.Linear(h, h // 2), nn.GELU(), nn.Linear(h // 2, 1)).float()
        self.classification_head = nn.Sequential(
            nn.Linear(h, h // 2), nn.GELU(), nn.Linear(h // 2, int(num_error_classes))
        ).float()
        dev = next(vlm.parameters()).device
        self.score_head.to(dev)
        self.classification_head.to(dev)

    # ------------------------------------------------------------------ parameters
    def add_lora(self, lora: dict[str, Any], target_modules: Any = LORA_TARGETS) -> int:
        """Inject LoRA layers (peft, adapter ``default``) into the backbone in place; returns how many
        linear layers got one. Only the ``lora_`` parameters train."""
        if isinstance(
            target_modules, str
        ):  # the structural pattern, narrowed to linear layers (as unsloth's)
            pattern = re.compile(target_modules)
            target_modules = [
                n
                for n, mod in self.vlm.named_modules()
                if isinstance(mod, nn.Linear) and pattern.fullmatch(n)
            ]
        if not target_modules:
            raise InputError(
                "LoRA: no linear layer of this backbone matches the attention / MLP projections of the "
                "vision and language towers; is it a Qwen3.5 or Qwen3-VL model?"
            )
        conf = LoraConfig(
            r=int(lora["r"]),
            lora_alpha=int(lora["alpha"]),
            lora_dropout=float(lora["dropout"]),
            target_modules=target_modules,
            bias="none",
        )
        with quiet_peft():
            inject_adapter_in_model(conf, self.vlm)
        n = 0
        for name, p in self.vlm.named_parameters():
            is_lora = "lora_" in name
            p.requires_grad_(is_lora)
            n += is_lora and name.endswith("lora_A.default.weight")
        if n == 0:
            raise InputError(
                f"LoRA target_modules {target_modules!r} matched no linear layer of this backbone"
            )
        return n

    def full_layer_names(self) -> list[str]:
        """Names (relative to ``self.vlm``) of the backbone parameters trained fully: every parameter of the
        top ``unfreeze_layers`` language layers except LoRA's (the final norm stays frozen, as the authors')."""
        if not self.unfreeze_layers:
            return []
        n_layers = len(self.vlm.language_model.layers)
        prefixes = tuple(
            f"language_model.layers.{i}." for i in range(n_layers - self.unfreeze_layers, n_layers)
        )
        return [n for n, _ in self.vlm.named_parameters() if n.startswith(prefixes) and "lora_" not in n]

    def lora_parameter_names(self) -> list[str]:
        """Names of the LoRA adapter parameters in the backbone (``[]`` without LoRA)."""
        return [n for n, _ in self.vlm.named_parameters() if "lora_" in n]

    def trainable_parameter_names(self) -> list[str]:
        """Names of the parameters with ``requires_grad`` (relative to this module)."""
        return [n for n, p in self.named_parameters() if p.requires_grad]

    def _apply(
        self, fn: Any, recurse: bool = True
    ) -> MIEModel:  # heads stay fp32 whatever the backbone dtype
        super()._apply(fn, recurse)
        for p in (*self.score_head.parameters(), *self.classification_head.parameters()):
            if p.dtype != torch.float32:
                p.data = p.data.float()
        return self

    def train(self, mode: bool = True) -> MIEModel:
        """Set training mode like ``nn.Module.train``; entering it empties the vision cache, whose features go
        stale once the weights change. Returns the model."""
        super().train(mode)
        if mode:
            self._vision_cache.clear()  # cached features may be stale once weights change
        return self

    @property
    def vision_cache_size(self) -> int:
        """Images whose features are kept across calls in eval mode (LRU, the shared ``VisionCache``)."""
        return self._vision_cache.max_items

    @vision_cache_size.setter
    def vision_cache_size(self, n: int) -> None:
        self._vision_cache.max_items = int(n)
        if n <= 0:
            self._vision_cache.clear()

    @property
    def device(self) -> torch.device:
        """The device the model's heads (and so its outputs) are on."""
        return next(self.score_head.parameters()).device

    # ------------------------------------------------------------------ inputs
    def render_text(self, n_images: int, prompt: str) -> str:
        """The chat-template text of one sample (one ``<|image_pad|>`` per image, before expansion)."""
        content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
        content.append({"type": "text", "text": self.prompt_template.format(prompt=prompt)})
        apply = getattr(self.processor, "apply_chat_template", None) or self.tokenizer.apply_chat_template
        return apply([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=False)

    def _text_ids(self, n_images: int, prompt: str) -> list[int]:
        key = (n_images, prompt)
        ids = self._texts.get(key)
        if ids is None:
            # The whole text in one tokenizer call (special tokens split it, so each <|image_pad|> stays one
            # id that is expanded below, exactly as the processor expands its placeholder).
            ids = list(self.tokenizer(self.render_text(n_images, prompt))["input_ids"])
            found = ids.count(self.image_token_id)
            if found != n_images:
                raise InputError(
                    f"the processor's chat template produced {found} image placeholders for {n_images} "
                    "images; MIE needs a Qwen-VL chat template that renders {'type': 'image'} items"
                )
            self._texts[key] = ids
            while len(self._texts) > 4096:
                self._texts.popitem(last=False)
        return ids

    def _image_entries(self, items: list[Any], names: list[str], batch: MIEBatch) -> list[str]:
        """PIL-convert, fit, hash and preprocess images; returns their keys (new ones added to ``batch``)."""
        keys = []
        todo: dict[str, Any] = {}
        for x, name in zip(items, names):
            path = os.fspath(x) if isinstance(x, (str, os.PathLike)) else None
            known = batch.keys_by_path.get(path) if path is not None else None
            if known is not None:  # the same file earlier in this batch (a pair's shared references)
                keys.append(known)
                continue
            im = fit_image(to_pil(x, name=name), self.image_size)
            k = image_key(im)
            keys.append(k)
            if path is not None:
                batch.keys_by_path[path] = k
            if k not in batch.images and k not in todo:
                todo[k] = im
        if todo:
            out = self.processor.image_processor(images=list(todo.values()), return_tensors="pt")
            grids = out["image_grid_thw"]
            sizes = grids.prod(-1).tolist()
            for k, g, pv in zip(todo, grids, torch.split(out["pixel_values"], sizes)):
                batch.images[k] = _Image(key=k, grid=g.clone(), n_tokens=int(g.prod()) // self.merge**2)
                batch.pixels[k] = pv
        return keys

    def _sequence(
        self, ref_keys: list[str], prompt: str, cand_key: str, images: dict[str, _Image], index: int
    ) -> _Sequence:
        keys = [*ref_keys, cand_key]
        text = self._text_ids(len(keys), prompt)
        ids: list[int] = []
        it = iter(keys)
        for t in text:
            if t == self.image_token_id:
                ids += [t] * images[next(it)].n_tokens
            else:
                ids.append(t)
        if len(ids) > self.max_length:
            raise InputError(
                f"sample {index}: its {len(keys)} images and prompt take {len(ids)} tokens, more than the "
                f"context limit max_length={self.max_length}; use fewer or smaller images (image_size) "
                "or a shorter prompt"
            )
        return _Sequence(ids=torch.tensor(ids, dtype=torch.long), image_keys=keys)

    def prepare(
        self, references: Any, prompts: Any, candidates: Any, *, _batch: MIEBatch | None = None
    ) -> MIEBatch:
        """Validate, tokenise and preprocess (no model call). Appends to ``_batch`` when given."""
        refs, texts, cands = validate_inputs(
            references, prompts, candidates, max_references=self.max_references
        )
        batch = _batch if _batch is not None else MIEBatch(sequences=[], images={})
        start = len(batch.sequences)
        for i, (r, p, c) in enumerate(zip(refs, texts, cands)):
            ref_keys = self._image_entries(r, [f"references[{i}][{j}]" for j in range(len(r))], batch)
            (cand_key,) = self._image_entries([c], [f"candidates[{i}]"], batch)
            batch.sequences.append(self._sequence(ref_keys, p, cand_key, batch.images, start + i))
        return batch

    def prepare_pairs(self, references: Any, prompts: Any, candidates_a: Any, candidates_b: Any) -> MIEBatch:
        """Sequences ``[a_0..a_{n-1}, b_0..b_{n-1}]`` for n pairs; pair i's two candidates share its
        references and prompt, and each distinct image goes through the vision tower once."""
        batch = self.prepare(references, prompts, candidates_a)
        return self.prepare(references, prompts, candidates_b, _batch=batch)

    # ------------------------------------------------------------------ vision
    def _vision_trains(self) -> bool:
        return torch.is_grad_enabled() and any(p.requires_grad for p in self.vlm.visual.parameters())

    def _encode(self, batch: MIEBatch) -> None:
        """Vision features of every image of the batch not encoded yet (cache in eval mode only)."""
        use_cache = self.vision_cache_size > 0 and not self.training and not self._vision_trains()
        scope = feature_scope(self.vlm.visual)  # features of another dtype / device are never served
        need = []
        for k in batch.images:
            if k in batch.features:
                continue
            hit = self._vision_cache.get(k, scope=scope) if use_cache else None
            if hit is not None:
                batch.features[k] = hit
            else:
                need.append(k)
        if not need:
            return
        budget = max(self.token_budget * self.merge**2, 1)
        chunk: list[str] = []
        used = 0
        for k in need:
            n = int(batch.images[k].grid.prod())
            if chunk and used + n > budget:
                self._encode_chunk(batch, chunk, scope if use_cache else "")
                chunk, used = [], 0
            chunk.append(k)
            used += n
        self._encode_chunk(batch, chunk, scope if use_cache else "")

    def _encode_chunk(self, batch: MIEBatch, keys: list[str], cache_scope: str) -> None:
        """Encode ``keys``; ``cache_scope`` (the tower's :func:`feature_scope`, empty: no caching) keys the
        features kept across calls."""
        dev = self.device
        vis_dtype = next(self.vlm.visual.parameters()).dtype
        pv = torch.cat([batch.pixels[k] for k in keys]).to(dev, vis_dtype)
        grid = torch.stack([batch.images[k].grid for k in keys]).to(dev)
        with torch.set_grad_enabled(self._vision_trains()):
            out = self.vlm.get_image_features(pv, grid, return_dict=True)
        self.stats["vision_calls"] += 1
        self.stats["images_encoded"] += len(keys)
        deep = getattr(out, "deepstack_features", None) if self._deepstack else None
        for i, k in enumerate(keys):
            g = batch.images[k].grid
            feat = VisionFeatures(
                embeds=out.pooler_output[i],
                deepstack=tuple(d[i] for d in deep) if deep else (),
                grid=(int(g[1]) // self.merge, int(g[2]) // self.merge),
            )
            batch.features[k] = feat
            if cache_scope:
                self._vision_cache.put(k, feat, scope=cache_scope)

    def clear_vision_cache(self) -> None:
        """Drop every cached image feature (the next images go through the vision tower again)."""
        self._vision_cache.clear()

    # ------------------------------------------------------------------ forward
    def _forward_group(self, batch: MIEBatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward over sequences of equal length (no padding, no attention mask)."""
        seqs = [batch.sequences[r] for r in rows]
        dev = self.device
        ids = torch.stack([s.ids for s in seqs]).to(dev, non_blocking=True)
        keys = [k for s in seqs for k in s.image_keys]
        grid = torch.stack([batch.images[k].grid for k in keys]).to(dev)
        emb_dtype = self.vlm.get_input_embeddings().weight.dtype
        out = self.vlm(
            input_ids=ids,
            attention_mask=None,
            mm_token_type_ids=(ids == self.image_token_id).to(torch.int32),
            image_grid_thw=grid,
            mm_encoder_outputs={
                "image": mm_encoder_outputs(
                    [batch.features[k] for k in keys], device=dev, dtype=emb_dtype, deepstack=self._deepstack
                )
            },
            use_cache=False,
        )
        h = out.last_hidden_state[:, -1]  # the last valid token: sequences in a group are unpadded
        self.stats["forward_batches"] += 1
        self.stats["sequences"] += len(seqs)
        with torch.autocast(device_type=dev.type, enabled=False):
            h = h.float()
            return self.score_head(h).squeeze(-1), self.classification_head(h)

    def forward(self, batch: MIEBatch) -> MIEOutput:
        """Score every sequence of a prepared batch (differentiable w.r.t. the trainable parameters).

        Sequences of equal length are grouped (at most ``token_budget`` tokens per forward); the outputs
        come back in input order. CUDA out-of-memory halves a group and retries."""
        n = len(batch.sequences)
        if n == 0:
            raise InputError("nothing to score: the batch is empty")
        self._encode(batch)
        by_len: dict[int, list[int]] = {}
        for i, s in enumerate(batch.sequences):
            by_len.setdefault(s.cost, []).append(i)
        score: list[Any] = [None] * n
        diag: list[Any] = [None] * n
        for length, rows in by_len.items():
            cap = max(1, self.token_budget // length)
            if self.max_batch_size:
                cap = min(cap, int(self.max_batch_size))

            def group(sl: slice, rows: list[int] = rows) -> tuple[list[int], Any]:
                return rows[sl], self._forward_group(batch, rows[sl])

            parts = map_batches(group, len(rows), cap)
            for rs, (s, d) in parts:
                for j, r in enumerate(rs):
                    score[r], diag[r] = s[j], d[j]
        return MIEOutput(score=torch.stack(score), diagnostics=torch.stack(diag))

    def _eval_call(self, fn: Any) -> Any:
        was = self.training
        self.eval()
        try:
            with torch.no_grad():
                return fn()
        finally:
            if was:
                super().train(True)

    def score(self, references: Any, prompts: Any, candidates: Any) -> MIEOutput:
        """Score candidates: ``references`` list[list[image]] (1..8 per sample), ``prompts`` list[str]
        (or one str for all), ``candidates`` list[image]. Returns :class:`MIEOutput` with ``score`` [B]
        and ``diagnostics`` [B,3] (fp32, on the model's device). Deterministic: runs in eval mode and
        without gradients whatever mode the model is in (and leaves that mode as it was)."""
        return self._eval_call(lambda: self.forward(self.prepare(references, prompts, candidates)))

    def score_pairs(
        self, references: Any, prompts: Any, candidates_a: Any, candidates_b: Any
    ) -> tuple[MIEOutput, MIEOutput]:
        """Score both candidates of n pairs; the references of a pair are encoded once (eval mode)."""
        out = self._eval_call(
            lambda: self.forward(self.prepare_pairs(references, prompts, candidates_a, candidates_b))
        )
        n = len(out) // 2
        return MIEOutput(out.score[:n], out.diagnostics[:n]), MIEOutput(out.score[n:], out.diagnostics[n:])

    # ------------------------------------------------------------------ save / load
    def config_dict(self) -> dict[str, Any]:
        """The JSON config saved next to the weights (format, version, backbone, tuning mode, head sizes, LoRA
        settings, prompt, image size): what loading a checkpoint checks and rebuilds from."""
        return {
            "format": "genmetrics-mie",
            "version": FORMAT_VERSION,
            "base_model_name": self.backbone_name,
            "mode": self.tuning or "head_only",
            "unfreeze_layers": self.unfreeze_layers,
            "num_error_classes": int(cast(nn.Linear, self.classification_head[-1]).out_features),
            "lora": self.lora,
            "lora_target_modules": self.lora_target_modules,
            "prompt_template": self.prompt_template,
            "image_size": self.image_size,
            "hidden_size": self.hidden_size,
            "dimensions": list(DIMENSIONS),
            "max_references": self.max_references,
        }

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write ``mie_config.json`` and ``mie_weights.safetensors`` (heads, LoRA, trained layers); reload
        with :meth:`from_pretrained` (see :mod:`genmetrics.mie.checkpoint`)."""
        return save_checkpoint(self, path)

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
        """Load a checkpoint: genmetrics' format or the authors' layout (``mie_config.json`` /
        ``lens_config.json``, ``mie_heads.pt`` / ``lens_heads.pt``, ``lora_adapter/``,
        ``trainable_backbone.pt``), a folder or a hub id. Every tensor must apply (see
        :func:`genmetrics.mie.checkpoint.load_checkpoint`)."""
        return load_checkpoint(cls, path_or_id, backbone, processor, device=device, dtype=dtype, **overrides)


def validate_inputs(
    references: Any, prompts: Any, candidates: Any, *, max_references: int = MAX_REFERENCES
) -> tuple[list[list[Any]], list[str], list[Any]]:
    """Check MIE inputs without loading anything heavy: ``references`` one list of 1..``max_references``
    images per candidate, one prompt per candidate (or one for all), no missing candidate, files exist.
    Returns ``(references, prompts, candidates)`` as plain lists; bad input is an ``InputError``.

    >>> refs, prompts, cands = validate_inputs([[torch.zeros(3, 8, 8)]] * 2, "a cat", torch.zeros(2, 3, 8, 8))
    >>> len(refs), prompts, len(cands)  # one prompt for all
    (2, ['a cat', 'a cat'], 2)
    >>> validate_inputs(None, "a cat", torch.zeros(1, 3, 8, 8))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...reference...
    """
    if candidates is None:
        raise InputError("candidates: missing; MIE scores one generated image per sample")
    cands = as_image_list(candidates, name="candidates")
    if not cands:
        raise InputError("candidates: empty; pass at least one generated image")
    for i, c in enumerate(cands):
        _check_image(c, f"candidates[{i}]", "every sample needs a generated image")
    n = len(cands)
    if references is None:
        raise InputError(
            f"references: missing; MIE needs {MIN_REFERENCES} to {max_references} reference images per sample"
        )
    if isinstance(references, (torch.Tensor, str, bytes, os.PathLike)) or not isinstance(
        references, Sequence
    ):
        raise InputError(
            "references: expected a list with one list of reference images per sample "
            f"(list[list[image]]), got {type(references).__name__}"
        )
    refs = list(references)
    if len(refs) != n:
        raise InputError(
            f"references: got {len(refs)} reference sets for {n} candidates; pass one list of "
            "reference images per candidate"
        )
    out_refs: list[list[Any]] = []
    for i, r in enumerate(refs):
        if r is None:
            raise InputError(
                f"references[{i}] is missing; MIE needs {MIN_REFERENCES} to {max_references} reference "
                "images per sample"
            )
        items = as_image_list(r, name=f"references[{i}]")
        if not MIN_REFERENCES <= len(items) <= max_references:
            raise InputError(
                f"references[{i}]: got {len(items)} reference images; MIE takes {MIN_REFERENCES} to "
                f"{max_references} per sample (the paper uses 2, 4, 6, 8)"
            )
        for j, x in enumerate(items):
            _check_image(x, f"references[{i}][{j}]", "remove it or give the image")
        out_refs.append(items)
    if prompts is None:
        raise InputError("prompts (condition): missing; MIE needs the generation prompt of every sample")
    texts = as_text_list(prompts, name="condition")
    if len(texts) == 1 and n > 1:
        texts = texts * n
    if len(texts) != n:
        raise InputError(
            f"condition: got {len(texts)} prompts for {n} candidates; pass one prompt per candidate "
            "(or one for all)"
        )
    return out_refs, texts, cands


def _check_image(x: Any, name: str, fix: str) -> None:
    if x is None:
        raise InputError(f"{name} is missing (None); {fix}")
    if isinstance(x, (str, os.PathLike)):
        p = Path(x)
        if not p.is_file():
            raise InputError(f"{name}: image file {str(p)!r} does not exist; check the path")
    elif isinstance(x, (list, tuple, dict)):
        raise InputError(
            f"{name}: expected one image (path, PIL image or tensor [3,H,W]), got a {type(x).__name__}"
        )
