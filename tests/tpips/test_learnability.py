"""Training makes TPIPS separate aspects on held-out data: procedural triplets where "color" names one image
as the odd one and "position" another, so an aspect-blind metric scores at most 50% mean agreement and 0% "both
aspects right". Each variant is trained through the project's trainer on a small random Qwen3-VL and scored
on new random objects (benchmarks/tpips_learnability.py --quick; the full run, its numbers and why the small
backbone is configured as it is are in docs/tpips.md). Late and early fusion must reach issue 12's goals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "tpips_learnability.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("tpips_learnability", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_task_defeats_aspect_blind_metrics(bench):
    from genmetrics.tpips.synthetic import aspect_triplets

    pairs = aspect_triplets(40, seed=3, size=64)
    for c, s in pairs:  # the two aspects always name different images
        assert c.images is s.images and c.votes.index(1.0) != s.votes.index(1.0)
    blind = bench.pixel_baseline(pairs)
    assert blind["mean"] <= 0.5 and blind["both"] == 0.0


@pytest.mark.slow
def test_training_learns_aspects_on_held_out_triplets(bench, capsys):
    import json

    bench.main(["--quick"])
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["aspect_blind_pixel_l2"]["both"] == 0.0 and res["aspect_blind_pixel_l2"]["mean"] <= 0.5
    assert set(res["variants"]) == {"late", "mid", "early"}
    for variant, r in res["variants"].items():
        before, after = r["before"], r["after"]
        assert before["both"] <= 0.1, (variant, r)  # untrained: about chance
        # trained: one aspect nearly always right on new objects (so the sign of Eq. 2 and the pooling are
        # right), and both aspects right on a share of triplets no aspect-blind metric reaches (0%)
        assert max(after["color"], after["position"]) >= 0.9, (variant, r)
        assert after["both"] >= 0.2 and after["mean"] >= 0.6 and after["mean"] > before["mean"] + 0.2, (variant, r)
        if variant in ("late", "early"):  # issue 12's goals (measured: late 0.94 / 0.88, early 1.0 / 1.0)
            assert after["mean"] >= 0.7 and after["both"] >= 0.4, (variant, r)
