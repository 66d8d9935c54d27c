"""RA-CLIPScore family (DESIGN section 3): region-and-attribute-aware CLIPScore and the set-level
divergences SaD, PaD, R-SaD, with the CLIPScore and HCS baselines. See docs/raclip.md.

Importing this package registers the metric cards only; torch and open_clip load on first use.
"""

from __future__ import annotations

from genmetrics.core.registry import (
    ConditionKind,
    Granularity,
    MetricCard,
    ReferenceKind,
    lazy_exports,
    register_metric,
)

PAPER = "RA-CLIPScore: Making Generative Model Evaluation More Interpretable"
HCS_PAPER = "Kim et al., Attribute Based Interpretable Evaluation Metrics for Generative Models (ICML 2024)"
DEFAULT_WEIGHTS = "ViT-B-32-quickgelu/openai"
_SETS = {
    "reference": "real images (any number of update calls, any order)",
    "candidates": "generated images (any number of update calls, any order)",
}

register_metric(
    MetricCard(
        name="raclip",
        reference=ReferenceKind.NONE,
        condition=ConditionKind.PROMPT,
        condition_option="attributes",
        factory="genmetrics.raclip.metric:RAClipScore",
        family="raclip",
        summary="RA-CLIPScore (Eq. 9): dual-prompt, region-aware attribute presence per image, in [0,1].",
        inputs={
            "candidates": "images [B]",
            "condition": "one text per image, only when the metric is built without attributes=",
        },
        higher_is_better=True,
        range=(0.0, 1.0),
        paper=PAPER,
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SAMPLE,
        output="tensor [C]: mean score per attribute (with attributes=), or a scalar tensor (with condition)",
        tags=("clip", "attributes", "spatial"),
    )
)
register_metric(
    MetricCard(
        name="clipscore",
        reference=ReferenceKind.NONE,
        condition=ConditionKind.PROMPT,
        condition_option="attributes",
        aliases=("clip_t",),
        factory="genmetrics.raclip.metric:CLIPScore",
        family="raclip",
        summary="CLIPScore (Eq. 1): 100 * cos(E_v(x), E_t(t)) per image and attribute (or per image and caption).",
        inputs={
            "candidates": "images [B]",
            "condition": "one text per image, only when the metric is built without attributes=",
        },
        higher_is_better=True,
        range=(-100.0, 100.0),
        paper="Hessel et al., CLIPScore (2021)",
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SAMPLE,
        output="tensor [C]: mean CLIPScore per attribute (with attributes=), or a scalar tensor (with condition)",
        tags=("clip", "attributes"),
    )
)
register_metric(
    MetricCard(
        name="hcs",
        reference=ReferenceKind.REAL_SET,
        reference_option="image_center",
        condition=ConditionKind.ATTRIBUTES,
        condition_option="attributes",
        factory="genmetrics.raclip.metric:HCS",
        family="raclip",
        summary="Heterogeneous CLIPScore (Eq. 2): 100 * cos(E_v(x) - C_img, E_t(t) - C_text), C_img from the real set.",
        inputs={
            "reference": "real images (only for the image centre C_img)",
            "candidates": "images to score",
        },
        higher_is_better=True,
        range=(-100.0, 100.0),
        paper=HCS_PAPER,
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SAMPLE,
        output="tensor [C]: mean HCS of the candidates per attribute",
        tags=("clip", "attributes"),
    )
)
register_metric(
    MetricCard(
        name="sad",
        unit="nats",
        reference=ReferenceKind.REAL_SET,
        condition=ConditionKind.ATTRIBUTES,
        condition_option="attributes",
        factory="genmetrics.raclip.metric:SaD",
        family="raclip",
        summary="Single-attribute Divergence (Eq. 12): KL(N_gen || N_real) of per-attribute RA-CLIPScores, in nats.",
        inputs=_SETS,
        higher_is_better=False,
        range=(0.0, float("inf")),
        paper=PAPER,
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SET,
        output='dict: "mean" (scalar, the reported SaD) and "per_attribute" [C] (compat="hcs2024" adds "printed_x1e7")',
        tags=("clip", "attributes", "divergence"),
    )
)
register_metric(
    MetricCard(
        name="pad",
        unit="nats",
        reference=ReferenceKind.REAL_SET,
        condition=ConditionKind.ATTRIBUTES,
        condition_option="attributes",
        factory="genmetrics.raclip.metric:PaD",
        family="raclip",
        summary="Pair-attribute Divergence (Eq. 13): KL of bivariate Gaussians over every attribute pair, in nats.",
        inputs=_SETS,
        higher_is_better=False,
        range=(0.0, float("inf")),
        paper=PAPER,
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SET,
        output='dict: "mean" (scalar, the reported PaD) and "per_pair" [C*(C-1)/2] (combinations order; compat="hcs2024" adds "printed_x1e7")',
        tags=("clip", "attributes", "divergence"),
    )
)
register_metric(
    MetricCard(
        name="rsad",
        unit="nats",
        reference=ReferenceKind.REAL_SET,
        condition=ConditionKind.ATTRIBUTES,
        condition_option="attributes",
        factory="genmetrics.raclip.metric:RSaD",
        family="raclip",
        summary="Regional Single-attribute Divergence (Eq. 14): mean refined patch score, real minus generated.",
        inputs=_SETS,
        higher_is_better=False,
        range=(0.0, 1.0),
        paper=PAPER,
        default_weights=DEFAULT_WEIGHTS,
        level=Granularity.SET,
        output='dict: "mean" (scalar: mean over attributes of mean_j |R-SaD_j|), "per_attribute" [C], "map" [P,C] signed',
        tags=("clip", "attributes", "spatial"),
    )
)

_LAZY = {
    "RegionAttributeScorer": "genmetrics.raclip.model",
    "RAOutput": "genmetrics.raclip.model",
    "RAClipScore": "genmetrics.raclip.metric",
    "CLIPScore": "genmetrics.raclip.metric",
    "HCS": "genmetrics.raclip.metric",
    "SaD": "genmetrics.raclip.metric",
    "PaD": "genmetrics.raclip.metric",
    "RSaD": "genmetrics.raclip.metric",
    "resolve_attributes": "genmetrics.raclip.attributes",
    "load_attribute_set": "genmetrics.raclip.attributes",
    "list_attribute_sets": "genmetrics.raclip.attributes",
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
