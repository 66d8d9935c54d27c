"""Training TPIPS on odd-one-out human votes (Eq. 2, Appendix C.1) through the project's training loop
(:func:`genmetrics.train.fit`).

For a triplet ``(x1, x2, x3)`` and aspect ``c`` with vote distribution ``y``: ``s_bar_k = f(x_i, x_j | c)``
for ``{i,j} = {1,2,3} \\ {k}``, ``p = softmax(s_bar / tau)`` and the loss is ``-sum_k y_k log p_k``. The
triplet-head variant trains its 3-way answer head with the same cross-entropy, each triplet shown in a
random order (permutation augmentation).

* LoRA (peft) on the language tower only, vision tower frozen: r=16, alpha=2r, dropout 0.05; targets
  ``lora_targets="qkv-mlp"`` (q, k, v, gate, up, down: the official Qwen3-VL-Embedding training's) or
  ``"all-linear"`` (adds o_proj). The mid-fusion MLPs, the early-fusion register vector and the triplet head
  are trained in full (the triplet head at ``head_lr_mult`` = 5x the learning rate).
* AdamW (weight decay 0.01), gradient clipping 1.0, warm-up over 3% of the steps then cosine to 0
  (``transformers.get_scheduler``), gradient accumulation, checkpoints and exact resume, validation with the
  best adapter kept, multi-process via accelerate: all in :mod:`genmetrics.train`.
* Learning rate 5e-5 (late), 1e-4 (early, mid), 3e-5 (triplet); effective batch 128 (late, early) or 32
  (mid, triplet): ``batch_size`` examples per optimizer step over all processes, as
  ``micro_batch_size`` examples per forward and ``batch_size / (micro_batch_size * processes)`` accumulation
  steps; every (triplet, aspect) record is one example.
* ``OUT/final`` (the adapter: peft + ``tpips.json`` + head), ``OUT/best`` (best validation agreement, with
  validation data), ``OUT/checkpoints/step-N``, ``OUT/metrics.jsonl``, ``OUT/train_config.json``.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from genmetrics.backbones.hf import add_lora, load_vlm, quiet_peft
from genmetrics.backbones.qwen_vl import IMAGE_MODES, image_key
from genmetrics.data.jsonl import OddOneOutRecord, load_odd_one_out
from genmetrics.errors import InputError
from genmetrics.functional.agreement import odd_one_out_agreement
from genmetrics.tpips.base import VLMBase
from genmetrics.tpips.common import DEFAULT_WEIGHTS, TRIPLET_WEIGHTS
from genmetrics.tpips.model import TPIPSModel
from genmetrics.tpips.triplet import TPIPSTripletModel
from genmetrics.train import TrainLoopConfig, TrainTask, fit
from genmetrics.train.data_checks import check_triplets

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_LR",
    "LORA_TARGETS",
    "TPIPSTrainTask",
    "TrainConfig",
    "TPIPSTrainResult",
    "build_model",
    "soft_cross_entropy",
    "train_tpips",
]

DEFAULT_LR = {"late": 5e-5, "early": 1e-4, "mid": 1e-4, "triplet": 3e-5}
DEFAULT_BATCH = {"late": 128, "early": 128, "mid": 32, "triplet": 32}
TRAIN_VARIANTS = ("late", "mid", "early", "triplet")
#: LoRA target choices: the official Qwen3-VL-Embedding training's projections (default), or every linear
#: layer of the language tower (adds the attention output projection)
LORA_TARGETS: dict[str, Any] = {
    "qkv-mlp": ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"],
    "all-linear": "all-linear",
}
PERMUTATIONS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


@dataclass
class TrainConfig:
    """Hyperparameters (defaults: the paper's Table 8).

    ``resolved()`` fills the per-variant defaults:

    >>> [(v, TrainConfig(variant=v).resolved().lr) for v in ("late", "mid", "triplet")]
    [('late', 5e-05), ('mid', 0.0001), ('triplet', 3e-05)]
    >>> TrainConfig(variant="triplet").resolved().head_lr_mult, TrainConfig().resolved().lora_alpha
    (5.0, 32)
    """

    variant: str = "late"
    lr: float | None = None
    batch_size: int | None = None  # effective batch (examples per optimizer step, all processes together)
    micro_batch_size: int = 1  # examples per forward pass per process
    epochs: float = 1.0
    max_steps: int | None = None
    warmup_ratio: float = 0.03
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    temperature: float | None = None
    lora_r: int = 16
    lora_alpha: int | None = None  # default 2 * lora_r
    lora_dropout: float = 0.05
    lora_targets: str = "qkv-mlp"
    head_lr_mult: float | None = None  # default 5 for the triplet head, 1 otherwise
    probe_layers: int = 20
    mid_text_norm: str = (
        "layer"  # mid fusion: LayerNorm on the channel-weight MLPs' input ("none": paper-literal)
    )
    image_size: int | None = None  # side of the "square" policy; None: resize="smart"
    resize: str | None = None  # "smart" (official Qwen3-VL-Embedding policy, default) or "square"
    image_modes: str = "official"  # PIL modes to RGB: "official" (the embedder's) or "genmetrics" (rescaled)
    val_every: int | None = None  # None: validate once per epoch (and at the end)
    save_every: int | None = 200
    keep_checkpoints: int = 2
    seed: int = 0
    gradient_checkpointing: bool | None = None  # default: on CUDA
    mixed_precision: str | None = None  # default: "bf16" on CUDA, "no" on CPU
    num_workers: int = 0

    def resolved(self) -> TrainConfig:
        """A copy with every default filled from the variant (learning rate, batch size, LoRA alpha, head
        learning-rate multiplier); raises :class:`~genmetrics.errors.InputError` for an unknown
        variant or a non-positive size."""
        if self.variant not in TRAIN_VARIANTS:
            raise InputError(f"variant={self.variant!r}: expected one of {', '.join(TRAIN_VARIANTS)}")
        c = TrainConfig(**{**asdict(self)})
        c.lr = DEFAULT_LR[c.variant] if c.lr is None else float(c.lr)
        c.batch_size = DEFAULT_BATCH[c.variant] if c.batch_size is None else int(c.batch_size)
        c.lora_alpha = 2 * c.lora_r if c.lora_alpha is None else int(c.lora_alpha)
        c.head_lr_mult = (
            (5.0 if c.variant == "triplet" else 1.0) if c.head_lr_mult is None else float(c.head_lr_mult)
        )
        for name in ("batch_size", "micro_batch_size", "lora_r"):
            if int(getattr(c, name)) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(c, name)}")
        if c.lr <= 0:
            raise InputError(f"lr must be positive, got {c.lr}")
        if c.epochs <= 0 and not c.max_steps:
            raise InputError(f"epochs must be positive, got {c.epochs}")
        if not 0 <= c.warmup_ratio < 1:
            raise InputError(f"warmup_ratio must be in [0, 1), got {c.warmup_ratio}")
        if c.image_size is not None and c.image_size % 32:
            raise InputError(f"image_size must be a multiple of 32, got {c.image_size}")
        if c.image_modes not in IMAGE_MODES:
            raise InputError(f"image_modes={c.image_modes!r}: expected one of {', '.join(IMAGE_MODES)}")
        if c.lora_targets not in LORA_TARGETS:
            raise InputError(f"lora_targets={c.lora_targets!r}: expected one of {', '.join(LORA_TARGETS)}")
        return c


@dataclass
class TPIPSTrainResult:
    """What :func:`train_tpips` returns: the run folder, the trained adapter folder (``OUT/final``; load it
    with :func:`~genmetrics.tpips.load_tpips`), the optimizer steps, the training losses, the validation
    rows and the trained model (see :func:`train_tpips` for a run).

    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(TPIPSTrainResult)][:4]
    ['out_dir', 'adapter_dir', 'steps', 'losses']
    """

    out_dir: Path
    adapter_dir: Path  # OUT/final
    steps: int
    losses: list[float]
    val: list[dict[str, Any]]
    model: Any = None  # the trained TPIPS model (unwrapped), in eval mode
    best_dir: Path | None = None


# --------------------------------------------------------------------------------------------- data
def _records(data: Any, name: str) -> list[OddOneOutRecord]:
    recs = load_odd_one_out(data) if isinstance(data, (str, os.PathLike)) else list(data)
    if not recs:
        raise InputError(f"{name}: no training records")
    for r in recs:
        if not isinstance(r, OddOneOutRecord):
            raise InputError(
                f"{name}: expected odd-one-out records (genmetrics.data.jsonl.OddOneOutRecord), got "
                f"{type(r).__name__}"
            )
        for p in r.images:
            if isinstance(p, (str, os.PathLike)) and not Path(p).is_file():
                raise InputError(f"{name}: record {r.id!r}: image file {str(p)!r} does not exist")
    check_triplets(recs, str(data) if isinstance(data, (str, os.PathLike)) else name)  # docs/training.md
    return recs


def soft_cross_entropy(logits: torch.Tensor, votes: torch.Tensor) -> torch.Tensor:
    """``-sum_k y_k log softmax(logits)_k`` per row, with ``y = votes / votes.sum()``.

    >>> round(float(soft_cross_entropy(torch.zeros(1, 3), torch.tensor([[4.0, 0.0, 0.0]]))), 4)  # ln 3
    1.0986
    >>> float(soft_cross_entropy(torch.tensor([[20.0, 0.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]))) < 1e-6
    True
    """
    y = votes.to(logits.device, torch.float32)
    y = y / y.sum(-1, keepdim=True)
    return -(y * torch.log_softmax(logits.float(), -1)).sum(-1)


def build_model(config: TrainConfig, backbone: Any, processor: Any) -> VLMBase:
    """Wrap ``backbone`` with LoRA (language tower only) and build the TPIPS model of ``config.variant``.

    >>> from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    >>> model = build_model(TrainConfig(image_size=64).resolved(), tiny_qwen3vl(), tiny_qwen3vl_processor())
    >>> model.variant, hasattr(model.backbone, "peft_config")
    ('late', True)
    """
    if not hasattr(backbone, "peft_config"):
        with quiet_peft():
            backbone = add_lora(
                backbone,
                r=config.lora_r,
                alpha=config.lora_alpha,
                dropout=config.lora_dropout,
                target_modules=LORA_TARGETS[config.lora_targets],
            )
    if config.variant == "triplet":
        model: VLMBase = TPIPSTripletModel(
            backbone, processor, image_size=config.image_size, image_modes=config.image_modes
        )  # square
    else:
        model = TPIPSModel(
            backbone,
            processor,
            config.variant,
            image_size=config.image_size,
            resize=config.resize,
            temperature=config.temperature,
            probe_layers=config.probe_layers,
            mid_text_norm=config.mid_text_norm,
            image_modes=config.image_modes,
        )
    for n, p in model.named_parameters():
        if "visual" in n:
            p.requires_grad_(False)
    return model


class TPIPSTrainTask(TrainTask):
    """The TPIPS side of :func:`genmetrics.train.fit`: Eq. 2 on odd-one-out records.

    >>> from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    >>> from genmetrics.tpips.synthetic import aspect_triplets
    >>> cfg = TrainConfig(image_size=64).resolved()
    >>> task = TPIPSTrainTask(build_model(cfg, tiny_qwen3vl(), tiny_qwen3vl_processor()), cfg, None)
    >>> batch = task.collate(list(aspect_triplets(1, size=64)[0]))
    >>> loss, parts = task.loss(task.trainable_module(), batch)
    >>> sorted(batch), loss.ndim, bool(loss > 0), loss.requires_grad
    (['aspects', 'votes', 'x'], 0, True, True)
    """

    def __init__(self, model: VLMBase, config: TrainConfig, base_weights: str | None):
        self.model, self.cfg, self.base_weights = model, config, base_weights

    def trainable_module(self) -> torch.nn.Module:
        """The module the loop optimises: the TPIPS model (its LoRA and head parameters train)."""
        return self.model

    def collate(self, examples: list) -> dict[str, Any]:
        """Odd-one-out records -> ``{"x": three image columns, "aspects": [...], "votes": [B, 3]}``, images
        loaded as at inference."""
        load = self.model.load_images  # the model's image_modes, as at inference
        cols = [load([r.images[k] for r in examples], name=f"images{k + 1}") for k in range(3)]
        return {
            "x": cols,
            "aspects": [r.aspect for r in examples],
            "votes": torch.tensor([r.votes for r in examples], dtype=torch.float64),
        }

    def loss(self, module: torch.nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, {})``: the mean soft cross-entropy of the model's odd-one-out logits against the votes
        (triplet variant: on a random order of each triplet)."""
        x, asp, votes = batch["x"], batch["aspects"], batch["votes"]
        if self.cfg.variant == "triplet":  # permutation augmentation (the loop checkpoints the global RNG)
            perms = [PERMUTATIONS[int(i)] for i in torch.randint(6, (len(asp),))]
            logits = module(*x, asp, perms)
        else:
            logits = module(*x, asp)
        return soft_cross_entropy(logits, votes).mean(), {}

    def evaluate(self, module: Any, examples: list) -> dict[str, float]:  # a TPIPSModel / TPIPSTripletModel
        """Validation metrics of ``module`` on ``examples``: odd-one-out agreement with the votes and its
        standard error."""
        preds = []
        for i in range(0, len(examples), 16):
            chunk = examples[i : i + 16]
            preds.append(
                module.odd_one_out(
                    *[[r.images[k] for r in chunk] for k in range(3)], [r.aspect for r in chunk]
                )
                .double()
                .cpu()
            )
        mean, se = odd_one_out_agreement(torch.cat(preds), torch.tensor([r.votes for r in examples]))
        return {"agreement": mean, "stderr": se}

    def save(self, module: Any, path: Path) -> None:
        """Write the adapter folder (LoRA, head, config) of ``module`` into ``path``."""
        module.save_pretrained(path, base_weights=self.base_weights)

    def data_fingerprint(self, examples: list) -> str:
        """Records by content; image files by path, size and modification time (not re-read)."""
        h = hashlib.sha256()
        for r in examples:
            h.update(repr((r.id, r.aspect, tuple(float(v) for v in r.votes))).encode())
            for p in r.images:
                if isinstance(p, (str, os.PathLike)):
                    st = os.stat(p)
                    h.update(f"{os.fspath(p)}:{st.st_size}:{st.st_mtime_ns}".encode())
                else:
                    h.update(image_key(p if not isinstance(p, torch.Tensor) else p.float()).encode())
        return h.hexdigest()

    def renamed_parameters(self) -> dict[str, str]:
        """Old parameter-name prefixes -> new ones, so a training checkpoint of an earlier release is recognised
        (and refused by name) rather than misread."""
        # the fusion variants became classes under TPIPSModel.fusion: a training checkpoint of an
        # earlier genmetrics names them by their old attributes (refused as such by the loop)
        return {"mid": {"head.": "fusion.head."}, "early": {"register_vector": "fusion.register"}}.get(
            self.cfg.variant, {}
        )

    def param_groups(self, module: torch.nn.Module) -> list[dict[str, Any]]:
        """The optimizer groups: LoRA parameters at the base learning rate, head parameters at ``head_lr_mult``
        times it (empty groups left out)."""
        params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not params:
            raise RuntimeError("no trainable parameters after adding LoRA")
        lora = [p for n, p in params if "lora_" in n]
        head = [p for n, p in params if "lora_" not in n]
        return [
            g
            for g in ({"params": lora, "lr_scale": 1.0}, {"params": head, "lr_scale": self.cfg.head_lr_mult})
            if g["params"]
        ]


def _loop_config(
    cfg: TrainConfig, out: Path, n_train: int, resume: bool, progress: bool, world: int
) -> TrainLoopConfig:
    assert cfg.batch_size is not None and cfg.lr is not None  # TrainConfig.resolved() fills both
    if cfg.batch_size % world:
        raise InputError(
            f"batch_size {cfg.batch_size} must be a multiple of the number of processes ({world})"
        )
    per_rank = cfg.batch_size // world
    micro = min(cfg.micro_batch_size, per_rank)
    if per_rank % micro:
        raise InputError(
            f"batch_size {cfg.batch_size} over {world} process(es) is {per_rank} examples each, not a "
            f"multiple of micro_batch_size {micro}; choose sizes that divide"
        )
    epochs = cfg.epochs
    max_steps = cfg.max_steps
    if max_steps is None and float(epochs) != int(epochs):
        max_steps = max(1, math.ceil(epochs * n_train / cfg.batch_size))
    extra = {
        k: v
        for k, v in asdict(cfg).items()
        if k
        not in (
            "lr",
            "epochs",
            "max_steps",
            "warmup_ratio",
            "weight_decay",
            "max_grad_norm",
            "seed",
            "val_every",
            "save_every",
            "keep_checkpoints",
            "num_workers",
            "mixed_precision",
        )
    }
    cuda = torch.cuda.is_available()
    return TrainLoopConfig(
        out_dir=out,
        lr=float(cfg.lr),
        weight_decay=cfg.weight_decay,
        epochs=None
        if cfg.max_steps is not None
        else max(1, math.ceil(epochs)),  # max_steps: steps, not epochs
        max_steps=max_steps,
        batch_size=micro,
        grad_accum=per_rank // micro,
        warmup_ratio=cfg.warmup_ratio,
        scheduler="cosine",
        max_grad_norm=cfg.max_grad_norm,
        seed=cfg.seed,
        eval_every=cfg.val_every or None,
        metric_for_best="agreement",
        greater_is_better=True,
        save_every=cfg.save_every or None,
        keep_checkpoints=cfg.keep_checkpoints,
        resume=resume,
        mixed_precision=cfg.mixed_precision or ("bf16" if cuda else "no"),
        find_unused_parameters=cfg.variant == "mid",
        num_workers=cfg.num_workers,
        progress=progress,
        extra=extra,
    )


# --------------------------------------------------------------------------------------------- main
def train_tpips(
    data: Any,
    out_dir: str | os.PathLike,
    *,
    config: TrainConfig | None = None,
    backbone: Any = None,
    processor: Any = None,
    weights: str | None = None,
    val_data: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TPIPSTrainResult:
    """Train TPIPS on odd-one-out records (a JSONL path or a list of ``OddOneOutRecord``).

    Inputs are validated before any weights load. ``backbone``/``processor``: a Qwen3-VL model and its
    processor (the tiny ones in tests); otherwise ``weights`` (default ``Qwen/Qwen3-VL-Embedding-2B``,
    ``Qwen/Qwen3-VL-8B-Instruct`` for the triplet head) is loaded with ``load_vlm``.

    Two optimizer steps on synthetic triplets with the tiny Qwen3-VL; the result loads with
    :func:`~genmetrics.tpips.load_tpips`:

    >>> import tempfile
    >>> from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    >>> from genmetrics.tpips import load_tpips
    >>> from genmetrics.tpips.synthetic import aspect_triplets
    >>> records = [r for pair in aspect_triplets(2, size=64) for r in pair]
    >>> proc = tiny_qwen3vl_processor()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = train_tpips(records, d, config=TrainConfig(max_steps=2, batch_size=2, image_size=64),
    ...                          backbone=tiny_qwen3vl(), processor=proc, progress=False)
    ...     trained = load_tpips(result.adapter_dir, backbone=tiny_qwen3vl(), processor=proc)
    >>> result.steps, len(result.losses), result.adapter_dir.name, trained.variant
    (2, 2, 'final', 'late')
    """
    cfg = (config or TrainConfig()).resolved()
    records = _records(data, "data")
    val_records = _records(val_data, "val_data") if val_data is not None else None
    out = Path(out_dir)
    state = PartialState(cpu=not torch.cuda.is_available())
    loop_cfg = _loop_config(cfg, out, len(records), resume, progress, state.num_processes)
    loop_cfg.overwrite = overwrite
    loop_cfg.checked()  # refuse bad options before loading weights

    base_weights = weights
    if backbone is None:
        base_weights = weights or (TRIPLET_WEIGHTS if cfg.variant == "triplet" else DEFAULT_WEIGHTS)
        backbone, processor = load_vlm(
            base_weights, device=state.device, for_generation=cfg.variant == "triplet"
        )
    elif processor is None:
        raise InputError("processor: pass the backbone's processor together with backbone=")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # head initialisation (mid-fusion MLPs) is part of the seeded run
        model = build_model(cfg, backbone, processor)
    if cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None else torch.cuda.is_available():
        bb: Any = model.backbone  # a transformers model
        if hasattr(bb, "activation_checkpointing_enable"):  # transformers >= 5.x name
            bb.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            bb.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    res = fit(TPIPSTrainTask(model, cfg, base_weights), records, loop_cfg, val_examples=val_records)
    losses = [r["loss"] for r in res.history if r.get("kind") == "train"]
    val = [{k: v for k, v in r.items() if k != "kind"} for r in res.history if r.get("kind") == "eval"]
    trained = res.module if res.module is not None else model
    trained.eval()
    return TPIPSTrainResult(
        out_dir=out,
        adapter_dir=res.final_dir,
        steps=res.steps,
        losses=losses,
        val=val,
        model=trained,
        best_dir=res.best_dir,
    )
