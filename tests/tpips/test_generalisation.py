"""TPIPS generalises to aspect VALUES it never saw: the held-out-value task of
genmetrics.tpips.synthetic.value_triplets (training values from the even eighths of [0, 1), held-out values
from the odd eighths), the linear-probe ceiling of benchmarks/tpips_generalisation.py, and a smaller version
of that benchmark with its controls. The full run, its numbers and seeds are in docs/tpips.md,
"Generalisation"."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "tpips_generalisation.py"
PAIR = ("color", "brightness")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("tpips_generalisation", BENCH)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_by_construction_controls_of_the_benchmark(bench):
    """``summarise`` reads per-aspect, mean and both-right from ``[N, 2]`` agreement: closed forms."""
    right = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 0.5]])
    s = bench.summarise(right, PAIR)
    assert s == {"color": 0.625, "brightness": 0.375, "mean": 0.5, "both": 0.25}


@pytest.mark.slow
def test_probe_ceiling_separates_encoded_from_unencoded_aspects(bench):
    """The frozen small vision tower encodes hue and the background brightness (held-out 2AFC of the probes
    near 1) but not the triangle's rotation (measured: its probe ceiling is at chance) nor, at 64 px, the grating's frequency: those
    two ceilings are at chance. Seed 0, 192 / 96 triplets (the full table, 384 / 128, is in docs/tpips.md)."""
    from genmetrics.testing import tiny_qwen3vl_processor
    from genmetrics.tpips import TPIPSModel
    from genmetrics.tpips.synthetic import value_triplets

    learn = bench._learnability()
    frozen = TPIPSModel(learn.small_backbone(0), tiny_qwen3vl_processor(64), "late")
    out = {}
    for a in ("color", "brightness", "rotation", "stripe frequency"):
        pair = (a, "brightness" if a == "color" else "color")
        train = value_triplets(192, pair, split="train", seed=0, size=64)
        test = value_triplets(96, pair, split="test", seed=1000, size=64)
        out[a] = bench.probe_ceiling(frozen, train, test, a)
    print(json.dumps(out))
    for a in ("color", "brightness"):
        assert out[a]["ceiling"] >= 0.9 and out[a]["ceiling_above_chance"], out
    for a in ("rotation", "stripe frequency"):  # at chance: reported, not hidden
        assert not out[a]["ceiling_above_chance"], out


@pytest.fixture(scope="module")
def quick_late(bench):
    """benchmarks/tpips_generalisation.py --quick --variants late, seed 0, the default pair color x brightness
    (192 training triplets, 96 held-out, batch 8, 10 epochs: 480 steps): its summary line."""
    lines = bench.main(["--quick", "--variants", "late"])
    print(json.dumps(lines[-1]))  # shown with pytest -rP
    return lines[-1]


# Goals scaled to what late fusion reaches over seeds 0, 1, 2 (docs/tpips.md, "Generalisation"): the lowest of
# the three seeds minus two binomial standard errors at that rate over the 96 held-out triplets,
# sqrt(p (1 - p) / 96), rounded down. Colour: 0.896 / 0.875 / 0.812 -> 0.812 - 2 x 0.040 = 0.73; brightness:
# 0.990 / 1.000 / 0.979 -> 0.979 - 2 x 0.015 = 0.95; both right: 0.896 / 0.875 / 0.792 -> 0.792 - 2 x 0.041 =
# 0.70. A model that stops generalising falls to chance (0.5 per aspect, 0.25 both).
GOALS = {"color": 0.73, "brightness": 0.95, "both": 0.70}


@pytest.mark.slow
def test_late_fusion_generalises_to_held_out_values(quick_late):
    """Trained on hues and background greys from the even eighths of [0, 1), scored on values from the odd
    eighths: each aspect's held-out 2AFC and both-right above the goals (GOALS; seed 2 reaches only 0.81 of the
    colour ceiling, so a 0.85 goal is not asserted), and colour (which the untrained model answers
    against: 0.18-0.28 over the three seeds) at least 0.3 above the untrained model (0.53-0.70 measured)."""
    v = quick_late["variants"]["late"]
    held, before = v["heldout"], v["before_training"]
    for a in PAIR:
        assert quick_late["ceilings"][a] >= 0.9, quick_late
        assert held[a] >= GOALS[a], (a, v)
    assert held["both"] >= GOALS["both"], v
    assert held["color"] >= before["color"] + 0.3, v


@pytest.mark.slow
def test_controls_stay_at_chance(quick_late):
    """Aspect-blind: the same text ("overall") on both records of a triplet is right on exactly one of them
    (mean 0.5, both 0, by construction). The other aspect's text: both right would need the model to answer
    against the text it reads. Swapped references (the next triplet's) and a grey reference: the answer has
    nothing to do with the reference shown, so each aspect and the mean stay near 0.5: 96 triplets give a
    standard error of sqrt(0.25 / 96) = 0.051 per aspect, and the band is +-0.16 (about 3 standard errors)."""
    ctl = quick_late["variants"]["late"]["controls"]
    # the two records are the same inputs at two batch positions; their scores may differ in the last bits on
    # some CPUs, so a near-tie may split: allow 2 of 96 triplets
    assert abs(ctl["aspect_overall"]["mean"] - 0.5) <= 0.02 and ctl["aspect_overall"]["both"] <= 0.02, ctl
    assert ctl["aspect_other"]["both"] <= 0.1, ctl
    for control in ("reference_swapped", "reference_blank"):
        for k in (*PAIR, "mean"):
            assert abs(ctl[control][k] - 0.5) <= 0.16, (control, k, ctl)


def test_pair_probe_reads_a_diagonal_metric_and_nothing_else(bench):
    """The pair probe (the ceiling's, and the late-fusion embedding probe's) on synthetic features: one channel
    holds the aspect (the correct candidate is within 0.1 of the reference there, the other 1 to 2 away) among
    15 noise channels: held-out 2AFC >= 0.95 (1.0 measured). With the aspect channel replaced by noise it is at chance:
    256 held-out triplets give a standard error of sqrt(0.25 / 256) = 0.031, band +-0.125 (4 standard errors)."""
    g = torch.Generator().manual_seed(0)

    def columns(n: int, informative: bool) -> tuple[torch.Tensor, tuple]:
        f = torch.randn(3 * n, 16, generator=g, dtype=torch.float64)
        ref = [3 * i for i in range(n)]
        cands = [(3 * i + 1, 3 * i + 2) for i in range(n)]  # (correct, other)
        if informative:
            r = torch.rand(n, generator=g, dtype=torch.float64)
            away = 1 + torch.rand(n, generator=g, dtype=torch.float64)
            side = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
            f[0::3, 0] = r
            f[1::3, 0] = r + 0.1 * (2 * torch.rand(n, generator=g, dtype=torch.float64) - 1)
            f[2::3, 0] = r + side * away
        return f, (ref, cands)

    for informative, lo, hi in ((True, 0.95, 1.0), (False, 0.375, 0.625)):
        (ftr, ctr), (fte, cte) = columns(256, informative), columns(256, informative)
        got = bench.pair_probe(ftr, ctr, fte, cte)
        assert lo <= got <= hi, (informative, got)


def _synthetic_triplets(
    n: int, g: torch.Generator, encoded: bool = True
) -> tuple[list, dict[str, torch.Tensor]]:
    """``n`` triplets of the benchmark's construction (A = (x1, y1), B = (x1', y2), C = (x2, y2'), shown as
    A, B, C) over the aspects ``("x", "y")``, and per-image features in which only ``x`` is encoded: channel 0
    holds the x value (when ``encoded``), the other 15 channels are noise. The y values are drawn like the x
    values but reach no feature."""
    from types import SimpleNamespace

    def two() -> tuple[float, float, float]:
        a = float(torch.rand((), generator=g))
        return (
            a,
            a + 0.05 * (2 * float(torch.rand((), generator=g)) - 1),
            (a + 0.25 + 0.5 * float(torch.rand((), generator=g))) % 1,
        )

    triplets, rows = [], []
    for _ in range(n):
        x1, x1b, x2 = two()
        y2, y2b, y1 = two()
        values = ({"x": x1, "y": y1}, {"x": x1b, "y": y2}, {"x": x2, "y": y2b})
        triplets.append(SimpleNamespace(images=(None,) * 3, values=values, odd={"x": 2, "y": 0}, reference=1))
        rows += [v["x"] for v in values]
    f = torch.randn(3 * n, 16, generator=g, dtype=torch.float64)
    if encoded:
        f[:, 0] = torch.tensor(rows, dtype=torch.float64) * 4
    return triplets, {"tokens": f, "mean": f[:, :8].clone()}


def test_ceiling_of_an_unencoded_aspect_is_at_chance(bench):
    """Features that encode aspect x only: x's ceiling is high and y's, on the same triplets, is at chance --
    although y's 2AFC answer is always the opposite of x's (the construction), which a probe with signed channel
    weights reads backwards (its diagnostic ``pair_signed_*`` is high for y too, and it is not in the ceiling).
    Band: 256 held-out triplets, binomial standard error sqrt(0.25 / 256) = 0.031; the ceiling is the best of 4
    probes, so its chance bound is 0.5 + 3.5 standard errors = 0.61 (one probe exceeds 3.5 s.e. with p = 2.3e-4,
    the best of four with p < 1e-3)."""
    g = torch.Generator().manual_seed(0)
    (train, ftr), (test, fte) = _synthetic_triplets(256, g), _synthetic_triplets(256, g)
    x = bench.ceiling_from_features(ftr, fte, train, test, "x")
    y = bench.ceiling_from_features(ftr, fte, train, test, "y")
    print(json.dumps({"x": x, "y": y}))
    assert x["ceiling"] >= 0.95 and x["pair_tokens"] >= 0.95 and x["ceiling_above_chance"], x
    assert y["ceiling"] <= 0.5 + 3.5 * 0.03125 and not y["ceiling_above_chance"], y
    assert y["pair_signed_tokens"] >= 0.95, y  # the artefact the constraint removes, kept as a diagnostic


def test_pair_option_names_two_scene_aspects(bench, capsys):
    """``--pair a,b`` takes two different aspects of SCENE_ASPECTS; anything else is one argparse error (exit 2)
    that names the option and the choices."""
    assert bench.parse_pair("color,brightness") == ("color", "brightness")
    assert bench.parse_pair(" stripe frequency , color") == ("stripe frequency", "color")
    for bad in ("color", "color,color", "color,shape", "color,brightness,size"):
        with pytest.raises(SystemExit) as e:
            bench.main(["--probe-only", "--pair", bad])
        assert e.value.code == 2
        assert "--pair" in capsys.readouterr().err
