"""``genmetrics compare``: SaD / PaD / R-SaD between a folder of real and a folder of generated images.

Writes ``OUT/summary.json``, ``OUT/report.md``, ``OUT/manifest.json`` and the PNGs ``sad_bar``,
``pad_bar``, ``rsad_heatmaps``, ``rsad_overlay``, ``attribute_maps``. Every input is validated before
weights load. For tests, the public backbone-provider hook replaces the weights
(``GENMETRICS_BACKBONE_PROVIDER=genmetrics.testing:tiny_backbones``: a random tiny CLIP, 32 px input, 4x4 grid;
nothing downloads); see :mod:`genmetrics.backbones.provider`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genmetrics.data.io.workers import workers_option


def _load_backbone(weights: str, device: str | None) -> tuple[Any, Any, str]:
    """``(model, tokenizer, description)`` for ``--weights`` (or what a backbone provider gives instead)."""
    from genmetrics.backbones.openclip import load_open_clip, parse_clip_weights
    from genmetrics.backbones.provider import describe_provider
    from genmetrics.data.device import select_device

    model, _, tok = load_open_clip(weights, device=select_device(device))
    desc = str(parse_clip_weights(weights))
    provider = describe_provider()
    if provider is not None:
        desc += f" (backbone provider {provider})"
    return model, tok, desc


@click.command("compare")
@click.option("--real", "real_dir", required=True, metavar="DIR", help="Folder of real (training) images.")
@click.option("--generated", "gen_dir", required=True, metavar="DIR", help="Folder of generated images.")
@click.option(
    "--attributes",
    required=True,
    metavar="SET_OR_FILE",
    help="A comma-separated list, a shipped attribute set (celeba-20, hcs-celeba-20, celeba-28, celeba-12-irrelevant, celeba-40, "
    "coco-80, imagenet-1k) or a text file with one attribute per line.",
)
@click.option(
    "--out",
    "out_dir",
    default="raclip_compare",
    show_default=True,
    metavar="DIR",
    help="Output folder (created; existing files are overwritten).",
)
@click.option(
    "--weights",
    default="ViT-B-32-quickgelu/openai",
    show_default=True,
    metavar="MODEL/TAG",
    help="open_clip ViT weights: MODEL/TAG, hf-hub:org/name or MODEL:/path/to/checkpoint.",
)
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: CUDA when available).")
@click.option(
    "--kl-direction", type=click.Choice(["gen||real", "real||gen"]), default="gen||real", show_default=True
)
@click.option(
    "--top",
    "top_k",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows in the report and bars / maps in the plots.",
)
@click.option(
    "--n-boot",
    default=200,
    show_default=True,
    type=int,
    help="Bootstrap resamples for the confidence intervals of mean SaD and PaD, in [1, 100000].",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Bootstrap seed.")
@click.option(
    "--examples",
    default=2,
    show_default=True,
    type=click.IntRange(min=1, max=16),
    help="Images per set shown in the per-image attribute maps.",
)
@click.option("--recursive", is_flag=True, help="Also look for images in sub-folders.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json to stdout.")
@workers_option
def compare_cmd(
    real_dir: str,
    gen_dir: str,
    attributes: str,
    out_dir: str,
    weights: str,
    batch_size: int,
    device: str | None,
    kl_direction: str,
    top_k: int,
    n_boot: int,
    seed: int,
    examples: int,
    recursive: bool,
    as_json: bool,
    workers: int | None,
) -> None:
    """Compare real and generated images attribute by attribute: SaD, PaD and R-SaD (RA-CLIPScore)."""
    from genmetrics.cli.common import echo_json
    from genmetrics.data.io.images import list_images
    from genmetrics.errors import InputError
    from genmetrics.functional.bootstrap import check_n_boot
    from genmetrics.raclip.attributes import resolve_attributes

    # ---- validate everything before any weights load
    check_n_boot(n_boot, "--n-boot")
    real_files = list_images(real_dir, recursive=recursive)
    gen_files = list_images(gen_dir, recursive=recursive)
    for files, what, opt in ((real_files, "real", "--real"), (gen_files, "generated", "--generated")):
        if len(files) < 2:
            raise InputError(
                f"{opt} {files[0].parent if files else ''!s}: only {len(files)} {what} image; SaD and PaD "
                "fit a Gaussian per set and need at least 2 images in each folder"
            )
    attrs = resolve_attributes(attributes, name="--attributes")
    out = Path(out_dir)
    from genmetrics.data.output.lock import lock_output_folder

    lock = lock_output_folder(
        out
    )  # a second compare or leaderboard on this folder refuses; released at the end
    try:
        summary = _compare(
            real_files,
            gen_files,
            attrs,
            out,
            weights,
            batch_size,
            device,
            kl_direction,
            top_k,
            n_boot,
            seed,
            examples,
            recursive,
            real_dir,
            gen_dir,
            workers,
        )
    finally:
        lock.release()  # also after a failure (weights unavailable): a run that wrote nothing leaves nothing
    if as_json:
        echo_json(summary)
    else:
        s, p = summary["sad"], summary["pad"]
        msg = f"mean SaD {1000 * s['mean']:.3f}e-3"
        if p is not None:
            msg += f", mean PaD {1000 * p['mean']:.3f}e-3"
        click.echo(f"{msg}; wrote {out / 'report.md'} and {out / 'summary.json'}")


def _compare(
    real_files: list[Any],
    gen_files: list[Any],
    attrs: list[str],
    out: Path,
    weights: str,
    batch_size: int,
    device: str | None,
    kl_direction: str,
    top_k: int,
    n_boot: int,
    seed: int,
    examples: int,
    recursive: bool,
    real_dir: str,
    gen_dir: str,
    workers: int | None,
) -> dict[str, Any]:
    """Score both sets, draw the plots and write the report files into ``out`` (held locked by the caller)."""
    from genmetrics.backbones.openclip import parse_clip_weights
    from genmetrics.backbones.provider import current_provider

    current_provider()  # a bad GENMETRICS_BACKBONE_PROVIDER fails here, before any image is read
    parse_clip_weights(weights)

    # ---- score
    import torch

    from genmetrics.cli.common import progress
    from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
    from genmetrics.data.output.manifest import manifest
    from genmetrics.raclip import plots
    from genmetrics.raclip.model import RegionAttributeScorer
    from genmetrics.raclip.report import kl_metrics, markdown_report, score_images, summarize_comparison

    model, tok, desc = _load_backbone(weights, device)
    scorer = RegionAttributeScorer(model, tok)
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
        attrs, real, gen, direction=kl_direction, backbone=model, tokenizer=tok
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
    summary["real"], summary["generated"], summary["weights"] = str(real_dir), str(gen_dir), desc
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(
        out / "report.md",
        markdown_report(
            summary, images, real=str(real_dir), generated=str(gen_dir), weights=desc, top_k=top_k
        ),
    )
    atomic_write_json(
        out / "manifest.json",
        manifest(
            weights=desc,
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
