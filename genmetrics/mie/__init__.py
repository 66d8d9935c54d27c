"""MIE: the Multi-subject Interaction Evaluator (MIBE paper, shared/seeds/003_d7bf2a4accc2285a.txt).

Given 1..8 reference subject images, the prompt and a generated image, a Qwen3.5 (or Qwen3-VL) backbone
with a rank head and a diagnostic head scores how well every subject is bound: a scalar score (higher is
better) and three logits (existence, appearance, interaction). See docs/mie.md.

Registered metric: ``mie``. Heavy names load lazily: :class:`MIEModel`, :class:`MIEOutput`,
:class:`MIEMetric`, :func:`mie_loss`, :func:`train_mie` (and its named ``RECIPES``), :func:`evaluate_human`, :func:`rank_generators`.
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

register_metric(
    MetricCard(
        name="mie",
        reference=ReferenceKind.IMAGE_LIST,
        condition=ConditionKind.PROMPT,
        factory="genmetrics.mie.metric:MIEMetric",
        precheck="genmetrics.mie.hints:precheck",  # its trained weights judged before torch is imported
        family="mie",
        summary="Multi-subject binding score of a generated image given its reference subjects and prompt "
        "(learned dual-head Qwen3.5 evaluator: rank score + existence/appearance/interaction logits).",
        inputs={
            "reference": "one list of 1-8 reference subject images per sample",
            "candidates": "generated images [B]",
            "condition": "prompts [B] (or one prompt for all)",
        },
        higher_is_better=True,
        range=None,
        paper="MIBE (Multi-subject Interaction Benchmark and Evaluator), 2026",
        # the backbone loaded without backbone= (the trained heads are the user's checkpoint); equals
        # genmetrics.mie.common.BACKBONES[DEFAULT_BACKBONE] (tests/cli/test_weights.py)
        default_weights="Qwen/Qwen3.5-4B",
        level=Granularity.SAMPLE,
        output="mean rank-head score; per_sample() adds diagnostics [N,3] logits; per_generator() groups by id prefix",
        tags=("learned", "vlm", "multi-subject", "reference-sets"),
    )
)

_LAZY = {
    "MIEModel": "genmetrics.mie.model",
    "MIEOutput": "genmetrics.mie.model",
    "MIEBatch": "genmetrics.mie.model",
    "mie_loss": "genmetrics.mie.loss",
    "DIMENSIONS": "genmetrics.mie.model",
    "MIEMetric": "genmetrics.mie.metric",
    "TrainConfig": "genmetrics.mie.train",
    "RECIPES": "genmetrics.mie.train",
    "train_mie": "genmetrics.mie.train",
    "evaluate_human": "genmetrics.mie.evaluate",
    "rank_generators": "genmetrics.mie.ranking",
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
