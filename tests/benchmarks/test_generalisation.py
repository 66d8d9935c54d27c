"""benchmarks/tpips_generalisation.py and mie_generalisation.py, their options and probes: a bad value of
``--train`` / ``--test`` / ``--variants`` (TPIPS) or ``--layer-types`` / ``--layers`` / ``--pairs`` /
``--tuning`` (MIE) is one argparse error (exit 2) before any model is built, and a probe that cannot tell the
candidates apart reads chance, not 0."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def tpips():
    return _load("tpips_generalisation")


@pytest.fixture(scope="module")
def mie():
    return _load("mie_generalisation")


def _exit_2(main, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert len([x for x in err.splitlines() if "error:" in x]) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--train", "1"], "--train: expected an integer >= 2, got '1'"),  # the probes' 2-fold CV
        (["--train", "x"], "--train: expected an integer >= 2"),
        (["--test", "0"], "--test: expected an integer >= 1, got '0'"),
        (["--variants", "late", "Late"], "invalid choice: 'Late'"),
        (["--probe-only", "--train", "-3"], "--train"),
    ],
)
def test_tpips_counts_and_variants_are_checked_by_argparse(tpips, capsys, argv, said):
    """Before: --train 1 failed in torch.linalg.solve (singular ridge, an empty CV fold), --train/--test 0 in
    load_images ('the batch is empty'), an unknown variant deep in TrainConfig after the ceiling probes ran."""
    assert said in _exit_2(tpips.main, argv, capsys)


def _triplets(n: int, g: torch.Generator, encoded: bool) -> tuple[list, dict[str, torch.Tensor]]:
    """``n`` triplets of the benchmark's construction over aspects x, y (shown A, B, C; reference B, x names C
    odd, y names A odd) and per-image features: channel 0 holds 4 * x when ``encoded``, 7 noise channels."""

    def three() -> tuple[float, float, float]:
        a = float(torch.rand((), generator=g))
        near = a + 0.05 * (2 * float(torch.rand((), generator=g)) - 1)
        return a, near, (a + 0.25 + 0.5 * float(torch.rand((), generator=g))) % 1

    triplets, xs = [], []
    for _ in range(n):
        (x1, x1b, x2), (y2, y2b, y1) = three(), three()
        values = ({"x": x1, "y": y1}, {"x": x1b, "y": y2}, {"x": x2, "y": y2b})
        triplets.append(SimpleNamespace(images=(None,) * 3, values=values, odd={"x": 2, "y": 0}, reference=1))
        xs += [v["x"] for v in values]
    f = torch.randn(3 * n, 8, generator=g, dtype=torch.float64)
    if encoded:
        f[:, 0] = 4 * torch.tensor(xs, dtype=torch.float64)
    return triplets, {"tokens": f, "mean": f[:, :4].clone()}


def test_constant_features_give_a_chance_ceiling_not_zero(tpips):
    """Features that are the same for every image (a dead tower): every probe's margins are exactly 0, so each
    2AFC record is a tie, scored 0.5 like the trained metric's ties (``two_afc_right``). Before: ties counted
    as wrong and the ceiling read 0.0 (below chance), and no NaN anywhere."""
    g = torch.Generator().manual_seed(0)
    (train, ftr), (test, fte) = _triplets(16, g, True), _triplets(16, g, True)
    flat = {k: torch.ones_like(v) for k, v in ftr.items()}, {k: torch.ones_like(v) for k, v in fte.items()}
    out = tpips.ceiling_from_features(*flat, train, test, "x")
    for k in tpips.CEILING_PROBES:
        assert out[k] == 0.5, (k, out)
    assert out["ceiling"] == 0.5 and not out["ceiling_above_chance"], out
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in out.values()), out


def test_one_held_out_triplet_is_never_above_chance(tpips):
    """1 of 1 held-out triplet right is no evidence: the test is against the null error sqrt(0.25 / n) (0.5 for
    n = 1), not the plug-in error sqrt(p (1 - p) / n), which is 0 at p = 1 (before: every aspect of
    ``--probe-only --test 1`` read ceiling 1.0, 'above chance'). With 128 held-out triplets of an encoded aspect
    the same rule says above chance (bound 0.5 + 2 * 0.044 = 0.59; the probe reads >= 0.95)."""
    g = torch.Generator().manual_seed(1)
    (train, ftr), (test, fte) = _triplets(32, g, True), _triplets(1, g, True)
    one = tpips.ceiling_from_features(ftr, fte, train, test, "x")
    assert not one["ceiling_above_chance"], one
    (train, ftr), (test, fte) = _triplets(128, g, True), _triplets(128, g, True)
    many = tpips.ceiling_from_features(ftr, fte, train, test, "x")
    assert many["ceiling"] >= 0.95 and many["ceiling_above_chance"], many


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--layer-types", "full_attention,full_attention"], "2 layer types for --layers 4"),
        (["--layers", "3", "--layer-types", "full_attention"] * 1, "1 layer types for --layers 3"),
        (["--layer-types", "bogus,full_attention,full_attention,full_attention"], "got ['bogus']"),
        (["--layer-types", "sliding_attention"] + ["--layers", "1"], "got ['sliding_attention']"),
        (["--layer-types", ""], "got ['']"),
        (["--layer-types", " , "], "got ['', '']"),
        (["--layers", "0"], "--layers: expected an integer >= 1, got '0'"),
        (["--pixel-only", "--pairs", "0"], "--pairs: expected an integer >= 1, got '0'"),
        (["--pixel-only", "--test-pairs", "0"], "--test-pairs: expected an integer >= 1"),
        (["--tuning", "lora"], "invalid choice: 'lora'"),
    ],
)
def test_mie_options_are_checked_by_argparse(mie, capsys, argv, said):
    """Before: a layer count or kind the tiny Qwen3.5 does not take failed inside huggingface_hub's config
    validation (StrictDataclassClassValidationError, exit 1) after the data was drawn; '--pairs 0' in the data
    loader ('has no records')."""
    assert said in _exit_2(mie.main, argv, capsys)


def test_mie_layer_types_reach_the_experiment(mie, monkeypatch, capsys):
    """The parsed kinds (spaces stripped) go to ``experiment`` as a list, one per layer."""
    got = {}

    def fake(**kw):
        got.update(kw)
        return {"name": kw["name"]}

    monkeypatch.setattr(mie, "experiment", fake)
    monkeypatch.setattr(mie, "cpu_model", lambda: "test")
    mie.main(["--layers", "2", "--layer-types", "full_attention, linear_attention", "--pairs", "2"])
    assert got["layer_types"] == ["full_attention", "linear_attention"] and got["layers"] == 2
    assert '"name": "baseline"' in capsys.readouterr().out
    mie.main(["--layers", "3"])
    assert got["layer_types"] is None  # the default: the model's own mix


def test_fractions_of_a_zero_or_chance_ceiling_are_none(tpips):
    """A ceiling of 0 (every probe wrong on a 1-triplet held-out set) divided the held-out 2AFC by zero
    (ZeroDivisionError after training); a ceiling at or below chance gave (held - 0.5) / 1e-9. Closed forms
    otherwise: 0.9 of a 1.0 ceiling is 0.9 of it and 0.8 of its margin over chance."""
    assert tpips.ceiling_fractions(0.5, 0.0) == (None, None)
    assert tpips.ceiling_fractions(0.6, 0.5) == (1.2, None)
    assert tpips.ceiling_fractions(0.9, 1.0) == (0.9, 0.8)
    assert tpips.ceiling_fractions(0.7, 0.8) == (round(0.7 / 0.8, 4), round(0.2 / 0.3, 4))
