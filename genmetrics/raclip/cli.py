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
    from genmetrics.backbones.precheck import check_clip_weights
    from genmetrics.cli.common import echo_json
    from genmetrics.data.io.files import list_images
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
    # offline, or an unreachable hub: weights in no cache are reported before torch or open_clip is imported
    # and before OUT is locked (the image folders are listed with no torch: genmetrics.data.io.files)
    check_clip_weights(weights)  # a local MODEL:PATH too
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

    from genmetrics.raclip.report import write_comparison

    model, tok, desc = _load_backbone(weights, device)
    return write_comparison(
        real_files,
        gen_files,
        attrs,
        out,
        backbone=model,
        tokenizer=tok,
        weights=desc,
        batch_size=batch_size,
        kl_direction=kl_direction,
        top_k=top_k,
        n_boot=n_boot,
        seed=seed,
        examples=examples,
        recursive=recursive,
        real_dir=real_dir,
        gen_dir=gen_dir,
        workers=workers,
    )
