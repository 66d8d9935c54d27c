"""Training MIE on pairwise preferences (MIB-Silver style JSONL), on the shared loop :func:`genmetrics.train.fit`.

Fixed settings (Appendix E and the authors' ``scripts/train.py`` agree): margin ranking loss (margin 0.1,
alpha 1) + BCEWithLogits (beta 0.5); AdamW lr 2e-5, weight decay 0.01; cosine schedule with 3% warm-up;
gradient clipping 1.0; a validation split evaluated once per epoch with early stopping (min_delta 1e-3) on
the authors' monitor (validation rank loss + beta x diagnostic loss), the best checkpoint kept; seed 3407.

Where the paper's appendix and the authors' released pipeline differ, a named :data:`RECIPES` entry holds
each (``recipe="paper"``, the default, or ``"released"``): pairs per micro-batch, accumulation, epochs, the
optimizer-step cap, early-stopping patience and the image size. An option given explicitly wins over its
recipe; the recipe is recorded with the run (``train_config.json``) and the checkpoint (``training.json``).

The loop (schedule, accumulation, clipping, checkpoints and exact resume, multi-process through
``accelerate launch``) is :mod:`genmetrics.train`; this module supplies the :class:`MIETask`. A new
training or read-out variant plugs in as a field of :class:`TrainConfig` (validated in ``check``) that
:func:`build_model` passes to :class:`~genmetrics.mie.model.MIEModel`, or as a ``task_cls=`` subclass of
:class:`MIETask` (its ``loss``); :func:`loop_config` is the one place the trainer's options are set.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from genmetrics.core.options import choice
from genmetrics.data.io.workers import check_workers
from genmetrics.data.jsonl import load_mib_pairs
from genmetrics.data.output.atomic import atomic_write_text
from genmetrics.errors import InputError
from genmetrics.mie.checkpoint import recorded_backbone
from genmetrics.mie.common import TUNING_MODES, build_backbone, image_size_option, resolve_backbone_name
from genmetrics.mie.loss import RANK_LOSSES, mie_loss, rank_loss
from genmetrics.mie.model import MIEModel, MIEOutput
from genmetrics.train import TrainLoopConfig, TrainTask, fit
from genmetrics.train.data_checks import check_pairs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """The training knobs on which the paper's appendix and the authors' released pipeline differ.

    ``max_steps`` is a cap: a run is ``min(max_steps, epochs x optimizer steps per epoch)`` steps (``None``:
    no cap); ``early_stopping_patience`` ``None`` never stops early; ``image_size`` ``None`` is unresized.

    >>> paper, released = RECIPES["paper"], RECIPES["released"]
    >>> paper.batch_pairs * paper.grad_accum, released.batch_pairs * released.grad_accum  # pairs per step
    (32, 16)
    >>> (paper.max_steps, paper.early_stopping_patience), (released.max_steps, released.early_stopping_patience)
    ((None, 2), (600, 1))
    """

    batch_pairs: int
    grad_accum: int
    epochs: int
    max_steps: int | None
    early_stopping_patience: int | None
    image_size: int | None
    source: str


#: the named recipes (see docs/mie.md "Training recipes")
RECIPES: dict[str, Recipe] = {
    "paper": Recipe(
        batch_pairs=4,
        grad_accum=8,
        epochs=3,
        max_steps=None,
        early_stopping_patience=2,
        image_size=512,
        source="Appendix E: batch 4 per device x 8 accumulation steps, max epochs 3, early stopping "
        "patience 2, image resolution 512 (aspect kept)",
    ),
    "released": Recipe(
        batch_pairs=4,
        grad_accum=4,
        epochs=3,
        max_steps=600,
        early_stopping_patience=1,
        image_size=None,
        source="the authors' released pipeline: effective batch 16 (4 x 4 accumulation), a 600 optimizer-"
        "step cap (MIE_Inference/README.md: the published checkpoint stopped at its 600-step budget after "
        "one epoch), early stopping patience 1, images unresized (mie/dataset.py)",
    ),
}
DEFAULT_RECIPE = "paper"


class _FromRecipe:
    """The default of a :class:`TrainConfig` field that its recipe fills in."""

    def __repr__(self) -> str:
        return "<from the recipe>"


#: a field left at this value takes the recipe's (``None`` stays a value: no cap, no early stopping, unresized)
FROM_RECIPE: Any = _FromRecipe()
RECIPE_FIELDS = tuple(f.name for f in fields(Recipe) if f.name != "source")


@dataclass
class TrainConfig:
    """Options of :func:`train_mie` (and of ``genmetrics train mie``). The knobs in :data:`RECIPE_FIELDS` come
    from the named ``recipe`` (:data:`RECIPES`) unless given; the other defaults are Appendix E's.

    >>> cfg = TrainConfig(data="pairs.jsonl", out="runs/mie")
    >>> cfg.recipe, cfg.tuning, cfg.unfreeze_layers, cfg.lr, cfg.margin, cfg.alpha, cfg.beta
    ('paper', 'layer_only', 4, 2e-05, 0.1, 1.0, 0.5)
    >>> released = TrainConfig(data="pairs.jsonl", out="runs/mie", recipe="released", grad_accum=2)
    >>> released.grad_accum, released.max_steps, released.early_stopping_patience  # given > recipe
    (2, 600, 1)
    >>> TrainConfig(data="pairs.jsonl", out="runs/mie", tuning="full").check()
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: tuning='full'; expected one of ('layer_only', 'lora_layer')
    """

    data: str
    out: str
    recipe: str = DEFAULT_RECIPE
    val_data: str | None = None  # the authors' separate validation file; None: a seeded split of `data`
    val_fraction: float = 0.1  # used when val_data is None (0 = no validation, no early stopping)
    backbone: str = "0.8b"  # Appendix E trains the 0.8B variant in its table; 2b/4b "use the same setup"
    tuning: str = "layer_only"
    unfreeze_layers: int = 4
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    image_size: int | None = FROM_RECIPE
    subset: int | None = 9600  # the paper trains on a 9.6K subset of MIB-Silver; None or 0 = all pairs
    epochs: int = FROM_RECIPE
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup: float = 0.03  # fraction of the optimizer steps
    grad_clip: float = 1.0
    batch_pairs: int = FROM_RECIPE  # pairs per micro-batch per process
    grad_accum: int = FROM_RECIPE
    alpha: float = 1.0
    beta: float = 0.5
    margin: float = 0.1
    rank_loss: str = "margin"  # or "bradley_terry" (genmetrics' earlier objective, kept as an option)
    # weight of the reference-swap term (ReferenceContrastTask); 0 = off, the authors' objective
    reference_contrast: float = 0.0
    early_stopping_patience: int | None = FROM_RECIPE  # None or 0: never stop early
    early_stopping_min_delta: float = 1e-3
    token_budget: int = 16384
    max_steps: int | None = FROM_RECIPE  # a cap on optimizer steps; None or 0: no cap
    save_every: int | None = 200
    seed: int = 3407
    resume: bool = False
    overwrite: bool = False
    gradient_checkpointing: bool = False
    mixed_precision: str | None = None  # None: bf16 on CUDA, none on CPU
    progress: bool = True
    workers: int = 0  # DataLoader processes that read, decode and preprocess the batches (0: this process)

    def __post_init__(self) -> None:
        recipe = RECIPES[choice("recipe", self.recipe, tuple(RECIPES), owner="train_mie")]
        for name in RECIPE_FIELDS:
            if getattr(self, name) is FROM_RECIPE:
                setattr(self, name, getattr(recipe, name))
        for name in ("max_steps", "early_stopping_patience"):  # 0 = off, as on the command line
            if getattr(self, name) == 0:
                setattr(self, name, None)

    def check(self) -> None:
        """Validate every field, raising :class:`~genmetrics.errors.InputError` naming the first bad one
        (``image_size`` is normalised in place)."""
        if self.tuning not in TUNING_MODES:
            raise InputError(f"tuning={self.tuning!r}; expected one of {TUNING_MODES}")
        self.image_size = image_size_option(self.image_size, owner="train_mie")
        for name in ("batch_pairs", "grad_accum", "token_budget", "lora_r", "epochs"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}")
        if self.unfreeze_layers < 0:
            raise InputError(f"unfreeze_layers must be >= 0, got {self.unfreeze_layers}")
        if self.lr <= 0:
            raise InputError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise InputError(f"warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if not 0 <= self.val_fraction < 1:
            raise InputError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.alpha < 0 or self.beta < 0 or self.alpha + self.beta == 0:
            raise InputError(f"alpha and beta must be >= 0 and not both 0, got {self.alpha}, {self.beta}")
        if self.rank_loss not in RANK_LOSSES:
            raise InputError(f"rank_loss={self.rank_loss!r}; expected one of {RANK_LOSSES}")
        if not self.reference_contrast >= 0:
            raise InputError(
                f"reference_contrast is a loss weight >= 0 (0 = off), got {self.reference_contrast!r}"
            )
        if self.subset is not None and self.subset < 0:
            raise InputError(f"subset must be >= 0 (0 = all pairs), got {self.subset}")
        for name in ("max_steps", "early_stopping_patience"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise InputError(f"{name} must be a positive integer or None (0: off), got {v!r}")


def load_training_pairs(path: str | os.PathLike, *, subset: int | None = None, seed: int = 0) -> list[Any]:
    """Read MIB pairs, check every image file exists, and draw a seeded random subset (file order kept).

    >>> import tempfile
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     [r.id for r in load_training_pairs(toy_mib_pairs(d, 4), subset=3, seed=0)]
    ['pair0', 'pair1', 'pair3']
    """
    records = load_mib_pairs(path)
    for r in records:
        for p in (*r.references, *r.candidates):
            if not Path(p).is_file():
                raise InputError(f"{path}: pair {r.id!r} names image {str(p)!r}, which does not exist")
    if subset and subset < len(records):
        keep = sorted(random.Random(seed).sample(range(len(records)), subset))
        records = [records[i] for i in keep]
    check_pairs(records, str(path))  # identical candidates, contradictions (docs/training.md)
    return records


def split_validation(records: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """A seeded ``fraction`` of the pairs for validation (at least one pair when fraction > 0 and there
    are 2+ pairs); the rest, in file order, for training.

    >>> import tempfile
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_training_pairs(toy_mib_pairs(d, 4))
    >>> train, val = split_validation(records, 0.25, seed=0)
    >>> [r.id for r in train], [r.id for r in val]
    (['pair0', 'pair1', 'pair2'], ['pair3'])
    """
    n_val = int(round(fraction * len(records)))
    if fraction > 0 and len(records) > 1:
        n_val = max(1, n_val)
    if n_val == 0:
        return list(records), []
    val = set(random.Random(seed).sample(range(len(records)), n_val))
    return [r for i, r in enumerate(records) if i not in val], [r for i, r in enumerate(records) if i in val]


def pair_targets(records: list[Any]) -> dict[str, Any]:
    """Inputs and labels of a list of pairs: the preferred candidate (``win``) and the other (``lose``),
    each with its own diagnostic labels, and ``mask`` marking the pairs that have labels.

    >>> import tempfile
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_training_pairs(toy_mib_pairs(d, 4))
    >>> t = pair_targets(records[:2])
    >>> sorted(t), t["win"][1] == str(records[1].candidates[records[1].preference]), t["diag_win"][0].tolist()
    (['diag_lose', 'diag_win', 'lose', 'mask', 'prompts', 'refs', 'win'], True, [1.0, 1.0, 1.0])
    """
    zeros = (0.0, 0.0, 0.0)

    def diag(r: Any, side: int) -> tuple[float, ...]:
        return tuple(r.diagnostics[side]) if r.diagnostics else zeros

    return {
        "refs": [[str(p) for p in r.references] for r in records],
        "prompts": [r.prompt for r in records],
        "win": [str(r.candidates[r.preference]) for r in records],
        "lose": [str(r.candidates[1 - r.preference]) for r in records],
        "diag_win": torch.tensor([diag(r, r.preference) for r in records], dtype=torch.float32),
        "diag_lose": torch.tensor([diag(r, 1 - r.preference) for r in records], dtype=torch.float32),
        "mask": torch.tensor([r.diagnostics is not None for r in records]),
    }


class MIETask(TrainTask):
    """The MIE side of :func:`genmetrics.train.fit`: pairs in, ``alpha * L_rank + beta * L_diag`` out.

    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> import tempfile
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_training_pairs(toy_mib_pairs(d, 4))
    ...     task = MIETask(model, TrainConfig(data="pairs.jsonl", out=d))
    ...     loss, parts = task.loss(task.trainable_module(), task.collate(records[:2]))
    >>> sorted(parts), loss.requires_grad
    (['diag', 'loss', 'rank'], True)
    """

    def __init__(self, model: Any, cfg: TrainConfig, generators: list[str] | None = None) -> None:
        self.model = model
        self.cfg = cfg
        self.generators = generators or []

    def trainable_module(self) -> Any:
        """The module the loop optimises: the whole :class:`MIEModel` (only its unfrozen parameters train)."""
        return self.model

    def collate(self, records: list[Any]) -> dict[str, Any]:
        """Preference records -> one batch: the targets of :func:`pair_targets` plus the prepared model inputs,
        preferred candidates first, then the rejected ones (key ``batch``)."""
        x = pair_targets(records)
        x["batch"] = self.model.prepare_pairs(x["refs"], x["prompts"], x["win"], x["lose"])
        return x

    def _loss(self, out: Any, x: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        n = len(x["win"])
        dev = out.score.device
        return mie_loss(
            MIEOutput(out.score[:n], out.diagnostics[:n]),
            MIEOutput(out.score[n:], out.diagnostics[n:]),
            x["diag_win"].to(dev),
            x["diag_lose"].to(dev),
            alpha=self.cfg.alpha,
            beta=self.cfg.beta,
            margin=self.cfg.margin,
            rank_loss_kind=self.cfg.rank_loss,
            diag_mask=x["mask"].to(dev),
        )

    def loss(self, module: Any, x: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, parts)``: the MIE loss (rank loss + alpha/beta-weighted diagnostic loss) of one collated
        batch, with its parts as floats for the log."""
        return self._loss(module(x["batch"]), x)

    def evaluate(self, module: Any, records: list[Any]) -> dict[str, float]:
        """The authors' monitor ``loss`` = rank loss + beta x diagnostic loss (means over the validation
        micro-batches), plus pairwise accuracy."""
        parts: list[dict[str, float]] = []
        correct = 0
        bs = self.cfg.batch_pairs
        for i in range(0, len(records), bs):
            x = self.collate(records[i : i + bs])
            out = module(x["batch"])
            _, p = self._loss(out, x)
            parts.append(p)
            n = len(x["win"])
            correct += int((out.score[:n] > out.score[n:]).sum())
        mean = {k: sum(p[k] for p in parts) / len(parts) for k in ("rank", "diag")}
        return {
            "loss": mean["rank"] + self.cfg.beta * mean["diag"],
            "rank": mean["rank"],
            "diag": mean["diag"],
            "pairwise_accuracy": correct / len(records),
        }

    def save(self, module: Any, path: Path) -> None:
        """Write the model (config + safetensors) and ``training.json`` (training config, generators) into
        ``path``."""
        module.save_pretrained(path)
        atomic_write_text(
            Path(path) / "training.json",
            json.dumps({"config": asdict(self.cfg), "generators": self.generators}, indent=2),
        )


def reference_partners(refs: list[list[str]]) -> list[tuple[int, int]]:
    """``(i, j)``: pair ``i`` of a micro-batch is also scored with the references of pair ``j``, the next pair
    (cyclically) whose set of reference images differs from ``i``'s (the same images in another order show
    the same subjects: not a negative); a pair without one is left out.

    >>> reference_partners([["a", "b"], ["c", "d"], ["b", "a"]])
    [(0, 1), (1, 2), (2, 1)]
    >>> reference_partners([["a", "b"], ["b", "a"]])  # nothing to contrast with
    []
    """
    sets = [frozenset(r) for r in refs]
    out = []
    for i, own in enumerate(sets):
        for d in range(1, len(sets)):
            j = (i + d) % len(sets)
            if sets[j] != own:
                out.append((i, j))
                break
    return out


class ReferenceContrastTask(MIETask):
    """The authors' objective plus the reference-swap term (``TrainConfig.reference_contrast`` = w > 0)::

        loss = alpha * L_rank + beta * L_diag + w * L_rank(s(win | own references), s(win | other references))

    The preferred candidate of each pair is scored a second time with the references of another pair of the
    same micro-batch (:func:`reference_partners`) and must score higher with its own, by the rank loss of
    ``cfg.rank_loss`` and ``cfg.margin``. The candidate is the same on both sides, so a score that ignores
    the references cannot lower this term: it rewards comparing, not memorising candidates (the evidence
    is in docs/mie.md, "Generalisation"). The extra sequences share the batch's vision features (one more
    language forward per pair, no extra image). Validation (the early-stopping monitor) is the authors'.

    Two pairs with different references (toy pairs written in two folders):

    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor, toy_mib_pairs
    >>> import tempfile
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = [load_training_pairs(toy_mib_pairs(Path(d) / f"s{s}", 1, seed=s))[0] for s in (0, 1)]
    ...     task = ReferenceContrastTask(model, TrainConfig(data="x.jsonl", out=d, reference_contrast=1.0))
    ...     x = task.collate(records[:2])
    ...     loss, parts = task.loss(task.trainable_module(), x)
    >>> len(x["batch"]), x["partners"], sorted(parts)  # 2 pairs: win, lose, and win with the other's refs
    (6, [(0, 1), (1, 0)], ['diag', 'loss', 'rank', 'reference_contrast'])
    """

    _contrast = True  # off while evaluate() collates validation pairs

    def collate(self, records: list[Any]) -> dict[str, Any]:
        """As :meth:`MIETask.collate`, plus each preferred candidate once more against another pair's reference
        (key ``partners``) when the reference-contrast term is on."""
        x = super().collate(records)
        x["partners"] = reference_partners(x["refs"]) if self._contrast else []
        if x["partners"]:
            i_s = [i for i, _ in x["partners"]]
            self.model.prepare(
                [x["refs"][j] for _, j in x["partners"]],
                [x["prompts"][i] for i in i_s],
                [x["win"][i] for i in i_s],
                _batch=x["batch"],
            )
        return x

    def loss(self, module: Any, x: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, parts)``: the MIE loss plus ``reference_contrast`` x the rank loss of each candidate with its
        own reference over the same candidate with another pair's (logged as 0 when no pair has a
        partner)."""
        out = module(x["batch"])
        n = len(x["win"])
        loss, parts = self._loss(MIEOutput(out.score[: 2 * n], out.diagnostics[: 2 * n]), x)
        own = [i for i, _ in x.get("partners", [])]
        term = torch.zeros((), device=out.score.device)  # logged as 0 when no pair has a partner
        if own:
            term = rank_loss(
                out.score[own].float(),
                out.score[2 * n :].float(),
                kind=self.cfg.rank_loss,
                margin=self.cfg.margin,
            )
            loss = loss + self.cfg.reference_contrast * term
        # every process logs the same keys (the loop all-reduces them by name)
        return loss, {**parts, "reference_contrast": float(term.detach()), "loss": float(loss.detach())}

    def evaluate(self, module: Any, records: list[Any]) -> dict[str, float]:
        """The validation metrics of :meth:`MIETask.evaluate`, computed without the reference-contrast pairs."""
        self._contrast = False
        try:
            return super().evaluate(module, records)
        finally:
            self._contrast = True


def train_mie(
    config: TrainConfig | None = None,
    *,
    vlm: Any = None,
    processor: Any = None,
    task_cls: type[MIETask] = MIETask,
    **options: Any,
) -> dict[str, Any]:
    """Train MIE on MIB pairs; the trained checkpoint (best validation, else final) is ``result["checkpoint"]``,
    loadable with ``MIEModel.from_pretrained`` / ``create_metric("mie", heads=...)``.

    Pass a :class:`TrainConfig` or its fields as keyword arguments (``recipe="paper"`` (default) or
    ``"released"``, see :data:`RECIPES`; a field given explicitly wins over its recipe). ``vlm``/``processor``
    override ``config.backbone`` (a caller-built VLM; it is modified in place). Returns ``{"out",
    "checkpoint", "steps", "history", "best_metric", "stopped_early", "resumed_from", "n_train", "n_val",
    "recipe"}``.

    Two optimizer steps on toy pairs with the tiny Qwen3.5; the checkpoint loads as a metric:

    >>> import tempfile
    >>> from pathlib import Path
    >>> import genmetrics as gm
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor, toy_mib_pairs
    >>> proc = tiny_qwen35_processor()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = train_mie(data=str(toy_mib_pairs(d, 4)), out=str(Path(d) / "run"), vlm=tiny_qwen35(),
    ...                        processor=proc, unfreeze_layers=1, image_size=64, max_steps=2, batch_pairs=2,
    ...                        grad_accum=1, val_fraction=0.0, progress=False)
    ...     mie = gm.create_metric("mie", heads=result["checkpoint"], backbone=tiny_qwen35(), processor=proc)
    >>> result["steps"], Path(result["checkpoint"]).name, type(mie).__name__
    (2, 'final', 'MIEMetric')
    """
    cfg = _config(config, options)
    records = load_training_pairs(
        cfg.data, subset=cfg.subset or None, seed=cfg.seed
    )  # validated before weights load
    if cfg.val_data:
        train_recs, val_recs = records, load_training_pairs(cfg.val_data)
    else:
        train_recs, val_recs = split_validation(records, cfg.val_fraction, cfg.seed)
    if vlm is None:
        vlm, processor = build_backbone(cfg.backbone)
        backbone_name = cfg.backbone
    elif processor is None:
        raise InputError("train_mie: pass processor= together with vlm=")
    else:
        backbone_name = getattr(getattr(vlm, "config", None), "name_or_path", "") or cfg.backbone
    # a local folder is recorded as its absolute path: the checkpoint then loads from any working folder
    backbone_name = recorded_backbone(resolve_backbone_name(backbone_name))
    loop = loop_config(cfg, has_validation=bool(val_recs))
    model = build_model(
        cfg, vlm, processor, backbone_name=backbone_name, mixed_precision=loop.mixed_precision
    )
    if cfg.reference_contrast and task_cls is MIETask:
        task_cls = ReferenceContrastTask
    task = task_cls(model, cfg, sorted({g for r in train_recs for g in r.generators}))
    res = fit(task, train_recs, loop, val_examples=val_recs or None)
    ckpt = res.best_dir if res.best_dir is not None else res.final_dir
    return {
        "out": str(res.out_dir),
        "checkpoint": str(ckpt),
        "steps": res.steps,
        "history": res.history,
        "best_metric": res.best_metric,
        "stopped_early": res.stopped_early,
        "resumed_from": str(res.resumed_from) if res.resumed_from else None,
        "n_train": len(train_recs),
        "n_val": len(val_recs),
        "recipe": cfg.recipe,
    }


def _config(config: TrainConfig | None, options: dict[str, Any]) -> TrainConfig:
    """``config`` with ``options`` on top; a ``recipe=`` among the options re-fills the recipe's knobs that
    the options do not give."""
    if config is None:
        cfg = TrainConfig(**options)
    elif not options:
        cfg = config
    else:
        base = asdict(config)
        if "recipe" in options:
            base = {k: v for k, v in base.items() if k not in RECIPE_FIELDS}
        cfg = TrainConfig(**{**base, **options})
    cfg.check()
    return cfg


def loop_config(cfg: TrainConfig, *, has_validation: bool) -> TrainLoopConfig:
    """The shared trainer's options for ``cfg`` (checked). The trainer runs ``epochs`` passes or ``max_steps``
    optimizer steps, whichever ends first (``TrainLoopConfig.max_steps`` is a cap): the released recipe's 600
    steps are one epoch of the authors' 9.6K pairs at 16 per step, and 3 epochs of a smaller set stay under.

    >>> cfg = TrainConfig(data="x", out="runs/mie", recipe="released")
    >>> loop = loop_config(cfg, has_validation=True)
    >>> loop.epochs, loop.max_steps, loop.batch_size * loop.grad_accum, loop.early_stopping_patience
    (3, 600, 16, 1)
    >>> loop.extra["recipe"], loop_config(TrainConfig(data="x", out="y"), has_validation=False).max_steps
    ('released', None)
    """
    return TrainLoopConfig(
        out_dir=cfg.out,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,  # a cap: the loop stops at min(max_steps, epochs x steps per epoch)
        batch_size=cfg.batch_pairs,
        grad_accum=cfg.grad_accum,
        warmup_ratio=cfg.warmup,
        scheduler="cosine",
        max_grad_norm=cfg.grad_clip or None,
        seed=cfg.seed,
        eval_every=None,
        early_stopping_patience=cfg.early_stopping_patience if has_validation else None,
        early_stopping_min_delta=cfg.early_stopping_min_delta,
        metric_for_best="loss",
        greater_is_better=False,
        save_every=cfg.save_every,
        resume=cfg.resume,
        overwrite=cfg.overwrite,
        mixed_precision=cfg.mixed_precision or ("bf16" if torch.cuda.is_available() else "no"),
        progress=cfg.progress,
        num_workers=check_workers(cfg.workers),
        extra={k: v for k, v in asdict(cfg).items() if k not in _NOT_RECORDED},
    )


#: options the loop records itself, or that do not change what is trained (a resume may change them)
_NOT_RECORDED = (
    "data",
    "out",
    "val_data",
    "resume",
    "overwrite",
    "progress",
    "save_every",
    "max_steps",
    "epochs",
    "workers",
)


def build_model(
    cfg: TrainConfig, vlm: Any, processor: Any, *, backbone_name: str, mixed_precision: str = "no"
) -> MIEModel:
    """The :class:`MIEModel` that ``cfg`` trains (heads seeded with ``cfg.seed``; on CUDA when there is one).

    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor
    >>> cfg = TrainConfig(data="x", out="y", tuning="lora_layer", unfreeze_layers=1, recipe="released")
    >>> model = build_model(cfg, tiny_qwen35(), tiny_qwen35_processor(), backbone_name="tiny")
    >>> model.tuning, model.image_size, len(model.lora_parameter_names()) > 0
    ('lora_layer', None, True)
    """
    torch.manual_seed(cfg.seed)  # head initialisation
    model = MIEModel(
        vlm,
        processor,
        tuning=cfg.tuning,
        unfreeze_layers=cfg.unfreeze_layers,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        image_size=cfg.image_size,
        token_budget=cfg.token_budget,
        backbone_name=backbone_name,
    )
    if torch.cuda.is_available():
        model.to("cuda")
    if mixed_precision != "no":  # fp32 master weights for what trains, bf16 autocast for the rest
        for p in model.parameters():
            if p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
    if cfg.gradient_checkpointing:
        model.vlm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model
