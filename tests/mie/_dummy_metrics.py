"""Weight-free test metrics registered on the fly (reached only through the registry)."""

import torch

from genmetrics.core.metric import SampleMetric
from genmetrics.data.io.images import load_batch


class Brightness(SampleMetric):
    """Mean pixel value of the candidate (condition ignored)."""

    name = "test_brightness"

    def prepare(self, reference, candidates, condition):
        return {"candidates": list(candidates)}

    def score_batch(self, batch):
        return torch.stack([t.mean() for t in load_batch(batch["candidates"])]).double()


class RefDistance(SampleMetric):
    """Negative mean absolute difference between the candidate's and the reference's mean pixel values."""

    name = "test_refdist"

    def prepare(self, reference, candidates, condition):
        return {"reference": list(reference), "candidates": list(candidates)}

    def score_batch(self, batch):
        r = torch.stack([t.mean() for t in load_batch(batch["reference"])])
        c = torch.stack([t.mean() for t in load_batch(batch["candidates"])])
        return -(r - c).abs().double()
