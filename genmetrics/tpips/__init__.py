"""TPIPS: text-prompted image perceptual similarity (Wang et al., "The Many Senses of Visual Similarity").

``f(x1, x2 | c)``: how similar two images are with respect to an aspect given as text ("lighting", "pose of
the cat", "overall"), from a Qwen3-VL(-Embedding) backbone in late, mid or early fusion, plus the
triplet-head variant, training on odd-one-out votes, human-agreement evaluation and aspect-conditioned
retrieval. Heavy names are exported lazily (no torch import here); see docs/tpips.md.
"""

from __future__ import annotations

from genmetrics.core.registry import ConditionKind, MetricCard, ReferenceKind, lazy_exports, register_metric

register_metric(
    MetricCard(
        name="tpips",
        reference=ReferenceKind.MATCHED,
        condition=ConditionKind.ASPECTS,
        factory="genmetrics.tpips.metric:TPIPS",
        precheck="genmetrics.tpips.hints:precheck",  # its trained weights judged before torch is imported
        family="tpips",
        summary="Text-prompted image perceptual similarity: how similar each candidate is to its reference with "
        "respect to an aspect given as text (late/mid/early fusion on Qwen3-VL-Embedding).",
        inputs={
            "reference": "reference images [B] (paths, PIL, uint8 or float tensors)",
            "candidates": "images [B], or [B,K] (K candidates per reference), each compared with its reference",
            "condition": "aspect strings [B] or one string, e.g. 'lighting', 'pose of the cat', 'overall'",
        },
        higher_is_better=True,
        range=(float("-inf"), 1.0),  # late/early [-1, 1]; mid (-inf, 0]
        paper="Wang et al., The Many Senses of Visual Similarity: A Text-Prompted Image Perceptual Metric",
        default_weights="Qwen/Qwen3-VL-Embedding-2B",
        output="mean similarity over samples ([K] for [B,K] candidates); cosine in [-1,1] for late/early fusion, "
        "a negative weighted distance (<= 0) for mid fusion; per_aspect() gives the mean per aspect",
        tags=("learned", "vlm", "aspect-conditioned", "perceptual"),
    )
)

_LAZY = {
    "TPIPSModel": "genmetrics.tpips.model",
    "TPIPSTripletModel": "genmetrics.tpips.triplet",
    "PairwiseScoreModel": "genmetrics.tpips.baselines",
    "load_tpips": "genmetrics.tpips.loading",
    "VARIANTS": "genmetrics.tpips.model",
    "TPIPS": "genmetrics.tpips.metric",
    "TrainConfig": "genmetrics.tpips.train",
    "train_tpips": "genmetrics.tpips.train",
    "evaluate_human": "genmetrics.tpips.evaluate",
    "load_human_data": "genmetrics.tpips.evaluate",
    "load_bapps": "genmetrics.tpips.evaluate",
    "load_nights": "genmetrics.tpips.evaluate",
    "AspectIndex": "genmetrics.tpips.retrieval",
    "build_index": "genmetrics.tpips.retrieval",
    "contact_sheet": "genmetrics.tpips.retrieval",
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
