"""An example genmetrics plugin: the ``mae`` metric (mean absolute pixel error of each candidate against its
own reference). This module holds the card only, so listing metrics imports no torch; the class is in
:mod:`genmetrics_mae.metric`, imported when the metric is first built."""

from __future__ import annotations

from genmetrics.core.registry import Granularity, MetricCard, ReferenceKind, register_metric

#: everything genmetrics needs to know before building the metric; the class reads its name, direction and
#: pairing (reference=MATCHED: torchmetrics' preds=/target= work) from here. Registered on import, so the class
#: has its facts however the package is reached; the entry point registers the same card again (a no-op)
CARD = register_metric(
    MetricCard(
        name="mae",
        factory="genmetrics_mae.metric:MeanAbsoluteError",
        family="example",
        summary="Mean absolute pixel error between each candidate and its reference, in [0, 1] (0: identical).",
        inputs={"reference": "images, one per candidate, of the same size", "candidates": "images"},
        higher_is_better=False,
        range=(0.0, 1.0),
        reference=ReferenceKind.MATCHED,
        level=Granularity.SAMPLE,
        output="scalar tensor: the mean over samples",
        tags=("pixel", "example"),
    )
)
