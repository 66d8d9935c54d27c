"""genmetrics.tpips.synthetic: the procedural triplets are what they say by construction (odd images by each
aspect, held-out values disjoint from training values, aspects independent in the pixels), seeded, and bad
arguments are refused naming them."""

from __future__ import annotations

import pytest
import torch

from genmetrics.tpips.synthetic import (
    CIRCULAR,
    SCENE_ASPECTS,
    aspect_triplets,
    split_intervals,
    value_triplets,
)

PAIR = ("color", "brightness")


def _dist(a: str, u: float, v: float) -> float:
    d = abs(u - v)
    return min(d, 1 - d) if a in CIRCULAR else d


@pytest.mark.parametrize("aspects", [PAIR, ("size", "rotation"), ("stripe orientation", "position")])
def test_the_odd_image_by_each_aspect_is_the_one_whose_value_differs(aspects):
    """By ``x``: A and B share an interval (within the jitter), C lies in another one; by ``y``: B and C
    share one, A lies in another. The reference of 2AFC is B."""
    bins, jitter = 8, 0.06
    for t in value_triplets(16, aspects, split="train", seed=2, size=16, bins=bins, jitter=jitter):
        assert sorted([t.reference, *t.odd.values()]) == [0, 1, 2]
        for a in aspects:
            odd = t.odd[a]
            pair = [k for k in range(3) if k != odd]
            assert _dist(a, t.values[pair[0]][a], t.values[pair[1]][a]) <= jitter / 2 + 1e-9
            for k in pair:  # the odd value sits in another interval: its bin index differs
                assert int(t.values[odd][a] * bins) != int(t.values[k][a] * bins)
        others = [a for a in SCENE_ASPECTS if a not in aspects]
        assert all(t.values[0][a] == t.values[1][a] == t.values[2][a] for a in others)  # shared nuisances


def test_the_same_seed_gives_the_same_triplets_and_another_seed_others():
    one = value_triplets(3, PAIR, seed=4, size=16)
    again = value_triplets(3, PAIR, seed=4, size=16)
    other = value_triplets(3, PAIR, seed=5, size=16)
    for a, b in zip(one, again):
        assert a.values == b.values and all(torch.equal(x, y) for x, y in zip(a.images, b.images))
    assert [t.values for t in one] != [t.values for t in other]
    (c1, p1), (c2, p2) = aspect_triplets(1, seed=9, size=16)[0], aspect_triplets(1, seed=9, size=16)[0]
    assert c1.votes == c2.votes and p1.votes == p2.votes
    assert all(torch.equal(x, y) for x, y in zip(c1.images, c2.images))


def test_records_vote_for_the_odd_image_and_two_afc_for_the_other_candidate():
    for t in value_triplets(6, PAIR, seed=1, size=16):
        for r in t.records():
            assert r.votes == tuple(1.0 if k == t.odd[r.aspect] else 0.0 for k in range(3))
        cand = [k for k in range(3) if k != t.reference]
        for r in t.two_afc():
            chosen = cand[r.votes.index(1.0)]
            assert chosen != t.odd[r.aspect] and r.reference is t.images[t.reference]


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: split_intervals("val"), "split='val': expected 'train' or 'test'"),
        (lambda: split_intervals("train", bins=5), "bins must be an even number >= 4, got 5"),
        (lambda: value_triplets(1, ("color", "color")), "aspects=('color', 'color'): expected two different"),
        (lambda: value_triplets(1, ("color", "shape")), "aspects=('color', 'shape')"),
        (lambda: value_triplets(1, PAIR, jitter=0.2), "jitter must be in [0, 1/bins) = [0, 0.125), got 0.2"),
    ],
)
def test_bad_arguments_are_refused_naming_them(call, needle):
    with pytest.raises(ValueError) as e:
        call()
    assert needle in str(e.value)


def _in(v: float, intervals: list[tuple[float, float]]) -> bool:
    return any(lo <= v < hi for lo, hi in intervals)


def test_held_out_values_are_disjoint_from_training_values():
    from genmetrics.tpips.synthetic import split_intervals, value_triplets

    train, test = split_intervals("train", 8), split_intervals("test", 8)
    assert not any(_in(lo, test) or _in(hi - 1e-9, test) for lo, hi in train)  # no shared interval
    for split, own in (("train", train), ("test", test)):
        for t in value_triplets(12, PAIR, split=split, seed=5, size=32):
            for v in t.values:
                for a in PAIR:  # every tested value comes from its split's intervals
                    assert _in(v[a], own), (split, a, v[a])


def test_task_defeats_aspect_blind_metrics():
    """The two aspects name different candidates for the same reference, so any metric that ignores the aspect
    text (here pixel L2) is right on exactly one of a triplet's two 2AFC records: mean 0.5, both 0."""
    from genmetrics.functional.agreement import per_sample_agreement
    from genmetrics.tpips.synthetic import value_triplets

    triplets = value_triplets(40, PAIR, split="test", seed=7, size=32)
    recs = [r for t in triplets for r in t.two_afc()]
    for t in triplets:
        a, b = t.two_afc()
        assert a.reference is b.reference and a.candidates == b.candidates and a.votes == b.votes[::-1]

    def l2(x: torch.Tensor, y: torch.Tensor) -> float:
        return -float((x.float() - y.float()).norm())

    sims = torch.tensor([[l2(r.reference, c) for c in r.candidates] for r in recs], dtype=torch.float64)
    right = per_sample_agreement(sims, torch.tensor([r.votes for r in recs])).view(-1, 2)
    assert torch.equal(right.sum(1), torch.ones(len(triplets), dtype=right.dtype))


def test_scene_generator_sets_colour_and_brightness_independently():
    """The default pair is not confounded by construction: in the rendered pixels, the background grey (pixels
    with chroma < 0.1) follows the brightness value and not the hue, and the object's hue (pixels with chroma >
    0.3) follows the hue value and not the brightness. 64 triplets (192 images): a correlation of independent
    values has standard error 1 / sqrt(192) = 0.072, so |r| <= 0.3 is a 4-standard-error band."""
    import math

    from genmetrics.tpips.synthetic import value_triplets

    grey, hue_err, bright, hue, hue_meas = [], [], [], [], []
    for t in value_triplets(64, PAIR, split="test", seed=3, size=64):
        for img, v in zip(t.images, t.values):
            x = img.double() / 255
            chroma = x.max(0).values - x.min(0).values
            grey.append(float(x.mean(0)[chroma < 0.1].mean()))
            obj = x[:, chroma > 0.3].mean(1)
            r, gg, b = obj.tolist()  # the hue of the object's mean colour (the HSV hue formula)
            h = math.atan2(math.sqrt(3) * (gg - b), 2 * r - gg - b) / (2 * math.pi) % 1
            hue_meas.append(h)
            hue_err.append(min(abs(h - v["color"]), 1 - abs(h - v["color"])))
            bright.append(v["brightness"])
            hue.append(v["color"])

    def corr(a: list[float], b: list[float]) -> float:
        return float(torch.corrcoef(torch.tensor([a, b], dtype=torch.float64))[0, 1])

    assert corr(grey, bright) >= 0.95
    assert max(hue_err) <= 0.05, max(hue_err)  # the object's hue is the colour value (within 18 degrees)
    for k in (math.cos, math.sin):  # hue (circular) against brightness, both ways round
        assert abs(corr([k(2 * math.pi * h) for h in hue], grey)) <= 0.3
        assert abs(corr([k(2 * math.pi * h) for h in hue_meas], bright)) <= 0.3
