"""Training TPIPS on odd-one-out human votes (Eq. 2, Appendix C.1).

For a triplet ``(x1, x2, x3)`` and aspect ``c`` with vote distribution ``y``: ``s_bar_k = f(x_i, x_j | c)``
for ``{i,j} = {1,2,3} \\ {k}``, ``p = softmax(s_bar / tau)`` and the loss is ``-sum_k y_k log p_k``. The
triplet-head variant trains its 3-way answer head with the same cross-entropy, each triplet shown in a
random order (permutation augmentation).

* LoRA (peft) on the language tower only: r=16, alpha=2r, dropout 0.05 (vision tower frozen); the
  mid-fusion MLPs, the early-fusion register vector and the triplet head are trained in full (the triplet
  head at ``head_lr_mult`` = 5x the learning rate, as in the paper).
* AdamW (weight decay 0.01), gradient clipping 1.0, linear warmup over 3% of the steps then cosine to 0.
* Learning rate 5e-5 (late), 1e-4 (early, mid), 3e-5 (triplet); effective batch 128 (late, early) or 32
  (mid, triplet); one epoch; every (triplet, aspect) record is one example.
* Multi-GPU through accelerate (``accelerate launch -m genmetrics train tpips ...``): each optimizer step
  takes ``batch_size`` examples from one seeded global order, split over processes and
  ``batch_size / (micro_batch_size * processes)`` accumulation micro-steps; bf16 autocast and gradient
  checkpointing on CUDA, fp32 on CPU.
* ``OUT/checkpoints/step_XXXXXXX`` (trainable weights, optimizer, scheduler, RNG, step) every
  ``save_every`` steps, the last ``keep_checkpoints`` kept; ``resume=True`` continues from the newest.
  Validation agreement every ``val_every`` steps into ``OUT/val_log.jsonl``; the loss into
  ``OUT/train_log.jsonl``; the final adapter (peft + ``tpips.json`` + head) into ``OUT/adapter``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from genmetrics.data.jsonl import OddOneOutRecord, load_odd_one_out
from genmetrics.errors import InputError

__all__ = ["TrainConfig", "TrainResult", "train_tpips", "DEFAULT_LR", "DEFAULT_BATCH"]

DEFAULT_LR = {"late": 5e-5, "early": 1e-4, "mid": 1e-4, "triplet": 3e-5}
DEFAULT_BATCH = {"late": 128, "early": 128, "mid": 32, "triplet": 32}
TRAIN_VARIANTS = ("late", "mid", "early", "triplet")


@dataclass
class TrainConfig:
    """Hyperparameters (defaults: the paper's Table 8)."""

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
    head_lr_mult: float | None = None  # default 5 for the triplet head, 1 otherwise
    probe_layers: int = 20
    image_size: int | None = None  # side of the "square" policy; None: resize="smart"
    resize: str | None = None  # "smart" (official Qwen3-VL-Embedding policy, default) or "square"
    val_every: int = 100
    save_every: int = 200
    keep_checkpoints: int = 2
    log_every: int = 1
    seed: int = 0
    gradient_checkpointing: bool | None = None  # default: on CUDA
    mixed_precision: str | None = None  # default: "bf16" on CUDA, "no" on CPU
    num_workers: int = 0
    val_batch_size: int = 16

    def resolved(self) -> TrainConfig:
        if self.variant not in TRAIN_VARIANTS:
            raise InputError(f"variant={self.variant!r}: expected one of {', '.join(TRAIN_VARIANTS)}")
        c = TrainConfig(**{**asdict(self)})
        c.lr = DEFAULT_LR[c.variant] if c.lr is None else float(c.lr)
        c.batch_size = DEFAULT_BATCH[c.variant] if c.batch_size is None else int(c.batch_size)
        c.lora_alpha = 2 * c.lora_r if c.lora_alpha is None else int(c.lora_alpha)
        c.head_lr_mult = (5.0 if c.variant == "triplet" else 1.0) if c.head_lr_mult is None else float(c.head_lr_mult)
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
        return c


@dataclass
class TrainResult:
    out_dir: Path
    adapter_dir: Path
    steps: int
    losses: list[float]
    val: list[dict[str, Any]]
    model: Any = None  # the trained TPIPS model (unwrapped), in eval mode


# --------------------------------------------------------------------------------------------- data
def _records(data: Any, name: str) -> list[OddOneOutRecord]:
    recs = load_odd_one_out(data) if isinstance(data, (str, os.PathLike)) else list(data)
    if not recs:
        raise InputError(f"{name}: no training records")
    for r in recs:
        if not isinstance(r, OddOneOutRecord):
            raise InputError(f"{name}: expected odd-one-out records (genmetrics.data.jsonl.OddOneOutRecord), got "
                             f"{type(r).__name__}")
        for p in r.images:
            if isinstance(p, (str, os.PathLike)) and not Path(p).is_file():
                raise InputError(f"{name}: record {r.id!r}: image file {str(p)!r} does not exist")
    return recs


def _example_stream(n: int, seed: int, start: int, count: int) -> list[int]:
    """Positions ``start .. start+count`` of the infinite stream of per-epoch seeded permutations."""
    out: list[int] = []
    pos = start
    while len(out) < count:
        epoch, off = divmod(pos, n)
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g).tolist()
        take = min(n - off, count - len(out))
        out += perm[off:off + take]
        pos += take
    return out


class _Decode:
    """Picklable decoder for DataLoader workers: a record -> resized image tensors."""

    def __init__(self, image_size: int | None = None):
        self.image_size = image_size  # the model applies its resize policy when scoring

    def __call__(self, rec: OddOneOutRecord) -> tuple[list[torch.Tensor], str, torch.Tensor]:
        from genmetrics.data.images import load_batch

        imgs = load_batch(list(rec.images), name=f"record {rec.id}")
        return imgs, rec.aspect, torch.tensor(rec.votes, dtype=torch.float64)


class _MicroBatches(torch.utils.data.Dataset):
    def __init__(self, records: list[OddOneOutRecord], batches: list[list[int]], decode: _Decode):
        self.records, self.batches, self.decode = records, batches, decode

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        items = [self.decode(self.records[j]) for j in self.batches[i]]
        return {"x": [[it[0][k] for it in items] for k in range(3)], "aspects": [it[1] for it in items],
                "votes": torch.stack([it[2] for it in items]), "index": self.batches[i]}


def _first(batch: list[Any]) -> Any:
    return batch[0]


# --------------------------------------------------------------------------------------------- helpers
def soft_cross_entropy(logits: torch.Tensor, votes: torch.Tensor) -> torch.Tensor:
    """``-sum_k y_k log softmax(logits)_k`` per row, with ``y = votes / votes.sum()``."""
    y = votes.to(logits.device, torch.float32)
    y = y / y.sum(-1, keepdim=True)
    return -(y * torch.log_softmax(logits.float(), -1)).sum(-1)


def lr_lambda(total_steps: int, warmup_ratio: float):
    warm = int(math.ceil(warmup_ratio * total_steps))

    def f(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, total_steps - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def _bar(total: int, initial: int, disable: bool):
    from tqdm.auto import tqdm

    env = os.environ.get("GENMETRICS_PROGRESS", "")
    off = disable or env == "0" or (not sys.stderr.isatty() and env != "1")
    return tqdm(total=total, initial=initial, desc="train tpips", unit="step", disable=off, file=sys.stderr,
                dynamic_ncols=True)


def _trainable(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _latest_checkpoint(out: Path) -> Path | None:
    ck = sorted((out / "checkpoints").glob("step_*")) if (out / "checkpoints").is_dir() else []
    ck = [c for c in ck if (c / "state.json").is_file()]
    return ck[-1] if ck else None


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


def build_model(config: TrainConfig, backbone: Any, processor: Any) -> torch.nn.Module:
    """Wrap ``backbone`` with LoRA (language tower only) and build the TPIPS model of ``config.variant``."""
    from genmetrics.backbones.hf import add_lora
    from genmetrics.tpips.model import TPIPSModel, TPIPSTripletModel

    if not hasattr(backbone, "peft_config"):
        import warnings

        with warnings.catch_warnings():  # peft calls a deprecated transformers alias (is_gradient_checkpointing)
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            backbone = add_lora(backbone, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout)
    if config.variant == "triplet":
        model: torch.nn.Module = TPIPSTripletModel(backbone, processor, image_size=config.image_size)  # square
    else:
        model = TPIPSModel(backbone, processor, config.variant, image_size=config.image_size, resize=config.resize,
                           temperature=config.temperature, probe_layers=config.probe_layers)
    for n, p in model.named_parameters():
        if "visual" in n:
            p.requires_grad_(False)
    return model


# --------------------------------------------------------------------------------------------- main
def train_tpips(data: Any, out_dir: str | os.PathLike, *, config: TrainConfig | None = None, backbone: Any = None,
                processor: Any = None, weights: str | None = None, val_data: Any = None, resume: bool = False,
                progress: bool = True) -> TrainResult:
    """Train TPIPS on odd-one-out records (a JSONL path or a list of ``OddOneOutRecord``).

    Inputs are validated before any weights load. ``backbone``/``processor``: a Qwen3-VL model and its
    processor (the tiny ones in tests); otherwise ``weights`` (default ``Qwen/Qwen3-VL-Embedding-2B``,
    ``Qwen/Qwen3-VL-8B-Instruct`` for the triplet head) is loaded with ``load_vlm``.
    """
    from accelerate import Accelerator
    from safetensors.torch import load_file, save_file

    from genmetrics.functional.agreement import odd_one_out_agreement

    cfg = (config or TrainConfig()).resolved()
    records = _records(data, "data")
    val_records = _records(val_data, "val_data") if val_data is not None else []
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {str(out)!r} is a file; expected a folder")
    ckpt = _latest_checkpoint(out) if resume else None
    if not resume and (out / "adapter").exists():
        raise InputError(f"{str(out)!r} already holds a trained adapter; pass resume=True (--resume) to continue or "
                         "choose another --out folder")

    cuda = torch.cuda.is_available()
    mp = cfg.mixed_precision or ("bf16" if cuda else "no")
    from accelerate.utils import DistributedDataParallelKwargs

    # mid fusion may leave LoRA layers after the last probe layer without gradient
    acc = Accelerator(mixed_precision=mp, cpu=not cuda,  # cpu=True lets torchrun/gloo CPU runs be distributed
                      kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=cfg.variant == "mid")])
    world, rank = acc.num_processes, acc.process_index
    per_step_rank = cfg.batch_size // world
    if per_step_rank < 1 or cfg.batch_size % world:
        raise InputError(f"batch_size {cfg.batch_size} must be a positive multiple of the number of processes ({world})")
    micro = min(cfg.micro_batch_size, per_step_rank)
    accum = int(math.ceil(per_step_rank / micro))
    n = len(records)
    total = cfg.max_steps or int(math.ceil(cfg.epochs * n / cfg.batch_size))

    torch.manual_seed(cfg.seed)
    base_weights = weights
    if backbone is None:
        from genmetrics.backbones.hf import load_vlm
        from genmetrics.tpips.model import DEFAULT_WEIGHTS, TRIPLET_WEIGHTS

        base_weights = weights or (TRIPLET_WEIGHTS if cfg.variant == "triplet" else DEFAULT_WEIGHTS)
        backbone, processor = load_vlm(base_weights, device=acc.device, for_generation=cfg.variant == "triplet")
    elif processor is None:
        raise InputError("processor: pass the backbone's processor together with backbone=")
    model = build_model(cfg, backbone, processor)
    model.to(acc.device)
    gc = cuda if cfg.gradient_checkpointing is None else cfg.gradient_checkpointing
    if gc:
        bb = model.backbone
        if hasattr(bb, "activation_checkpointing_enable"):  # transformers >= 5.x name
            bb.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            bb.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    params = _trainable(model)
    if not params:
        raise RuntimeError("no trainable parameters after adding LoRA")
    head_names = {n for n in params if "lora_" not in n}
    groups = [{"params": [p for n, p in params.items() if n not in head_names], "lr": cfg.lr},
              {"params": [p for n, p in params.items() if n in head_names], "lr": cfg.lr * cfg.head_lr_mult}]
    groups = [g for g in groups if g["params"]]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, cfg.warmup_ratio))

    start = 0
    rng_state = None
    if ckpt is not None:
        sd = load_file(str(ckpt / "trainable.safetensors"))
        missing = [k for k in params if k not in sd]
        if missing:
            raise InputError(f"checkpoint {ckpt} does not match this model (missing {missing[:2]}); resume with the same "
                             "variant and options")
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(sd[k].to(p.device, p.dtype))
        opt.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True))
        sched.load_state_dict(torch.load(ckpt / "scheduler.pt", map_location="cpu", weights_only=True))
        rng_state = torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=True)["cpu"]
        start = int(json.loads((ckpt / "state.json").read_text())["step"])
    model, opt = acc.prepare(model, opt)
    raw = acc.unwrap_model(model)

    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "base_weights": base_weights,
                                                           "n_train": n, "n_val": len(val_records),
                                                           "processes": world, "total_steps": total}, indent=2))
    acc.wait_for_everyone()

    # this process's micro-batches for steps start..total
    batches: list[list[int]] = []
    stream = _example_stream(n, cfg.seed, start * cfg.batch_size, (total - start) * cfg.batch_size)
    for s_i in range(total - start):
        ids = stream[s_i * cfg.batch_size:(s_i + 1) * cfg.batch_size][rank::world]
        batches += [ids[i:i + micro] for i in range(0, len(ids), micro)]
        while len(batches) % accum:
            batches.append([])
    loader = torch.utils.data.DataLoader(
        _MicroBatches(records, [b for b in batches], _Decode(cfg.image_size)), batch_size=1, shuffle=False,
        num_workers=cfg.num_workers, collate_fn=_first)

    def validate(step: int) -> dict[str, Any] | None:
        if not val_records:
            return None
        was = raw.training
        raw.eval()
        mine = val_records[rank::world]
        preds = []
        with torch.no_grad(), acc.autocast():
            for i in range(0, len(mine), cfg.val_batch_size):
                chunk = mine[i:i + cfg.val_batch_size]
                x = [[r.images[k] for r in chunk] for k in range(3)]
                preds.append(raw.odd_one_out(*x, [r.aspect for r in chunk]).double().cpu())
        raw.train(was)
        width = int(math.ceil(len(val_records) / world))
        local = torch.full((width, 3), float("nan"), dtype=torch.float64)
        if preds:
            p = torch.cat(preds)
            local[:p.shape[0]] = p
        allp = acc.gather(local.to(acc.device)).cpu().reshape(world, width, 3)
        order = torch.empty((len(val_records), 3), dtype=torch.float64)
        for r in range(world):
            idx = list(range(r, len(val_records), world))
            order[idx] = allp[r, :len(idx)]
        mean, se = odd_one_out_agreement(order, torch.tensor([r.votes for r in val_records]))
        row = {"step": step, "agreement": mean, "stderr": se, "n": len(val_records)}
        if acc.is_main_process:
            _append_jsonl(out / "val_log.jsonl", row)
        return row

    def save_checkpoint(step: int) -> None:
        if acc.is_main_process:
            d = out / "checkpoints" / f"step_{step:07d}"
            tmp = d.with_name(d.name + ".tmp")
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in _trainable(raw).items()},
                      str(tmp / "trainable.safetensors"))
            torch.save(opt.state_dict(), tmp / "optimizer.pt")
            torch.save(sched.state_dict(), tmp / "scheduler.pt")
            torch.save({"cpu": torch.get_rng_state()}, tmp / "rng.pt")
            (tmp / "state.json").write_text(json.dumps({"step": step, "total_steps": total}))
            if d.exists():
                shutil.rmtree(d)
            tmp.rename(d)
            old = sorted((out / "checkpoints").glob("step_*"))
            for o in old[:-max(1, cfg.keep_checkpoints)]:
                shutil.rmtree(o, ignore_errors=True)
        acc.wait_for_everyone()

    losses: list[float] = []
    vals: list[dict[str, Any]] = []
    model.train()
    raw.train()
    trainable_list = list(_trainable(raw).values())
    bar = _bar(total, start, not (progress and acc.is_main_process))
    it = iter(loader)  # (creating the iterator draws from the global RNG: restore the checkpoint's RNG after it)
    if rng_state is not None:
        torch.set_rng_state(rng_state)
    gen = torch.Generator().manual_seed(cfg.seed + 7919 * (rank + 1))
    perms = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    for step in range(start, total):
        gen.manual_seed(cfg.seed * 31 + step * 7919 + rank)
        step_loss = torch.zeros((), device=acc.device)
        for m_i in range(accum):
            mb = next(it)
            ctx = acc.no_sync(model) if m_i < accum - 1 else contextlib.nullcontext()
            if not mb["index"]:
                # padding micro-step (uneven split): a zero loss that still touches every parameter for DDP
                with ctx:
                    acc.backward(sum(p.sum() * 0.0 for p in trainable_list))
                continue
            with ctx, acc.autocast():
                x, asp, votes = mb["x"], mb["aspects"], mb["votes"]
                if cfg.variant == "triplet":
                    pr = [perms[int(torch.randint(6, (1,), generator=gen))] for _ in asp]
                    logits = model(*x, asp, pr)
                else:
                    logits = model(*x, asp)
                loss_vec = soft_cross_entropy(logits, votes)
                loss = loss_vec.sum() / per_step_rank
                acc.backward(loss)
            step_loss += loss.detach()
        grad_norm = acc.clip_grad_norm_(trainable_list, cfg.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        mean_loss = float(acc.reduce(step_loss, reduction="mean"))
        losses.append(mean_loss)
        done = step + 1
        if acc.is_main_process and (done % max(1, cfg.log_every) == 0 or done == total):
            _append_jsonl(out / "train_log.jsonl", {"step": done, "loss": mean_loss, "lr": sched.get_last_lr()[0],
                                                   "grad_norm": float(grad_norm) if grad_norm is not None else None})
        bar.update(1)
        bar.set_postfix(loss=f"{mean_loss:.4f}")
        if cfg.val_every and done % cfg.val_every == 0 and done != total:
            v = validate(done)
            if v:
                vals.append(v)
        if cfg.save_every and done % cfg.save_every == 0 and done != total:
            save_checkpoint(done)
    bar.close()
    v = validate(total)
    if v:
        vals.append(v)
    save_checkpoint(total)
    adapter_dir = out / "adapter"
    if acc.is_main_process:
        raw.save_pretrained(adapter_dir, base_weights=base_weights)
        summary = {"steps": total, "final_loss": losses[-1] if losses else None, "val": vals,
                   "adapter": str(adapter_dir)}
        from genmetrics.data.results import atomic_write_json, manifest

        atomic_write_json(out / "summary.json", summary)
        atomic_write_json(out / "manifest.json", manifest(task="train tpips", config=asdict(cfg),
                                                           base_weights=base_weights))
    acc.wait_for_everyone()
    raw.eval()
    return TrainResult(out_dir=out, adapter_dir=adapter_dir, steps=total, losses=losses, val=vals, model=raw)
