"""Real-vs-generated comparison behind ``genmetrics compare``: scoring two image folders with
RA-CLIPScore, SaD / PaD / R-SaD with bootstrap intervals, ``summary.json`` and a Markdown report.

The per-image score tables are kept here (the CLI needs them for bootstrap intervals); the numbers
equal those of the streaming metrics ``sad``, ``pad`` and ``rsad`` on the same images.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genmetrics.functional import divergence as D


@dataclass
class Example:
    """One image kept for the per-image attribute maps."""

    role: str  # "real" | "generated"
    name: str
    image: torch.Tensor  # [3,H,W] float in [0,1] at the model's input size
    score: torch.Tensor  # [C]
    patch_scores: torch.Tensor  # [P,C]


@dataclass
class ScoredSet:
    scores: torch.Tensor  # [N,C] float64
    map_sum: torch.Tensor  # [P,C] float64
    examples: list[Example] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.scores.shape[0])

    @property
    def map_mean(self) -> torch.Tensor:
        return self.map_sum / max(self.n, 1)


def _unnormalise(x: torch.Tensor, model: Any) -> torch.Tensor:
    from genmetrics.backbones.openclip import clip_preprocess_cfg

    cfg = clip_preprocess_cfg(model)
    mean = torch.tensor(cfg["mean"], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x * std + mean).clamp(0, 1)


@torch.no_grad()
def score_images(scorer: Any, paths: Sequence[Any], attributes: list[str], *, role: str, batch_size: int = 32,
                 keep_examples: int = 4, progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
                 data_range: float = 1.0) -> ScoredSet:
    """RA-CLIPScore of every image: ``[N,C]`` scores, summed refined patch maps and a few examples."""
    from genmetrics.backbones.openclip import clip_image_batch

    model = scorer.model
    starts = range(0, len(paths), batch_size)
    it = progress(starts) if progress is not None else starts
    scores, map_sum, examples = [], None, []
    for start in it:
        chunk = list(paths[start:start + batch_size])
        x = clip_image_batch(chunk, model, data_range=data_range, name=role)
        out = scorer(x, attributes)
        scores.append(out.score.double().cpu())
        ps = out.patch_scores.double().cpu()
        map_sum = ps.sum(0) if map_sum is None else map_sum + ps.sum(0)
        if len(examples) < keep_examples:
            imgs = _unnormalise(x.float(), model).cpu()
            for i in range(min(len(chunk), keep_examples - len(examples))):
                name = Path(chunk[i]).name if isinstance(chunk[i], (str, Path)) else f"{role}[{start + i}]"
                examples.append(Example(role, name, imgs[i], out.score[i].double().cpu(), ps[i]))
    return ScoredSet(torch.cat(scores, 0), map_sum, examples)


# ------------------------------------------------------------------------------------ bootstrap
def bootstrap_means(real: torch.Tensor, gen: torch.Tensor, *, n_boot: int = 200, seed: int = 0,
                    direction: str = "gen||real", eps: float = D.DEFAULT_EPS, pad_budget: float = 2e11,
                    alpha: float = 0.05) -> dict[str, Any]:
    """Percentile bootstrap of mean SaD and mean PaD: both sets resampled with replacement
    (independently), statistics from weighted sufficient statistics. PaD is skipped (``None``) when
    ``n_boot * N * C^2`` exceeds ``pad_budget``."""
    if n_boot <= 0:
        return {"sad": None, "pad": None, "n_boot": 0}
    rng = np.random.default_rng(seed)
    real, gen = real.double(), gen.double()
    c = real.shape[1]
    do_pad = c >= 2 and n_boot * (real.shape[0] + gen.shape[0]) * c * c <= pad_budget
    sads, pads = [], []
    for _ in range(n_boot):
        stats = []
        for x in (real, gen):
            w = torch.from_numpy(np.bincount(rng.integers(0, x.shape[0], x.shape[0]), minlength=x.shape[0])).double()
            n = torch.tensor(float(x.shape[0]), dtype=torch.float64)
            s = w @ x
            stats.append((n, s, w @ (x * x), (x * w[:, None]).T @ x if do_pad else None))
        (nr, sr, qr, cr), (ng, sg, qg, cg) = stats
        sads.append(float(D.sad_from_stats((nr, sr, qr), (ng, sg, qg), direction=direction, eps=eps).mean()))
        if do_pad:
            pads.append(float(D.pad_from_stats((nr, sr, cr), (ng, sg, cg), direction=direction, eps=eps).mean()))

    def ci(v: list[float]) -> list[float] | None:
        if not v:
            return None
        lo, hi = np.quantile(np.asarray(v), [alpha / 2, 1 - alpha / 2])
        return [float(lo), float(hi)]

    return {"sad": ci(sads), "pad": ci(pads) if do_pad else None, "n_boot": int(n_boot), "level": 1 - alpha,
            "seed": int(seed)}


# ------------------------------------------------------------------------------------- summary
def summarize(real: ScoredSet, gen: ScoredSet, attributes: list[str], grid: tuple[int, int], *,
              direction: str = "gen||real", eps: float = D.DEFAULT_EPS, top_k: int = 10, n_boot: int = 200,
              seed: int = 0) -> dict[str, Any]:
    """Everything ``summary.json`` holds (plain Python types)."""
    sad = D.sad(real.scores, gen.scores, direction=direction, eps=eps)
    mr, mg = real.scores.mean(0), gen.scores.mean(0)
    order = torch.argsort(sad, descending=True).tolist()
    out: dict[str, Any] = {
        "attributes": list(attributes),
        "n_real": real.n,
        "n_generated": gen.n,
        "kl_direction": direction,
        "variance_ridge": eps,
        "units": "nats (x1000 columns match the paper's x10^-3 tables)",
    }
    boot = bootstrap_means(real.scores, gen.scores, n_boot=n_boot, seed=seed, direction=direction, eps=eps)
    out["sad"] = {
        "mean": float(sad.mean()),
        "mean_x1000": 1000 * float(sad.mean()),
        "ci95": boot["sad"],
        "per_attribute": [
            {"attribute": attributes[i], "sad": float(sad[i]), "mean_real": float(mr[i]), "mean_generated": float(mg[i])}
            for i in order
        ],
    }
    if len(attributes) >= 2:
        pad = D.pad(real.scores, gen.scores, direction=direction, eps=eps)
        pairs = list(combinations(range(len(attributes)), 2))
        k = min(top_k, pad.numel())
        top = torch.topk(pad, k).indices.tolist()
        out["pad"] = {
            "mean": float(pad.mean()),
            "mean_x1000": 1000 * float(pad.mean()),
            "ci95": boot["pad"],
            "top_pairs": [{"pair": [attributes[pairs[i][0]], attributes[pairs[i][1]]], "pad": float(pad[i])} for i in top],
        }
    else:
        out["pad"] = None
    rmap = real.map_mean - gen.map_mean
    rank = rmap.abs().mean(0)
    out["rsad"] = {
        "grid": list(grid),
        "mean": float(rank.mean()),
        "ranking": [
            {"attribute": attributes[i], "mean_abs_rsad": float(rank[i]), "max_rsad": float(rmap[:, i].max()),
             "min_rsad": float(rmap[:, i].min())}
            for i in torch.argsort(rank, descending=True).tolist()
        ],
    }
    out["bootstrap"] = {k: boot[k] for k in ("n_boot", "level", "seed") if k in boot}
    return out


def _fmt(x: float | None, scale: float = 1000.0) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x * scale:.3f}"


def markdown_report(summary: dict[str, Any], images: dict[str, str], *, real: str, generated: str,
                    weights: str, top_k: int = 10) -> str:
    """The Markdown report (values x1000, i.e. in 10^-3 nats like the paper's tables)."""
    s, p, r = summary["sad"], summary["pad"], summary["rsad"]
    lines = [
        "# RA-CLIPScore comparison",
        "",
        f"- real: `{real}` ({summary['n_real']} images)",
        f"- generated: `{generated}` ({summary['n_generated']} images)",
        f"- backbone: `{weights}`; {len(summary['attributes'])} attributes; KL direction `{summary['kl_direction']}`",
        "",
        "| metric | value (x10^-3 nats) | 95% bootstrap CI |",
        "|---|---:|---|",
        f"| mean SaD | {_fmt(s['mean'])} | {_ci(s['ci95'])} |",
    ]
    if p is not None:
        lines.append(f"| mean PaD | {_fmt(p['mean'])} | {_ci(p['ci95'])} |")
    lines += [f"| mean R-SaD ranking score | {_fmt(r['mean'])} | |", ""]
    if min(summary["n_real"], summary["n_generated"]) < 100:
        lines += ["Note: with fewer than 100 images per set the percentile bootstrap of a KL divergence is "
                  "unreliable (resampling shrinks variances, which inflates KL); the estimate can fall outside "
                  "its interval. Use a few hundred images or more per set for intervals you can quote.", ""]
    lines += ["## SaD per attribute (largest first)", "",
              "| attribute | SaD x10^-3 | mean score real | mean score generated |", "|---|---:|---:|---:|"]
    for row in s["per_attribute"][:top_k]:
        lines.append(f"| {row['attribute']} | {_fmt(row['sad'])} | {row['mean_real']:.4f} | {row['mean_generated']:.4f} |")
    if "sad_bar" in images:
        lines += ["", f"![SaD]({images['sad_bar']})"]
    if p is not None:
        lines += ["", "## Top PaD pairs", "", "| pair | PaD x10^-3 |", "|---|---:|"]
        for row in p["top_pairs"]:
            lines.append(f"| {row['pair'][0]} & {row['pair'][1]} | {_fmt(row['pad'])} |")
        if "pad_bar" in images:
            lines += ["", f"![PaD]({images['pad_bar']})"]
    lines += ["", "## R-SaD ranking (mean_j |R-SaD_j|)", "",
              "Red: the attribute is more present in that region in the real set; blue: in the generated set.", "",
              "| attribute | mean abs R-SaD x10^-3 | max | min |", "|---|---:|---:|---:|"]
    for row in r["ranking"][:top_k]:
        lines.append(f"| {row['attribute']} | {_fmt(row['mean_abs_rsad'])} | {row['max_rsad']:+.4f} | {row['min_rsad']:+.4f} |")
    for key, title in (("rsad_heatmaps", "R-SaD on the patch grid"), ("rsad_overlay", "R-SaD overlay"),
                       ("attribute_maps", "Per-image attribute maps (refined patch scores, Eq. 8)")):
        if key in images:
            lines += ["", f"### {title}", "", f"![{title}]({images[key]})"]
    lines.append("")
    return "\n".join(lines)


def _ci(ci: list[float] | None) -> str:
    return "n/a" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"
