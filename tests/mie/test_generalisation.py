"""MIE compares a candidate with references it has never seen (benchmarks/mie_generalisation.py).

Fast tests: the task's construction (fresh identities; the better and the worse candidate differ only in
one half, which matches a reference in one and no reference in the other; a colour-histogram regression on
the candidates alone is at chance while the same histograms compared with the references are not), and
the ``reference_contrast`` training option against an explicit second computation.

Slow tests: a small version of the benchmark trained with ``reference_contrast`` reaches the held-out goal
while the controls (another pair's references, blank references) stay at chance."""

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import mie_generalisation  # noqa: E402


def _records(bench, folder, n, seed, prefix):
    from genmetrics.data.jsonl import load_mib_pairs

    return load_mib_pairs(
        bench.write_jsonl(folder / f"{prefix}.jsonl", bench.make_pairs(folder, n, seed, prefix=prefix))
    )


def _pixels(path):
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


# ------------------------------------------------------------------------------------------- the task
def test_pairs_differ_in_one_half_that_matches_a_reference_only_in_the_better(tmp_path):
    bench = mie_generalisation
    h = bench.HALF
    for r in _records(bench, tmp_path, 40, seed=3, prefix="t"):
        good, bad = _pixels(r.candidates[r.preference]), _pixels(r.candidates[1 - r.preference])
        refs = [_pixels(p) for p in r.references]
        k, left = r.bucket["altered_half"], r.bucket["left_ref"]
        halves = (slice(0, h), slice(h, 2 * h))
        shown = (left, 1 - left)  # which reference each half of the better candidate shows
        for j, cols in enumerate(halves):
            assert (good[:, cols] == refs[shown[j]][:, cols]).all()  # pixel-exact copy of that reference
        assert (bad[:, halves[1 - k]] == good[:, halves[1 - k]]).all()  # the other half untouched
        altered = bad[:, halves[k]]
        assert not any((altered == ref[:, halves[k]]).all() for ref in refs)


def test_identities_are_never_repeated_between_training_and_test(tmp_path):
    """Continuous colours drawn per pair: no colour of a held-out subject (reference or fresh half) occurs
    anywhere in the training images' colour sets."""
    bench = mie_generalisation
    import numpy as np

    def colours(recs):
        out = set()
        for r in recs:
            for p in (*r.references, *r.candidates):
                px = _pixels(p).astype(np.int64)
                out |= set(np.unique((px[..., 0] << 16) | (px[..., 1] << 8) | px[..., 2]).tolist())
        return out

    train = colours(_records(bench, tmp_path, 60, seed=1000, prefix="tr"))
    test = colours(_records(bench, tmp_path, 30, seed=2000, prefix="te"))
    assert len(test) == 30 * 3 * 2  # three subjects per pair (two references, one fresh), two colours each
    # uint8 colours: 2^24 values; 60 pairs use <= 360 colours, so a chance repeat of one of the test's <= 180
    # has probability <= 180 * 360 / 2^24 = 0.004 -- the seeds here give none
    assert not train & test


@pytest.mark.slow
def test_candidates_alone_are_at_chance_and_with_the_references_not(tmp_path):
    """The pixel-statistics control: a logistic regression on the candidates' colour histograms, fitted on
    300 training pairs, is within 3 standard errors of chance on 200 held-out pairs
    (sqrt(0.25 / 200) = 0.035 -> |acc - 0.5| <= 0.106); the same histograms compared with the references
    (no training) tell the candidates apart."""
    bench = mie_generalisation
    train = _records(bench, tmp_path, 300, seed=1000, prefix="tr")
    test = _records(bench, tmp_path, 200, seed=2000, prefix="te")
    alone = bench.pixel_baseline(train, test)
    assert abs(alone["held_out"] - 0.5) <= 3 * math.sqrt(0.25 / 200)
    assert alone["train"] > alone["held_out"]  # it fits its training pairs: memorising, nothing to transfer
    assert bench.reference_histogram_match(test) >= 0.95


class _HistogramOracle:
    """A model stand-in whose score is the benchmark's non-learned candidate-vs-references comparator."""

    def score_pairs(self, refs, prompts, a, b):
        from types import SimpleNamespace

        bench = mie_generalisation

        def scores(cands):
            return SimpleNamespace(
                score=torch.tensor([bench.histogram_score(c, r) for c, r in zip(cands, refs)])
            )

        return scores(a), scores(b)


def _chance_band(n):
    """Three binomial standard errors of an accuracy on ``n`` pairs at chance: 3 * sqrt(0.25 / n)."""
    return 3 * math.sqrt(0.25 / n)


def test_controls_remove_the_reference_information(tmp_path):
    """The readings' controls: a comparator that only works through the references is right on every
    held-out pair with their own references, and within chance with another pair's or with blank ones
    (60 pairs: |acc - 0.5| <= 3 * sqrt(0.25 / 60) = 0.19)."""
    bench = mie_generalisation
    test = _records(bench, tmp_path, 60, seed=2000, prefix="te")
    bench.blank_references([], tmp_path)
    got = bench.readings(_HistogramOracle(), test, str(tmp_path / "blank.png"), train=test[:5])
    assert got["held_out"] == 1.0 and got["train"] == 1.0
    for control in ("swapped", "blank"):
        assert abs(got[control] - 0.5) <= _chance_band(60), (control, got)


# ------------------------------------------------------------------------------------------- the option
def _distinct_pairs(tmp_path, n=3):
    return _records(mie_generalisation, tmp_path, n, seed=7, prefix="c")


def test_reference_contrast_term_equals_an_explicit_computation(tmp_path, make_model):
    """loss(reference_contrast=w) = the authors' loss + w * mean(max(0, margin - (s(win | own refs) -
    s(win | next pair's refs)))), the scores taken one call at a time with MIEModel.score.

    Tolerance: the two sides run the same fp32 kernels on differently sized batches (9 sequences in one
    forward vs 3); scores are O(0.1) after a handful of reductions of length <= 128, so a difference of a
    few float32 ulps of the accumulations (1.19e-7 * 128 * O(1) ~ 2e-5 at worst) bounds it; measured ~1e-7."""
    from dataclasses import replace

    from genmetrics.mie.train import MIETask, ReferenceContrastTask, TrainConfig

    # pair 2 shows pair 1's subjects (references in the other order): partners 0->1, 1->0 (2 is skipped as
    # the same subjects), 2->0. Not a cycle on purpose: at initialisation the score is close to additive,
    # s(cand | refs) ~ f(cand) + g(refs), and over a cycle of partners sum(g(own) - g(other)) telescopes to
    # 0, so with every hinge active a flipped sign would give the same term (seen: it did)
    three = _distinct_pairs(tmp_path)
    recs = [three[0], three[1], replace(three[2], references=three[1].references[::-1])]
    model = make_model(tuning="layer_only", unfreeze_layers=1)
    w, margin = 0.7, 0.1
    cfg = TrainConfig(data="x.jsonl", out=str(tmp_path), reference_contrast=w, margin=margin)
    task = ReferenceContrastTask(model, cfg)
    x = task.collate(recs)
    partner = [1, 0, 0]
    assert x["partners"] == list(enumerate(partner))
    loss, parts = task.loss(model, x)

    authors = MIETask(model, TrainConfig(data="x.jsonl", out=str(tmp_path), margin=margin))
    base, _ = authors.loss(model, authors.collate(recs))
    refs = [[str(p) for p in r.references] for r in recs]
    win = [str(r.candidates[r.preference]) for r in recs]
    own = torch.stack([model.score([refs[i]], r.prompt, [win[i]]).score[0] for i, r in enumerate(recs)])
    other = torch.stack(
        [model.score([refs[partner[i]]], r.prompt, [win[i]]).score[0] for i, r in enumerate(recs)]
    )
    term = float(torch.clamp(margin - (own - other), min=0).mean())
    flipped = float(torch.clamp(margin - (other - own), min=0).mean())
    assert abs(flipped - term) > 10 * 2e-5  # the check below can tell the term's sign
    assert abs(parts["reference_contrast"] - term) <= 2e-5
    assert abs(float(loss.detach()) - (float(base.detach()) + w * term)) <= 2e-5
    # the gradient reaches the trained layers through the extra sequences too
    loss.backward()
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "layers" in n
    )


def test_reference_contrast_skips_pairs_with_the_same_subjects_and_keeps_the_authors_monitor(
    tmp_path, make_model
):
    """Pairs whose references are the same images (in any order) are no negatives for each other: the
    loss is then the authors'. Validation (the early-stopping monitor) is the authors' in any case."""
    from dataclasses import replace

    from genmetrics.mie.train import MIETask, ReferenceContrastTask, TrainConfig

    recs = _distinct_pairs(tmp_path)
    same = [recs[0], replace(recs[1], references=recs[0].references[::-1])]
    model = make_model(tuning="layer_only", unfreeze_layers=1)
    task = ReferenceContrastTask(
        model, TrainConfig(data="x.jsonl", out=str(tmp_path), reference_contrast=1.0)
    )
    authors = MIETask(model, TrainConfig(data="x.jsonl", out=str(tmp_path)))
    x = task.collate(same)
    assert x["partners"] == [] and len(x["batch"]) == 4
    loss, parts = task.loss(model, x)
    assert parts["reference_contrast"] == 0.0
    assert float(loss.detach()) == float(authors.loss(model, authors.collate(same))[0].detach())
    with torch.no_grad():
        assert task.evaluate(model, recs) == authors.evaluate(model, recs)
        assert len(task.collate(recs)["batch"]) == 9  # training batches are contrasted again after evaluate


def test_reference_contrast_option_is_checked():
    from genmetrics.errors import InputError
    from genmetrics.mie.train import TrainConfig

    with pytest.raises(InputError, match="reference_contrast"):
        TrainConfig(data="x.jsonl", out="o", reference_contrast=-1.0).check()
    with pytest.raises(InputError, match="reference_contrast"):
        TrainConfig(data="x.jsonl", out="o", reference_contrast=float("nan")).check()


# ------------------------------------------------------------------------------------------- slow: it compares
#: the slow test's run: a 4-layer tiny Qwen3.5 whose language layers are all softmax attention (the
#: benchmark's ``--layer-types full_attention,...``; the hybrid 3 linear + 1 softmax plateaus at 0.75-0.78,
#: docs/mie.md), layer_only at lr 2e-3, trained with ``reference_contrast=1`` on SLOW_PAIRS fresh-identity
#: pairs for 4 epochs, read on SLOW_TEST held-out pairs
SLOW_PAIRS, SLOW_TEST = 300, 128
SLOW_LAYER_TYPES = ["full_attention"] * 4
#: the goal for held-out pairwise accuracy
HELD_OUT_GOAL = 0.80


@pytest.mark.slow
def test_reference_contrast_compares_candidates_with_unseen_references(tmp_path):
    """Trained with ``reference_contrast=1`` on identities it never sees again, MIE tells the better
    candidate on held-out pairs with their own references, and is at chance with another pair's or blank
    references.

    Bounds. Held out must reach the documented goal, 0.80 (docs/mie.md). Over seeds 0 / 1 / 2 this configuration reads
    0.914 / 0.875 / 0.898 on 256 held-out pairs (docs/mie.md), so the lowest seed sits 2.5 binomial
    standard errors of 128 pairs (sqrt(0.875 * 0.125 / 128) = 0.029) above the goal. The controls must
    stay within 3 standard errors of chance on 128 pairs: 3 * sqrt(0.25 / 128) = 0.133, [0.367, 0.633].
    A change that makes the evaluator ignore its references brings held out to ~0.5 (the hybrid backbone
    with the authors' objective: 0.48-0.52), far below the goal."""
    bench = mie_generalisation
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = bench.experiment(
            name="slow_test",
            pairs=SLOW_PAIRS,
            test_pairs=SLOW_TEST,
            seed=0,
            workdir=str(tmp_path),
            train_reading=False,
            reference_contrast=1.0,
            layer_types=SLOW_LAYER_TYPES,
        )
    finally:
        torch.set_num_threads(threads)
    got, band = res["readings"], _chance_band(SLOW_TEST)
    print("readings", got, "cpu_s", res["cpu_s"])  # shown with -s: the numbers docs/mie.md reports
    assert got["held_out"] >= HELD_OUT_GOAL, got
    for control in ("swapped", "blank"):
        assert abs(got[control] - 0.5) <= band, (control, got)
