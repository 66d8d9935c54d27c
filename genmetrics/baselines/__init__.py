"""Classic baselines behind the common contract: psnr, ssim, ms_ssim (weight-free), clip_i, dino.

CLIP-T is the raclip family's ``clipscore`` (``clip_t`` is registered as its alias)."""

from __future__ import annotations

from typing import Any

from genmetrics.core.registry import ConditionKind, Granularity, MetricCard, ReferenceKind, register_metric

_PAIR = {
    "reference": "reference images [B] (paths, PIL, uint8 or float tensors)",
    "candidates": "generated images [B], one per reference",
}

register_metric(
    MetricCard(
        name="psnr",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.NONE,
        level=Granularity.SAMPLE,
        factory="genmetrics.baselines.pixel:PSNR",
        family="baselines",
        summary="Peak signal-to-noise ratio between each candidate and its reference (dB; capped at max_db).",
        inputs=_PAIR,
        higher_is_better=True,
        range=(0.0, 100.0),
        paper="classic",
        tags=("pixel", "weight-free"),
        unit="dB",
    )
)
register_metric(
    MetricCard(
        name="ssim",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.NONE,
        level=Granularity.SAMPLE,
        factory="genmetrics.baselines.pixel:SSIM",
        family="baselines",
        summary="Structural similarity (Wang et al. 2004), Gaussian window 11, sigma 1.5.",
        inputs=_PAIR,
        higher_is_better=True,
        range=(-1.0, 1.0),
        paper="Wang et al., 2004",
        tags=("pixel", "weight-free"),
    )
)
register_metric(
    MetricCard(
        name="ms_ssim",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.NONE,
        level=Granularity.SAMPLE,
        factory="genmetrics.baselines.pixel:MSSSIM",
        family="baselines",
        summary="Multi-scale SSIM (Wang et al. 2003); needs images of at least 161 px per side with the default 5 scales.",
        inputs=_PAIR,
        higher_is_better=True,
        range=(0.0, 1.0),
        paper="Wang et al., 2003",
        tags=("pixel", "weight-free"),
    )
)
register_metric(
    MetricCard(
        name="clip_i",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.NONE,
        level=Granularity.SAMPLE,
        factory="genmetrics.baselines.embedding:CLIPImageSimilarity",
        family="baselines",
        summary="Cosine similarity of CLIP image embeddings of candidate and reference (CLIP-I).",
        inputs=_PAIR,
        higher_is_better=True,
        range=(-1.0, 1.0),
        paper="Radford et al., 2021",
        default_weights="ViT-B-32-quickgelu/openai",
        tags=("embedding",),
    )
)
register_metric(
    MetricCard(
        name="dino",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.NONE,
        level=Granularity.SAMPLE,
        factory="genmetrics.baselines.embedding:DINOSimilarity",
        family="baselines",
        summary="Cosine similarity of DINOv2 [CLS] embeddings of candidate and reference (DINO-I).",
        inputs=_PAIR,
        higher_is_better=True,
        range=(-1.0, 1.0),
        paper="Oquab et al., 2023",
        default_weights="facebook/dinov2-base",
        tags=("embedding",),
    )
)


def __getattr__(name: str) -> Any:
    if name in ("PSNR", "SSIM", "MSSSIM"):
        from genmetrics.baselines import pixel

        return getattr(pixel, name)
    if name in ("CLIPImageSimilarity", "DINOSimilarity"):
        from genmetrics.baselines import embedding

        return getattr(embedding, name)
    raise AttributeError(f"module 'genmetrics.baselines' has no attribute {name!r}")
