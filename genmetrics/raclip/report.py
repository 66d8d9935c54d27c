"""Real-vs-generated comparison behind ``genmetrics compare``: scoring two image folders with
RA-CLIPScore, SaD / PaD / R-SaD with bootstrap intervals, ``summary.json`` and a Markdown report.

The per-image score tables are kept here (the CLI needs them for bootstrap intervals); the numbers
equal those of the streaming metrics ``sad``, ``pad`` and ``rsad`` on the same images.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genmetrics.backbones.clip_preprocess import clip_image_batch, clip_preprocess_cfg
from genmetrics.data.io.pipeline import decoded
from genmetrics.errors import InputError
from genmetrics.functional import divergence as D


@dataclass
class Example:
    """One image kept for the per-image attribute maps.

    >>> ex = Example("real", "000.png", torch.zeros(3, 32, 32), torch.zeros(2), torch.zeros(16, 2))
    >>> ex.role, ex.name, tuple(ex.patch_scores.shape)  # [patches, attributes]
    ('real', '000.png', (16, 2))
    """

    role: str  # "real" | "generated"
    name: str
    image: torch.Tensor  # [3,H,W] float in [0,1] at the model's input size
    score: torch.Tensor  # [C]
    patch_scores: torch.Tensor  # [P,C]


@dataclass
class ScoredSet:
    """The scores of one image set: ``scores [N,C]``, the summed refined patch maps ``[P,C]`` (``map_mean``
    is their mean) and a few kept examples.

    >>> s = ScoredSet(torch.ones(4, 2, dtype=torch.float64), torch.full((16, 2), 8.0, dtype=torch.float64))
    >>> s.n, s.map_mean[0].tolist()
    (4, [2.0, 2.0])
    """

    scores: torch.Tensor  # [N,C] float64
    map_sum: torch.Tensor  # [P,C] float64
    examples: list[Example] = field(default_factory=list)

    @property
    def n(self) -> int:
        """The number of images scored."""
        return int(self.scores.shape[0])

    @property
    def map_mean(self) -> torch.Tensor:
        """The mean refined patch map ``[P,C]`` over the images (zeros for an empty set)."""
        return self.map_sum / max(self.n, 1)


def _unnormalise(x: torch.Tensor, model: Any) -> torch.Tensor:
    cfg = clip_preprocess_cfg(model)
    mean = torch.tensor(cfg["mean"], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x * std + mean).clamp(0, 1)


@torch.no_grad()
def score_images(
    scorer: Any,
    paths: Sequence[Any],
    attributes: list[str],
    *,
    role: str,
    batch_size: int = 32,
    keep_examples: int = 4,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    data_range: float = 1.0,
    workers: int | None = 0,
) -> ScoredSet:
    """RA-CLIPScore of every image: ``[N,C]`` scores, summed refined patch maps and a few examples.

    >>> import tempfile
    >>> from genmetrics.raclip.model import RegionAttributeScorer
    >>> from genmetrics.testing import random_images, tiny_clip, write_images
    >>> scorer = RegionAttributeScorer(*tiny_clip())
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_images(d, random_images(6, 32, seed=1))
    ...     scored = score_images(scorer, paths, ["smiling", "wearing hat"], role="real", keep_examples=2)
    >>> tuple(scored.scores.shape), tuple(scored.map_sum.shape), [e.name for e in scored.examples]
    ((6, 2), (16, 2), ['000.png', '001.png'])

    File paths are decoded once each by the input pipeline (``workers`` processes, ahead of the model).
    """
    model = scorer.model
    starts = range(0, len(paths), batch_size)
    it = progress(starts) if progress is not None else starts
    scores: list[torch.Tensor] = []
    map_sum: torch.Tensor | None = None
    examples: list[Example] = []
    all_files = all(isinstance(p, (str, os.PathLike)) for p in paths)
    stream = decoded(list(paths), batch_size=batch_size, workers=workers) if all_files else None
    with contextlib.closing(stream) if stream is not None else contextlib.nullcontext():
        for start in it:
            chunk = list(paths[start : start + batch_size])
            inputs: list[Any] = chunk
            if stream is not None:  # the same consecutive chunks, decoded in the workers
                inputs = []
                for _, o in next(stream):
                    if isinstance(o, Exception):
                        raise o
                    inputs.append(o[0])
            x = clip_image_batch(inputs, model, data_range=data_range, name=role)
            out = scorer(x, attributes)
            scores.append(out.score.double().cpu())
            ps = out.patch_scores.double().cpu()
            map_sum = ps.sum(0) if map_sum is None else map_sum + ps.sum(0)
            if len(examples) < keep_examples:
                imgs = _unnormalise(x.float(), model).cpu()
                for i in range(min(len(chunk), keep_examples - len(examples))):
                    name = (
                        Path(chunk[i]).name if isinstance(chunk[i], (str, Path)) else f"{role}[{start + i}]"
                    )
                    examples.append(Example(role, name, imgs[i], out.score[i].double().cpu(), ps[i]))
    if map_sum is None:
        raise InputError(f"{role} images: none to score; pass at least one image")
    return ScoredSet(torch.cat(scores, 0), map_sum, examples)


# ------------------------------------------------------------------------------------ bootstrap
def bootstrap_means(
    real: torch.Tensor,
    gen: torch.Tensor,
    *,
    n_boot: int = 200,
    seed: int = 0,
    direction: str = "gen||real",
    eps: float = D.DEFAULT_EPS,
    pad_budget: float = 2e11,
    alpha: float = 0.05,
    method: str = "inversion",
    bca_budget: float = 5e9,
) -> dict[str, Any]:
    """Estimates and ``1 - alpha`` intervals of mean SaD and mean PaD: ``sad`` / ``pad`` ``[low, high]``,
    ``sad_estimate`` / ``pad_estimate`` (the bias-corrected numbers to show with them), ``sad_plugin`` /
    ``pad_plugin`` (the paper's plug-in numbers) and ``sad_method`` / ``pad_method``.

    ``method="inversion"`` (default): :func:`genmetrics.functional.bootstrap.gaussian_kl_interval`, a
    bootstrap test inverted along a path of Gaussian fits, with a median-unbiased estimate inside the interval
    (docs/bootstrap.md: coverage within 2 points of nominal at 50 to 1000 images, also between two samples
    of one distribution). ``"BCa"``, ``"percentile"``, ``"basic"``: the resampled plug-in
    (:func:`~genmetrics.functional.bootstrap.two_sample_ci`), kept to compare; its interval can exclude the
    plug-in and misses the truth near 0 (the estimate is then the plug-in). PaD is skipped (``None``) when
    ``n_boot * (N + M) * C^2`` exceeds ``pad_budget``; BCa falls back to the percentile interval when its
    jackknife would cost more than ``bca_budget`` (SaD) or ``pad_budget`` (PaD) multiply-adds.

    >>> g = torch.Generator().manual_seed(0)
    >>> real = torch.randn(60, 3, generator=g, dtype=torch.float64)
    >>> gen = torch.randn(60, 3, generator=g, dtype=torch.float64) + 1.0
    >>> b = bootstrap_means(real, gen, n_boot=100)
    >>> b["sad"][0] <= b["sad_estimate"] <= b["sad"][1], b["sad_estimate"] < b["sad_plugin"], b["sad_method"]
    (True, True, 'inversion')
    """
    from genmetrics.core.options import choice
    from genmetrics.functional.bootstrap import check_n_boot, gaussian_kl_interval, two_sample_ci

    n_boot = check_n_boot(n_boot)
    choice("method", method, ("inversion", "BCa", "percentile", "basic"), owner="bootstrap_means")
    D.check_direction(direction)
    n, m, c = real.shape[0], gen.shape[0], real.shape[1]
    do_pad = c >= 2 and n_boot * (n + m) * c * c <= pad_budget
    out: dict[str, Any] = {"pad": None}
    if method == "inversion":
        x, y = real.double().cpu().numpy(), gen.double().cpu().numpy()
        kw = dict(direction=direction, eps=eps, n_boot=n_boot, alpha=alpha, seed=seed)
        for key, on in (("sad", True), ("pad", do_pad)):
            if on:
                iv = gaussian_kl_interval(x, y, pairs=key == "pad", **kw)  # type: ignore[arg-type]
                out.update(
                    {
                        key: [iv.low, iv.high],
                        f"{key}_method": iv.method,
                        f"{key}_estimate": iv.estimate,
                        f"{key}_plugin": iv.plugin,
                    }
                )
        out.update(n_boot=int(n_boot), level=1 - alpha, seed=int(seed), method=method)
        return out

    shift = real.double().mean(0)  # a common shift leaves every KL unchanged and conditions the sums
    x, y = (real.double() - shift).numpy(), (gen.double() - shift).numpy()

    def moments(w: np.ndarray, d: np.ndarray, cross: bool):
        k = w.sum(1)[:, None]
        mu = w @ d / k
        if not cross:
            return torch.from_numpy(mu), torch.from_numpy(
                np.clip((w @ (d * d) - k * mu * mu) / (k - 1), 0.0, None) + eps
            )
        cov = (np.einsum("bn,nc,nd->bcd", w, d, d) - k[:, :, None] * mu[:, :, None] * mu[:, None, :]) / (
            k - 1
        )[:, :, None]
        return torch.from_numpy(mu), torch.from_numpy(cov + eps * np.eye(c))

    def ordered(a, b):
        return (b, a) if direction == "gen||real" else (a, b)  # (p, q) of KL(p || q)

    def sad_stat(wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
        (mp, vp), (mq, vq) = ordered(moments(wx, x, False), moments(wy, y, False))
        return D.gaussian_kl(mp, vp, mq, vq).mean(-1).numpy()

    iu, ju = np.triu_indices(c, 1)

    def pad_stat(wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
        (mp, cp), (mq, cq) = ordered(moments(wx, x, True), moments(wy, y, True))

        def pairs(mu, cov):
            return (
                torch.stack([mu[:, iu], mu[:, ju]], -1),
                torch.stack(
                    [
                        torch.stack([cov[:, iu, iu], cov[:, iu, ju]], -1),
                        torch.stack([cov[:, ju, iu], cov[:, ju, ju]], -1),
                    ],
                    -2,
                ),
            )

        return D.gaussian_kl_2d(*pairs(mp, cp), *pairs(mq, cq)).clamp_min(0.0).mean(-1).numpy()

    jack = (n + m) * max(n, m)
    jack_ok = min(n, m) >= 3  # a leave-one-out sample of 1 row has no variance: no BCa jackknife below 3 rows
    sad = two_sample_ci(
        x,
        y,
        sad_stat,
        n_boot=n_boot,
        alpha=alpha,
        seed=seed,
        method=method if jack_ok and jack * c <= bca_budget else "percentile",
    )
    out.update(
        sad=[sad.low, sad.high], sad_method=sad.method, sad_estimate=sad.estimate, sad_plugin=sad.estimate
    )
    if do_pad:
        pad = two_sample_ci(
            x,
            y,
            pad_stat,
            n_boot=n_boot,
            alpha=alpha,
            seed=seed,
            budget=max(1.0, 2e7 / (c * c)),
            method=method if jack_ok and (n_boot * (n + m) + jack) * c * c <= pad_budget else "percentile",
        )
        out.update(pad=[pad.low, pad.high], pad_method=pad.method, pad_estimate=pad.estimate)
        out["pad_plugin"] = pad.estimate
    out.update(n_boot=int(n_boot), level=1 - alpha, seed=int(seed), method=method)
    return out


# ------------------------------------------------------------------------------------- summary
def kl_metrics(
    attributes: list[str], real: ScoredSet, gen: ScoredSet, *, direction: str = "gen||real", **options: Any
) -> tuple[Any, Any]:
    """The registered ``sad`` and ``pad`` metrics (``pad`` is ``None`` below two attributes) fed with the
    per-image scores of both sets (:meth:`~genmetrics.raclip.metric.SaD.update_scores`, rows kept for the
    bootstrap): their ``compute()`` is the value ``update`` on the same images gives. ``options`` go to
    :func:`~genmetrics.create_metric` (``backbone`` / ``tokenizer`` or ``weights``: the scorer's).

    >>> g = torch.Generator().manual_seed(0)
    >>> real = ScoredSet(torch.rand(8, 2, generator=g, dtype=torch.float64), torch.zeros(16, 2))
    >>> gen = ScoredSet(torch.rand(8, 2, generator=g, dtype=torch.float64), torch.zeros(16, 2))
    >>> sad, pad = kl_metrics(["smiling", "wearing hat"], real, gen, weights="ViT-B-32-quickgelu/openai")
    >>> torch.equal(sad.compute()["per_attribute"], D.sad(real.scores, gen.scores)), pad.pairs
    (True, [('smiling', 'wearing hat')])
    """
    from genmetrics.registry import create_metric

    names = ("sad", "pad") if len(attributes) >= 2 else ("sad",)
    made = []
    for name in names:
        m = create_metric(
            name, attributes=list(attributes), kl_direction=direction, keep_scores=True, **options
        )
        m.update_scores(reference=real.scores, candidates=gen.scores)
        made.append(m)
    return made[0], (made[1] if len(made) > 1 else None)


def summarize_comparison(
    real: ScoredSet,
    gen: ScoredSet,
    attributes: list[str],
    grid: tuple[int, int],
    *,
    sad: Any,
    pad: Any = None,
    top_k: int = 10,
    n_boot: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything ``summary.json`` holds (plain Python types). SaD and PaD, their intervals and estimates are
    the ``compute()`` and ``bootstrap()`` of the metrics ``sad`` and ``pad`` (:func:`kl_metrics`); R-SaD is
    the difference of the sets' mean refined patch maps.

    >>> g = torch.Generator().manual_seed(0)
    >>> real = ScoredSet(torch.randn(40, 3, generator=g, dtype=torch.float64), torch.zeros(16, 3))
    >>> gen = ScoredSet(torch.randn(40, 3, generator=g, dtype=torch.float64) + torch.tensor([0.0, 0.0, 2.0]),
    ...                 torch.zeros(16, 3))  # attribute 2 shifted in the generated set
    >>> attrs = ["smiling", "wearing hat", "a red car"]
    >>> sad, pad = kl_metrics(attrs, real, gen, weights="ViT-B-32-quickgelu/openai")
    >>> s = summarize_comparison(real, gen, attrs, (4, 4), sad=sad, pad=pad, n_boot=50)
    >>> s["n_real"], s["kl_direction"], s["sad"]["per_attribute"][0]["attribute"]  # sorted, largest SaD first
    (40, 'gen||real', 'a red car')
    """
    value = sad.compute()
    per = value["per_attribute"].cpu().reshape(-1)  # compute() gives one attribute as a scalar
    mr, mg = real.scores.mean(0), gen.scores.mean(0)
    order = torch.argsort(per, descending=True).tolist()
    out: dict[str, Any] = {
        "attributes": list(attributes),
        "n_real": real.n,
        "n_generated": gen.n,
        "kl_direction": sad.kl_direction,
        "variance_ridge": sad.eps,
        "units": "nats (x1000 columns match the paper's x10^-3 tables)",
    }
    boot = sad.bootstrap(n_boot=n_boot, seed=seed)
    out["sad"] = {
        "mean": float(value["mean"]),
        "mean_x1000": 1000 * float(value["mean"]),
        "ci95": boot["ci"],
        "estimate": boot["estimate"],
        "per_attribute": [
            {
                "attribute": attributes[i],
                "sad": float(per[i]),
                "mean_real": float(mr[i]),
                "mean_generated": float(mg[i]),
            }
            for i in order
        ],
    }
    if pad is not None:
        pvalue = pad.compute()
        pp = pvalue["per_pair"].cpu().reshape(-1)
        pairs = list(combinations(range(len(attributes)), 2))
        k = min(top_k, pp.numel())
        top = torch.topk(pp, k).indices.tolist()
        pboot = pad.bootstrap(n_boot=n_boot, seed=seed)
        out["pad"] = {
            "mean": float(pvalue["mean"]),
            "mean_x1000": 1000 * float(pvalue["mean"]),
            "ci95": pboot["ci"],
            "estimate": pboot["estimate"],
            "top_pairs": [
                {"pair": [attributes[pairs[i][0]], attributes[pairs[i][1]]], "pad": float(pp[i])} for i in top
            ],
        }
    else:
        out["pad"] = None
    rmap = real.map_mean - gen.map_mean
    rank = rmap.abs().mean(0)
    out["rsad"] = {
        "grid": list(grid),
        "mean": float(rank.mean()),
        "ranking": [
            {
                "attribute": attributes[i],
                "mean_abs_rsad": float(rank[i]),
                "max_rsad": float(rmap[:, i].max()),
                "min_rsad": float(rmap[:, i].min()),
            }
            for i in torch.argsort(rank, descending=True).tolist()
        ],
    }
    out["bootstrap"] = {k: boot[k] for k in ("n_boot", "level", "seed")}
    return out


def _fmt(x: float | None, scale: float = 1000.0) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x * scale:.3f}"


def markdown_report(
    summary: dict[str, Any],
    images: dict[str, str],
    *,
    real: str,
    generated: str,
    weights: str,
    top_k: int = 10,
) -> str:
    """The Markdown report (values x1000, i.e. in 10^-3 nats like the paper's tables).

    >>> g = torch.Generator().manual_seed(0)
    >>> real = ScoredSet(torch.randn(40, 3, generator=g, dtype=torch.float64), torch.zeros(16, 3))
    >>> gen = ScoredSet(torch.randn(40, 3, generator=g, dtype=torch.float64) + torch.tensor([0.0, 0.0, 2.0]),
    ...                 torch.zeros(16, 3))  # attribute 2 shifted in the generated set
    >>> attrs = ["smiling", "wearing hat", "a red car"]
    >>> sad, pad = kl_metrics(attrs, real, gen, weights="ViT-B-32-quickgelu/openai")
    >>> s = summarize_comparison(real, gen, attrs, (4, 4), sad=sad, pad=pad, n_boot=50)
    >>> print("\\n".join(markdown_report(s, {}, real="real/", generated="gen/", weights="ViT-B-32").splitlines()[:3]))
    # RA-CLIPScore comparison
    <BLANKLINE>
    - real: `real/` (40 images)
    """
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
        lines += [
            "Note: with fewer than 100 images per set the bootstrap interval of a KL divergence is "
            "unreliable (resampling shrinks variances, which inflates KL); the estimate can fall outside "
            "its interval. Use a few hundred images or more per set for intervals you can quote.",
            "",
        ]
    lines += [
        "## SaD per attribute (largest first)",
        "",
        "| attribute | SaD x10^-3 | mean score real | mean score generated |",
        "|---|---:|---:|---:|",
    ]
    for row in s["per_attribute"][:top_k]:
        lines.append(
            f"| {row['attribute']} | {_fmt(row['sad'])} | {row['mean_real']:.4f} | {row['mean_generated']:.4f} |"
        )
    if "sad_bar" in images:
        lines += ["", f"![SaD]({images['sad_bar']})"]
    if p is not None:
        lines += ["", "## Top PaD pairs", "", "| pair | PaD x10^-3 |", "|---|---:|"]
        for row in p["top_pairs"]:
            lines.append(f"| {row['pair'][0]} & {row['pair'][1]} | {_fmt(row['pad'])} |")
        if "pad_bar" in images:
            lines += ["", f"![PaD]({images['pad_bar']})"]
    lines += [
        "",
        "## R-SaD ranking (mean_j |R-SaD_j|)",
        "",
        "Red: the attribute is more present in that region in the real set; blue: in the generated set.",
        "",
        "| attribute | mean abs R-SaD x10^-3 | max | min |",
        "|---|---:|---:|---:|",
    ]
    for row in r["ranking"][:top_k]:
        lines.append(
            f"| {row['attribute']} | {_fmt(row['mean_abs_rsad'])} | {row['max_rsad']:+.4f} | {row['min_rsad']:+.4f} |"
        )
    for key, title in (
        ("rsad_heatmaps", "R-SaD on the patch grid"),
        ("rsad_overlay", "R-SaD overlay"),
        ("attribute_maps", "Per-image attribute maps (refined patch scores, Eq. 8)"),
    ):
        if key in images:
            lines += ["", f"### {title}", "", f"![{title}]({images[key]})"]
    lines.append("")
    return "\n".join(lines)


def _ci(ci: list[float] | None) -> str:
    return "n/a" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


# ------------------------------------------------------------------------------------- the command's files
def write_comparison(
    real_files: list[Any],
    gen_files: list[Any],
    attrs: list[str],
    out: Path,
    *,
    backbone: Any,
    tokenizer: Any,
    weights: str,
    batch_size: int = 32,
    kl_direction: str = "gen||real",
    top_k: int = 10,
    n_boot: int = 200,
    seed: int = 0,
    examples: int = 4,
    recursive: bool = False,
    real_dir: str = "",
    gen_dir: str = "",
    workers: int | None = None,
) -> dict[str, Any]:
    """What ``genmetrics compare`` writes into ``out`` (locked by the caller): both sets scored once with
    ``backbone`` (:func:`score_images`), SaD / PaD from the registered metrics (:func:`kl_metrics`),
    ``summary.json`` (returned), ``report.md``, ``manifest.json`` and the plots. ``weights`` describes the
    backbone in the files; ``real_dir`` / ``gen_dir`` name the folders.

    >>> import tempfile
    >>> from genmetrics.testing import random_images, tiny_clip, write_images
    >>> model, tok = tiny_clip()
    >>> with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
    ...     real, gen = write_images(d, random_images(4, 32, seed=1)), write_images(e, random_images(4, 32, seed=2))
    ...     s = write_comparison(real, gen, ["smiling", "wearing hat"], Path(d) / "out", backbone=model,
    ...                          tokenizer=tok, weights="tiny", n_boot=20, workers=0)
    ...     sorted(p.name for p in (Path(d) / "out").glob("*.json")), s["n_real"], len(s["sad"]["per_attribute"])
    (['manifest.json', 'summary.json'], 4, 2)
    """
    from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
    from genmetrics.data.output.manifest import manifest
    from genmetrics.data.progress import progress
    from genmetrics.raclip import plots
    from genmetrics.raclip.model import RegionAttributeScorer

    scorer = RegionAttributeScorer(backbone, tokenizer)
    grid = scorer.grid

    def bar(role: str, n: int):
        total = (n + batch_size - 1) // batch_size
        return lambda it: progress(it, desc=f"scoring {role}", total=total, unit="batch")

    real = score_images(
        scorer,
        real_files,
        attrs,
        role="real",
        batch_size=batch_size,
        keep_examples=max(examples, 4),
        progress=bar("real", len(real_files)),
        workers=workers,
    )
    gen = score_images(
        scorer,
        gen_files,
        attrs,
        role="generated",
        batch_size=batch_size,
        keep_examples=examples,
        progress=bar("generated", len(gen_files)),
        workers=workers,
    )
    # SaD and PaD: the registered metrics on the scores of this one pass
    sad_metric, pad_metric = kl_metrics(
        attrs, real, gen, direction=kl_direction, backbone=backbone, tokenizer=tokenizer
    )
    summary = summarize_comparison(
        real, gen, attrs, grid, sad=sad_metric, pad=pad_metric, top_k=top_k, n_boot=n_boot, seed=seed
    )

    # ---- plots
    images: dict[str, str] = {}
    sad = sad_metric.compute()["per_attribute"].cpu().reshape(-1)
    images["sad_bar"] = plots.sad_bar(attrs, sad, out / "sad_bar.png", top=top_k).name
    if pad_metric is not None:
        from itertools import combinations

        pad = pad_metric.compute()["per_pair"].cpu().reshape(-1)
        images["pad_bar"] = plots.pad_bar(
            list(combinations(attrs, 2)), pad, out / "pad_bar.png", top=top_k
        ).name
    rmap = real.map_mean - gen.map_mean
    images["rsad_heatmaps"] = plots.rsad_heatmaps(
        rmap, grid, attrs, out / "rsad_heatmaps.png", top=min(top_k, 8)
    ).name
    pool = real.examples
    best = (
        torch.stack([e.score for e in pool]).argmax(0).tolist()
    )  # per attribute, the best-scoring kept real image
    images["rsad_overlay"] = plots.rsad_overlay(
        rmap, grid, attrs, [pool[b].image for b in best], out / "rsad_overlay.png", top=min(top_k, 8)
    ).name
    shown = real.examples[:examples] + gen.examples[:examples]
    cols = torch.argsort(sad, descending=True)[:4].tolist()
    images["attribute_maps"] = plots.attribute_maps(
        shown, attrs, grid, out / "attribute_maps.png", columns=cols
    ).name

    summary["files"] = {"report": "report.md", **{k: v for k, v in images.items()}}
    summary["real"], summary["generated"], summary["weights"] = str(real_dir), str(gen_dir), weights
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(
        out / "report.md",
        markdown_report(
            summary, images, real=str(real_dir), generated=str(gen_dir), weights=weights, top_k=top_k
        ),
    )
    atomic_write_json(
        out / "manifest.json",
        manifest(
            weights=weights,
            attributes=attrs,
            options={
                "batch_size": batch_size,
                "kl_direction": kl_direction,
                "n_boot": n_boot,
                "seed": seed,
                "top": top_k,
                "recursive": recursive,
            },
        ),
    )
    return summary
