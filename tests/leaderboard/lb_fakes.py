"""Small metrics registered only for the leaderboard tests (names start with ``_lb``): they exercise the
runner's input plumbing (prompts, aspects, reference lists, set-level values, vector scores, slow
batches) without model weights. Imported by conftest.py and by the subprocesses the tests start."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from genmetrics.baselines.pixel import PSNR
from genmetrics.core.metric import Metric, SampleMetric, as_text_list
from genmetrics.core.registry import MetricCard, register_metric
from genmetrics.data.io.images import as_image_list, to_tensor
from genmetrics.data.io.pipeline import PATHS

_PAIR = {"reference": "reference images [B]", "candidates": "generated images [B]"}
CALLS: dict[str, Any] = {
    "updates": 0,
    "max_batch": 0,
    "max_pending": 0,
    "created": 0,
    "cache_dir": None,
    "path": None,
}


def _card(
    name: str,
    factory: str,
    inputs: dict[str, str],
    *,
    level: str = "sample",
    hib: bool | None = True,
    tags: tuple[str, ...] = (),
    **typed: Any,
) -> None:
    register_metric(
        MetricCard(
            name=name,
            factory=f"lb_fakes:{factory}",
            family="lbtest",
            summary=f"test metric {name}",
            inputs=inputs,
            higher_is_better=hib,
            range=None,
            level=level,
            tags=tags,
            **typed,
        )
    )


class SpyPSNR(PSNR):
    """PSNR that records how it is fed: the largest chunk and whether state piles up between chunks."""

    name = "_lb_spy"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        CALLS["created"] += 1

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        CALLS["updates"] += 1
        CALLS["max_batch"] = max(CALLS["max_batch"], len(candidates))
        CALLS["max_pending"] = max(CALLS["max_pending"], len(self.scores))
        super().update(reference, candidates, condition, ids=ids)


class SlowPSNR(PSNR):
    """PSNR that sleeps per chunk, so a test can kill a run part-way."""

    name = "_lb_slow"

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        time.sleep(float(os.environ.get("LB_SLOW_S", "0.05")))
        return super().score_batch(batch)


class _Mean(SampleMetric):
    higher_is_better = True

    def _mean(self, images: list[Any]) -> torch.Tensor:
        return torch.stack([to_tensor(x).double().mean() for x in images])


class PromptMetric(_Mean):
    """score = 1000 * len(prompt) + mean intensity (so a test can read back which prompt arrived)."""

    name = "_lb_prompt"

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        return {"candidates": as_image_list(candidates), "condition": as_text_list(condition)}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        return self._mean(batch["candidates"]) + torch.tensor(
            [1000.0 * len(t) for t in batch["condition"]], dtype=torch.float64
        )


class AspectMetric(_Mean):
    """score = len(aspect) + |mean(candidate) - mean(reference)|; vector extras per sample."""

    name = "_lb_aspect"

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        return {
            "reference": as_image_list(reference),
            "candidates": as_image_list(candidates),
            "condition": as_text_list(condition),
        }

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        d = (self._mean(batch["candidates"]) - self._mean(batch["reference"])).abs()
        return d + torch.tensor([float(len(t)) for t in batch["condition"]], dtype=torch.float64)


class NanMetric(_Mean):
    """Mean intensity of the candidate, but NaN for files whose stem is in ``nan_ids`` (a broken metric)."""

    name = "_lb_nan"
    input_transform = PATHS  # it scores by file name, so it is given the paths (the pipeline does not decode)

    def __init__(self, *, nan_ids: Any = ("s1",), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nan_ids = tuple(nan_ids)

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        return {"candidates": as_image_list(candidates)}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        from pathlib import Path

        m = self._mean(batch["candidates"])
        bad = torch.tensor([Path(str(c)).stem in self.nan_ids for c in batch["candidates"]])
        return torch.where(bad, torch.full_like(m, float("nan")), m)


class RefSetMetric(_Mean):
    """score = number of reference images of the sample (a list per candidate) + 0.001 * len(prompt)."""

    name = "_lb_refsets"

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        refs = list(reference)
        assert all(isinstance(r, list) for r in refs), "expected one list of references per candidate"
        return {
            "reference": refs,
            "candidates": as_image_list(candidates),
            "condition": as_text_list(condition),
        }

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        return torch.tensor(
            [len(r) + 0.001 * len(t) for r, t in zip(batch["reference"], batch["condition"])],
            dtype=torch.float64,
        )


class VectorMetric(_Mean):
    """Per-sample vector scores [b, 3]: channel means of the candidate. Records the options it got."""

    name = "_lb_vector"
    higher_is_better = None

    def __init__(self, *, cache_dir: Any = None, path: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        CALLS["cache_dir"], CALLS["path"] = cache_dir, path

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        return {"candidates": as_image_list(candidates)}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        return torch.stack([to_tensor(x).double().mean((1, 2)) for x in batch["candidates"]])


class CenterMetric(_Mean):
    """Like hcs: ``reference`` is the real set as a whole (its mean intensity is the centre) and each
    candidate scores |mean(candidate) - centre|. Counts the reference updates."""

    name = "_lb_center"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("ref_sum", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("ref_n", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        if reference is not None:
            CALLS["updates"] += 1
            imgs = as_image_list(reference)
            self.ref_sum += self._mean(imgs).sum()
            self.ref_n += len(imgs)
        if candidates is not None:
            super().update(candidates=candidates, ids=ids)

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        return {"candidates": as_image_list(candidates)}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        return (self._mean(batch["candidates"]) - self.ref_sum / self.ref_n).abs()


class AttrMetric(_Mean):
    """Like raclip: scores per attribute when built with ``attributes``, else needs one text per image."""

    name = "_lb_attr"

    def __init__(self, attributes: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attributes = attributes

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        if (condition is None) == (self.attributes is None):
            raise ValueError("give condition xor attributes")
        return {
            "candidates": as_image_list(candidates),
            "condition": as_text_list(condition) if condition is not None else None,
        }

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        m = self._mean(batch["candidates"])
        if self.attributes is None:
            return m + torch.tensor([len(t) for t in batch["condition"]], dtype=torch.float64)
        return torch.stack([m + len(a) for a in self.attributes], 1)


class SetMetric(Metric):
    """Set level: |mean(gen) - mean(real)| per channel (``attributes`` r, g, b) or, with ``grid=True``,
    a [4, 3] map over 2x2 patches (real - gen). Sums of 0..255 integers in float64: exact under any
    sharding."""

    name = "_lb_set"
    higher_is_better = False

    def __init__(self, *, grid: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attributes = ["red", "green", "blue"]
        self.use_grid = grid
        if grid:
            self.grid = (2, 2)
        for side in ("real", "gen"):
            self.add_state(
                f"{side}_sum", default=torch.zeros(4, 3, dtype=torch.float64), dist_reduce_fx="sum"
            )
            self.add_state(f"{side}_n", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def _stats(self, images: Any) -> torch.Tensor:
        out = torch.zeros(4, 3, dtype=torch.float64)
        for x in as_image_list(images):
            t = (to_tensor(x) * 255).round().double()
            h, w = t.shape[1] // 2, t.shape[2] // 2
            quads = [t[:, :h, :w], t[:, :h, w:], t[:, h:, :w], t[:, h:, w:]]
            out += torch.stack([q.sum((1, 2)) / q[0].numel() for q in quads]).round()
        return out

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        if reference is not None:
            self.real_sum += self._stats(reference)
            self.real_n += len(as_image_list(reference))
        if candidates is not None:
            self.gen_sum += self._stats(candidates)
            self.gen_n += len(as_image_list(candidates))

    def compute_state(self) -> torch.Tensor:
        m = self.real_sum / self.real_n - self.gen_sum / self.gen_n
        return m if self.use_grid else m.mean(0).abs()


FAKES = {
    "_lb_spy": ("SpyPSNR", _PAIR, {}),
    "_lb_slow": ("SlowPSNR", _PAIR, {}),
    "_lb_prompt": ("PromptMetric", {"candidates": "generated images [B]", "condition": "prompts [B]"}, {}),
    "_lb_aspect": ("AspectMetric", {**_PAIR, "condition": "aspect texts [B]"}, {"condition": "aspects"}),
    "_lb_refsets": (
        "RefSetMetric",
        {
            "reference": "reference image lists [B]",
            "candidates": "generated images [B]",
            "condition": "prompts [B]",
        },
        {"reference": "image_list"},
    ),
    "_lb_nan": ("NanMetric", {"candidates": "generated images [B]"}, {}),
    "_lb_vector": ("VectorMetric", {"candidates": "generated images [B]"}, {"hib": None}),
    "_lb_center": (
        "CenterMetric",
        {"reference": "real images (only for the centre)", "candidates": "images"},
        {"reference": "real_set"},
    ),
    "_lb_attr": (
        "AttrMetric",
        {
            "candidates": "images [B]",
            "condition": "one text per image, only when the metric is built without attributes=",
        },
        {"condition_option": "attributes"},
    ),
    "_lb_set": (
        "SetMetric",
        {"reference": "real images", "candidates": "generated images"},
        {"level": "set", "hib": False, "reference": "real_set"},
    ),
}


def register() -> None:
    """Register the test metrics (idempotent). Not done at import, so that other test modules that list
    every registered metric at collection time never see them."""
    for name, (factory, inputs, kw) in FAKES.items():
        _card(name, factory, inputs, **kw)


def unregister() -> None:
    from genmetrics.core import registry

    for name in FAKES:
        registry._CARDS.pop(name, None)


def dist_worker(rank: int, world: int, port: int, config: str, out: str, kwargs: dict[str, Any]) -> None:
    """torch.multiprocessing.spawn target: one rank of a leaderboard run (gloo)."""
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    torch.set_num_threads(1)
    register()
    from genmetrics.leaderboard import run_leaderboard

    run_leaderboard(config, out, device="cpu", **kwargs)
