"""Training MIE on pairwise preferences (MIB-Silver style JSONL, DESIGN section 6).

Loss per pair: ``alpha * -log sigmoid(s_w - s_l) + beta * BCE(diagnostic logits, soft labels)``.
AdamW over the trainable parameters of the tuning mode, linear warmup then cosine decay to 0, gradient
clipping, gradient accumulation and multi-GPU through accelerate (``accelerate launch -m genmetrics train
mie ...``), and resumable checkpoints (trainable weights, optimizer, scheduler, data position) every
``save_every`` optimizer steps. Only the trainable parameters are checkpointed, so a checkpoint of a 4B
backbone is megabytes, not gigabytes.

Micro-batches hold ``batch_pairs`` pairs of similar reference count (so sequences of similar length are
padded together); their order is a function of ``seed`` and the epoch, so a resumed run sees exactly the
batches it had not seen yet.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from genmetrics.errors import InputError

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
STATE_NAME = "trainer_state.json"


@dataclass
class TrainConfig:
    """Options of :func:`train_mie` (and of ``genmetrics train mie``)."""

    data: str
    out: str
    backbone: str = "4b"
    tuning: str = "lora_layer"
    last_k: int = 2
    lora_r: int = 16
    lora_alpha: int | None = None
    lora_dropout: float = 0.05
    instruction: str | None = None  # None: genmetrics.mie.model.DEFAULT_INSTRUCTION (saved with the checkpoint)
    subset: int | None = 9600  # the paper trains on a 9.6K subset of MIB-Silver; None or 0 = all pairs
    epochs: float = 1.0
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup: float = 0.03  # fraction of the optimizer steps
    grad_clip: float = 1.0
    batch_pairs: int = 4  # pairs per micro-batch per process
    grad_accum: int = 4
    alpha: float = 1.0
    beta: float = 1.0
    token_budget: int = 16384
    max_steps: int | None = None  # total optimizer steps (caps the schedule)
    stop_after: int | None = None  # stop this run after N more optimizer steps (schedule unchanged; resume later)
    save_every: int = 200
    keep_checkpoints: int = 2
    seed: int = 0
    resume: bool = True
    vision_cache_size: int = 512
    gradient_checkpointing: bool = False
    mixed_precision: str | None = None  # None: bf16 on CUDA, none on CPU
    log_every: int = 10
    progress: bool = True

    def check(self) -> None:
        from genmetrics.mie.model import TUNING_MODES

        if self.tuning not in TUNING_MODES:
            raise InputError(f"tuning={self.tuning!r}; expected one of {TUNING_MODES}")
        for name in ("batch_pairs", "grad_accum", "token_budget", "save_every", "keep_checkpoints", "lora_r"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}")
        if self.last_k < 0:
            raise InputError(f"last_k must be >= 0, got {self.last_k}")
        if self.epochs <= 0:
            raise InputError(f"epochs must be > 0, got {self.epochs}")
        if self.lr <= 0:
            raise InputError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise InputError(f"warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.alpha < 0 or self.beta < 0 or self.alpha + self.beta == 0:
            raise InputError(f"alpha and beta must be >= 0 and not both 0, got {self.alpha}, {self.beta}")
        if self.subset is not None and self.subset < 0:
            raise InputError(f"subset must be >= 0 (0 = all pairs), got {self.subset}")
        if self.max_steps is not None and self.max_steps < 1:
            raise InputError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.stop_after is not None and self.stop_after < 1:
            raise InputError(f"stop_after must be >= 1, got {self.stop_after}")


def load_training_pairs(path: str | os.PathLike, *, subset: int | None = None, seed: int = 0) -> list[Any]:
    """Read MIB pairs, check every image file exists, and draw a seeded random subset (file order kept)."""
    from genmetrics.data.jsonl import load_mib_pairs

    records = load_mib_pairs(path)
    for r in records:
        for p in (*r.references, *r.candidates):
            if not Path(p).is_file():
                raise InputError(f"{path}: pair {r.id!r} names image {str(p)!r}, which does not exist")
    if subset and subset < len(records):
        keep = sorted(random.Random(seed).sample(range(len(records)), subset))
        records = [records[i] for i in keep]
    return records


def plan_batches(records: list[Any], batch_pairs: int, seed: int, epoch: int) -> list[list[int]]:
    """Micro-batches of ``batch_pairs`` pair indices for one epoch: shuffle, then sort windows of 50
    batches by reference count so a micro-batch pads little, then shuffle the micro-batches."""
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(records)))
    rng.shuffle(order)
    window = batch_pairs * 50
    batches: list[list[int]] = []
    for s in range(0, len(order), window):
        chunk = sorted(order[s:s + window], key=lambda i: len(records[i].references))
        batches += [chunk[j:j + batch_pairs] for j in range(0, len(chunk), batch_pairs)]
    rng.shuffle(batches)
    return batches


def lr_lambda(total: int, warmup: int):
    """Linear warmup over ``warmup`` steps, then cosine decay to 0 at ``total``."""

    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def _pair_inputs(records: list[Any]) -> dict[str, Any]:
    refs = [[str(p) for p in r.references] for r in records]
    prompts = [r.prompt for r in records]
    win = [str(r.candidates[r.preference]) for r in records]
    lose = [str(r.candidates[1 - r.preference]) for r in records]
    has = torch.tensor([r.diagnostics is not None for r in records])
    zeros = (0.0, 0.0, 0.0)
    dw = torch.tensor([r.diagnostics[r.preference] if r.diagnostics else zeros for r in records], dtype=torch.float32)
    dl = torch.tensor([r.diagnostics[1 - r.preference] if r.diagnostics else zeros for r in records], dtype=torch.float32)
    return {"refs": refs, "prompts": prompts, "win": win, "lose": lose, "mask": has, "diag_win": dw, "diag_lose": dl}


def pair_loss(model: Any, core: Any, records: list[Any], alpha: float, beta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of a micro-batch of pairs. ``model`` is what runs forward (possibly DDP-wrapped), ``core``
    the underlying :class:`MIEModel` (tokenisation and the frozen vision tower)."""
    from genmetrics.mie.model import MIEOutput, mie_loss

    x = _pair_inputs(records)
    batch = core.prepare_pairs(x["refs"], x["prompts"], x["win"], x["lose"])
    out = model(batch)
    n = len(records)
    win = MIEOutput(out.score[:n], out.diagnostics[:n])
    lose = MIEOutput(out.score[n:], out.diagnostics[n:])
    dev = out.score.device
    return mie_loss(win, lose, x["diag_win"].to(dev), x["diag_lose"].to(dev), alpha=alpha, beta=beta,
                    diag_mask=x["mask"].to(dev))


def _trainable_state(core: Any) -> dict[str, torch.Tensor]:
    sd = {f"trained.{k}": v for k, v in core.trained_state_dict().items()}
    sd.update({f"adapter.{k}": v for k, v in core.adapter_state_dict().items()})
    return sd


def _load_trainable_state(core: Any, sd: dict[str, torch.Tensor]) -> None:
    core.load_trained_state_dict({k[len("trained."):]: v for k, v in sd.items() if k.startswith("trained.")})
    adapter = {k[len("adapter."):]: v for k, v in sd.items() if k.startswith("adapter.")}
    if adapter:
        from peft import set_peft_model_state_dict

        res = set_peft_model_state_dict(core._peft, adapter)
        bad = [k for k in getattr(res, "unexpected_keys", []) if "lora_" in k]
        if bad:
            raise RuntimeError(f"checkpoint adapter does not match the model: unexpected {bad[:3]}")


def latest_checkpoint(out: Path) -> Path | None:
    root = out / CHECKPOINTS
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / STATE_NAME).is_file()]
    return max(done, key=lambda p: int(p.name.split("_")[1])) if done else None


def _save_checkpoint(out: Path, core: Any, optimizer: Any, scheduler: Any, state: dict[str, Any], keep: int) -> Path:
    from safetensors.torch import save_file

    root = out / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state['step']:08d}"
    tmp = root / f".tmp_step_{state['step']:08d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(_trainable_state(core), str(tmp / "trainable.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state()}, tmp / "optimizer.pt")
    (tmp / STATE_NAME).write_text(json.dumps(state, indent=2), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    done = sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_")), key=lambda p: p.name)
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def train_mie(
    config: TrainConfig | None = None,
    *,
    vlm: Any = None,
    processor: Any = None,
    **options: Any,
) -> dict[str, Any]:
    """Train MIE heads (+ adapter / last layers) on MIB pairs and save them to ``config.out``.

    Pass a :class:`TrainConfig` or its fields as keyword arguments. ``vlm``/``processor`` override
    ``config.backbone`` (a caller-built VLM; it is modified in place: adapter injected, layers trained). Returns ``{"out", "steps",
    "history": [{"step", "loss", "rank", "diag", "lr"}], "resumed_from"}``; the trained checkpoint (loadable
    with ``MIEModel.from_pretrained`` / ``create_metric("mie", heads=out)``) is in ``out``.
    """
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    from genmetrics.backbones.weights import load_state_dict
    from genmetrics.mie.model import MIEModel, build_backbone

    cfg = config if config is not None else TrainConfig(**options)
    if config is not None and options:
        cfg = TrainConfig(**{**asdict(config), **options})
    cfg.check()
    out = Path(cfg.out)
    records = load_training_pairs(cfg.data, subset=cfg.subset or None, seed=cfg.seed)  # validated before weights load

    cuda = torch.cuda.is_available()
    mp = cfg.mixed_precision or ("bf16" if cuda else "no")
    ddp = DistributedDataParallelKwargs(find_unused_parameters=(cfg.alpha == 0 or cfg.beta == 0))
    acc = Accelerator(gradient_accumulation_steps=cfg.grad_accum, mixed_precision=mp, cpu=not cuda,
                      kwargs_handlers=[ddp])
    torch.manual_seed(cfg.seed)

    backbone_name = cfg.backbone
    if vlm is None:
        vlm, processor = build_backbone(cfg.backbone, device=acc.device)
    elif processor is None:
        raise InputError("train_mie: pass processor= together with vlm=")
    else:
        backbone_name = getattr(getattr(vlm, "config", None), "_name_or_path", "") or cfg.backbone
    core = MIEModel(vlm, processor, tuning=cfg.tuning, last_k=cfg.last_k, lora_r=cfg.lora_r,
                    lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, token_budget=cfg.token_budget,
                    vision_cache_size=cfg.vision_cache_size, backbone_name=backbone_name,
                    **({"instruction": cfg.instruction} if cfg.instruction else {}))
    core.to(acc.device)
    if mp != "no":  # train fp32 master weights under bf16 autocast
        for p in core.parameters():
            if p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
    if cfg.gradient_checkpointing:
        core.vlm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        core.vlm.enable_input_require_grads()
    params = [p for p in core.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    world = acc.num_processes
    per_epoch = len(plan_batches(records, cfg.batch_pairs, cfg.seed, 0)) // world * world
    if per_epoch == 0:
        raise InputError(f"{cfg.data}: {len(records)} pairs make no full micro-batch for {world} processes; "
                         "lower --batch-pairs or add pairs")
    total_micro = int(math.ceil(per_epoch * cfg.epochs))
    total_steps = max(1, total_micro // (cfg.grad_accum * world))
    if cfg.max_steps:
        total_steps = min(total_steps, cfg.max_steps)
    warmup = int(round(cfg.warmup * total_steps))
    # accelerate steps a prepared scheduler once per process per optimizer step
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(total_steps * world, warmup * world))
    model, optimizer, scheduler = acc.prepare(core, optimizer, scheduler)

    step, micro_done, resumed_from = 0, 0, None
    history: list[dict[str, Any]] = []
    ckpt = latest_checkpoint(out) if cfg.resume else None
    if ckpt is not None:
        state = json.loads((ckpt / STATE_NAME).read_text(encoding="utf-8"))
        _load_trainable_state(core, load_state_dict(ckpt / "trainable.safetensors"))
        opt = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)
        optimizer.load_state_dict(opt["optimizer"])
        scheduler.load_state_dict(opt["scheduler"])
        inner = getattr(scheduler, "scheduler", scheduler)
        for group, base in zip(optimizer.param_groups, inner.base_lrs):  # the schedule of this run's settings
            group["lr"] = base * inner.lr_lambdas[0](inner.last_epoch)
        torch.set_rng_state(opt["torch_rng"])
        step, micro_done, resumed_from = int(state["step"]), int(state["micro_done"]), str(ckpt)
        history = list(state.get("history", []))
        log.info("resuming from %s (step %d)", ckpt, step)
    elif cfg.resume is False and (out / CHECKPOINTS).exists() and acc.is_main_process:
        shutil.rmtree(out / CHECKPOINTS)

    from genmetrics.cli.common import progress

    model.train()
    core.vlm.visual.eval()
    t0 = time.time()
    acc_loss: list[dict[str, float]] = []
    # ``g`` counts global micro-batches (all processes); process r trains on plan[pos + r].
    g = micro_done
    stop_at = total_steps if not cfg.stop_after else min(total_steps, step + cfg.stop_after)
    remaining = max(0, (stop_at - step) * cfg.grad_accum)
    ticks = progress(range(remaining), desc="train mie", total=remaining, unit="batch") \
        if cfg.progress and acc.is_main_process else range(remaining)
    plan_epoch, plan = -1, []
    for _ in ticks:
        epoch, pos = divmod(g, per_epoch)
        if epoch != plan_epoch:
            plan_epoch, plan = epoch, plan_batches(records, cfg.batch_pairs, cfg.seed, epoch)[:per_epoch]
        batch = [records[i] for i in plan[pos + acc.process_index]]
        g += world
        with acc.accumulate(model):
            loss, parts = pair_loss(model, core, batch, cfg.alpha, cfg.beta)
            acc.backward(loss)
            if acc.sync_gradients and cfg.grad_clip:
                acc.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        acc_loss.append(parts)
        if not acc.sync_gradients:
            continue
        step += 1
        rec = {"step": step, **{k: sum(p[k] for p in acc_loss) / len(acc_loss) for k in ("loss", "rank", "diag")},
               "lr": float(optimizer.param_groups[0]["lr"]), "time_s": round(time.time() - t0, 2)}
        acc_loss = []
        history.append(rec)
        if step % cfg.log_every == 0 or step == 1:
            log.info("step %d/%d loss %.4f (rank %.4f diag %.4f) lr %.2e", step, total_steps, rec["loss"],
                     rec["rank"], rec["diag"], rec["lr"])
        if (step % cfg.save_every == 0 or step == stop_at) and step < total_steps:
            acc.wait_for_everyone()
            if acc.is_main_process:
                _save_checkpoint(out, core, optimizer, scheduler,
                                 {"step": step, "micro_done": g, "history": history, "config": asdict(cfg)},
                                 cfg.keep_checkpoints)
        if step >= stop_at:
            break

    acc.wait_for_everyone()
    if step < total_steps:  # stopped early on purpose (stop_after): the checkpoint above resumes it
        return {"out": str(out), "steps": step, "history": history, "resumed_from": resumed_from, "finished": False}
    if acc.is_main_process:
        model.eval()
        core.save_pretrained(out)
        gens = sorted({g for r in records for g in r.generators})
        (out / "training.json").write_text(json.dumps({
            "config": asdict(cfg), "steps": step, "pairs": len(records), "generators": gens,
            "history": history, "resumed_from": resumed_from}, indent=2), encoding="utf-8")
    return {"out": str(out), "steps": step, "history": history, "resumed_from": resumed_from, "finished": True}
