"""Does a trained TPIPS generalise to aspect VALUES it never saw? Held-out 2AFC per aspect and variant, as a
fraction of what a linear probe on the same frozen vision features reaches (the ceiling).

Task (genmetrics.tpips.synthetic.value_triplets): scenes whose aspects are continuous values in [0, 1); the
training triplets draw the two tested aspects from the even eighths of [0, 1), the held-out triplets from the
odd eighths, so every held-out value lies between trained ones and none was seen. A triplet
``A = (x1, y1), B = (x1', y2), C = (x2, y2')`` names C odd by ``x`` and A odd by ``y``; its 2AFC form has the
reference B, and by ``x`` the candidate A is the more similar, by ``y`` the candidate C. An aspect-blind metric
therefore gets at most 50% mean 2AFC agreement and 0% "both aspects right" (chance: 50% and 25%).

Ceiling per aspect: linear probes on the frozen vision tower's output of the same backbone (merged tokens and
the DeepStack feature, concatenated over tokens, or averaged), trained on the training triplets' images:
(1) ``pair``: logistic regression on the per-channel squared differences ``(phi_B - phi_C)^2 - (phi_B -
phi_A)^2`` predicting the 2AFC answer, channel weights constrained ``>= 0`` (a learned diagonal metric, the
frozen-feature version of mid fusion); (2) ``value``: ridge regression of the value (cos/sin for circular
aspects) from ``phi``, the 2AFC answer read from the predicted values. The ceiling is the best of them on the
held-out 2AFC records. ``pair_signed_*`` (the pair probe with signed weights) is reported as a diagnostic and
is not part of the ceiling: the two records of a triplet name opposite candidates, so a signed probe scores
aspect ``y`` by reading aspect ``x`` backwards.

Each variant is trained with the project's trainer (``train_tpips`` on the odd-one-out records, both aspects)
on the small random Qwen3-VL of benchmarks/tpips_learnability.py, LoRA on the language tower, then scored on the
held-out 2AFC records with ``TPIPSModel.similarity``, and on the controls: the aspect text replaced by
``overall`` or by the other aspect's text, the reference replaced by another triplet's, a blank (grey)
reference.

Prints one JSON line per aspect x variant and a summary line. CPU seconds are ``time.process_time()`` (run it
with 1 thread). ``--quick`` is the setting of the slow test (tests/tpips/test_generalisation.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_HERE)]

#: the benchmark's default aspect pair (``--pair``): both encoded by the small frozen vision tower, set
#: independently by the scene generator (hue of the object, mean grey of the background); see the probe table in
#: docs/tpips.md, "Generalisation"
PAIR = ("color", "brightness")


def parse_pair(text: str) -> tuple[str, str]:
    """``"color,brightness"`` -> ``("color", "brightness")``: two different aspects of ``SCENE_ASPECTS``.

    >>> parse_pair("color, stripe frequency")
    ('color', 'stripe frequency')
    """
    from genmetrics.tpips.synthetic import SCENE_ASPECTS

    pair = tuple(a.strip() for a in text.split(","))
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(SCENE_ASPECTS):
        raise argparse.ArgumentTypeError(
            f"--pair {text!r}: expected two different aspects of {SCENE_ASPECTS} separated by a comma, "
            "e.g. --pair color,brightness"
        )
    return pair[0], pair[1]


def at_least(low: int):
    """An argparse ``type``: an integer ``>= low`` (``--train``: the probes' 2-fold cross-validation needs two
    triplets; ``--test``: one), else one argparse error naming the option's value.

    >>> at_least(2)("8")
    8
    """

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = low - 1
        if n < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return n

    return parse


def _learnability() -> Any:
    """benchmarks/tpips_learnability.py (its ``small_backbone``: the same small random Qwen3-VL)."""
    spec = importlib.util.spec_from_file_location(
        "tpips_learnability", os.path.join(_HERE, "tpips_learnability.py")
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# -- frozen features and probes ----------------------------------------------------------------------------


def frozen_features(model: Any, images: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{"tokens": [N, 2*T*D], "mean": [N, 2*D]}``: the frozen vision tower's merged tokens and first DeepStack
    feature of each image, concatenated over the ``T`` tokens or averaged."""
    feats = model.vision_features(model.resized(model.load_images(images)), use_cache=False)
    tokens = torch.stack([torch.cat([f.embeds.flatten(), f.deepstack[0].flatten()]) for f in feats])
    mean = torch.stack([torch.cat([f.embeds.mean(0), f.deepstack[0].mean(0)]) for f in feats])
    return {"tokens": tokens.double(), "mean": mean.double()}


def logistic(x: torch.Tensor, y: torch.Tensor, lam: float, *, nonneg: bool = False) -> torch.Tensor:
    """L2-regularised logistic regression without intercept (labels +-1), fitted with scipy's L-BFGS-B;
    ``nonneg``: every weight constrained ``>= 0`` (bounds, so a weight can be exactly 0)."""
    import numpy as np
    from scipy.optimize import minimize

    xn, yn = x.double().numpy(), y.double().numpy()

    def loss_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        m = yn * (xn @ w)
        loss = np.logaddexp(0.0, -m).mean() + lam * (w @ w)
        # d/dw softplus(-m) = -sigmoid(-m) * y * x
        grad = -(xn * (yn * 0.5 * (1 - np.tanh(m / 2)))[:, None]).mean(0) + 2 * lam * w
        return float(loss), grad

    bounds = [(0.0, None)] * xn.shape[1] if nonneg else None
    res = minimize(
        loss_grad,
        np.zeros(xn.shape[1]),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 500, "gtol": 1e-9},
    )
    return torch.from_numpy(res.x).to(x.dtype)


def ridge(x: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """Ridge regression with intercept: ``[D+1, K]`` (last row the intercept), closed form."""
    x1 = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    reg = lam * len(x) * torch.eye(x1.shape[1], dtype=x.dtype)
    reg[-1, -1] = 0
    return torch.linalg.solve(x1.T @ x1 + reg, x1.T @ y)


LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def _cv_pick(fit_score, n: int) -> float:
    """The lambda of :data:`LAMBDAS` with the best 2-fold cross-validated score (folds: first/second half)."""
    h = n // 2
    folds = [(torch.arange(h), torch.arange(h, n)), (torch.arange(h, n), torch.arange(h))]
    return max(LAMBDAS, key=lambda lam: sum(fit_score(a, b, lam) for a, b in folds))


def encode_value(aspect: str, v: torch.Tensor) -> torch.Tensor:
    from genmetrics.tpips.synthetic import CIRCULAR

    if aspect in CIRCULAR:
        return torch.stack([torch.cos(2 * math.pi * v), torch.sin(2 * math.pi * v)], 1)
    return v[:, None]


def value_distance(aspect: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance of two value codes (:func:`encode_value`) in value units (around the circle for circular
    aspects: at most 0.5)."""
    from genmetrics.tpips.synthetic import CIRCULAR

    if aspect in CIRCULAR:
        turn = (torch.atan2(a[:, 1], a[:, 0]) - torch.atan2(b[:, 1], b[:, 0])) / (2 * math.pi)
        return 0.5 - (turn.remainder(1.0) - 0.5).abs()
    return (a - b).abs().squeeze(1)


def _probe_columns(
    triplets: list, aspect: str
) -> tuple[list[torch.Tensor], list[int], list[tuple[int, int]]]:
    """The triplets' images (3 per triplet, in order), the row of each triplet's reference and the rows of its
    2AFC candidates for ``aspect``: (the correct one, the other)."""
    imgs = [im for t in triplets for im in t.images]
    ref = [3 * i + t.reference for i, t in enumerate(triplets)]
    cands = []
    for i, t in enumerate(triplets):
        other = [k for k in range(3) if k not in (t.reference, t.odd[aspect])][0]
        cands.append((3 * i + other, 3 * i + t.odd[aspect]))
    return imgs, ref, cands


def pair_probe(
    ftr: torch.Tensor, train_cols: tuple, fte: torch.Tensor, test_cols: tuple, *, nonneg: bool = True
) -> float:
    """Held-out 2AFC of the pair probe on per-image features ``ftr`` / ``fte`` (rows as :func:`_probe_columns`):
    a logistic regression on ``(phi_B - phi_bad)^2 - (phi_B - phi_good)^2`` predicting "the correct candidate
    is closer", its regulariser picked by 2-fold cross-validation on the training triplets.

    ``nonneg`` (the default, the ceiling's): channel weights ``>= 0``, a true diagonal metric that can only say
    "closer in these channels". With signed weights (``nonneg=False``, a diagnostic) the probe can also learn
    "farther in these channels": the two 2AFC records of a triplet name opposite candidates, so their features
    are each other's negatives, and a signed probe reads aspect ``y`` off aspect ``x``'s channels backwards
    (docs/tpips.md, "Generalisation")."""

    def diff(f: torch.Tensor, ref: list[int], cands: list[tuple[int, int]]) -> torch.Tensor:
        good, bad = (torch.tensor([c[k] for c in cands]) for k in (0, 1))
        r = f[torch.tensor(ref)]
        return (r - f[bad]) ** 2 - (r - f[good]) ** 2

    dtr, dte = diff(ftr, *train_cols), diff(fte, *test_cols)
    # d @ w > 0 <=> the correct candidate is closer under the channel weights w; half of the training rows are
    # sign-flipped with their labels so that the regression sees both labels (with w >= 0 and no intercept the
    # flip changes nothing; it keeps the signed fit unbiased). The positive per-channel scale keeps w >= 0
    # meaning "closer".
    g = torch.Generator().manual_seed(0)
    sign = torch.where(torch.rand(len(dtr), generator=g) < 0.5, -1.0, 1.0).double()
    scale = dtr.std(0).clamp_min(1e-12)
    xtr, xte = dtr / scale * sign[:, None], dte / scale

    def fit_score(a: torch.Tensor, b: torch.Tensor, lam: float) -> float:
        w = logistic(xtr[a], sign[a], lam, nonneg=nonneg)
        return float(((xtr[b] @ w) * sign[b] > 0).double().mean())

    w = logistic(xtr, sign, _cv_pick(fit_score, len(xtr)), nonneg=nonneg)
    return round(float(_right((xte @ w).sign()).mean()), 4)


def _right(margin_sign: torch.Tensor) -> torch.Tensor:
    """2AFC agreement from the sign of "how much closer the correct candidate is": 1, 0, and 0.5 for a tie (as
    ``two_afc_right`` scores the trained metric), so that a probe that cannot tell the candidates apart
    (constant features, all weights 0) reads chance, not 0."""
    return (margin_sign.double() + 1) / 2


def embedding_probe(model: Any, train: list, test: list, aspects: tuple[str, ...]) -> dict[str, float]:
    """Late fusion: :func:`pair_probe` on the model's own unit embeddings (``TPIPSModel.embed`` under each
    aspect's text), per aspect: how much of the aspect the pooled embedding carries at all, whatever the
    cosine does with it (compare with the ceiling, a probe on the vision tower's tokens)."""
    out = {}
    for a in aspects:
        cols = []
        for triplets in (train, test):
            imgs, ref, cands = _probe_columns(triplets, a)
            cols.append((model.embed(imgs, a).double(), (ref, cands)))
        out[a] = pair_probe(cols[0][0], cols[0][1], cols[1][0], cols[1][1])
    return out


#: the probes the ceiling is the best of (the signed pair probes are reported as a diagnostic only)
CEILING_PROBES = ("pair_tokens", "pair_mean", "value_tokens", "value_mean")


def probe_ceiling(model: Any, train: list, test: list, aspect: str) -> dict[str, Any]:
    """Held-out 2AFC of the linear probes for ``aspect`` on the frozen vision tower of ``model`` (see the module
    docstring and :func:`ceiling_from_features`)."""
    ftr = frozen_features(model, [im for t in train for im in t.images])
    fte = frozen_features(model, [im for t in test for im in t.images])
    return ceiling_from_features(ftr, fte, train, test, aspect)


def ceiling_from_features(
    ftr: dict[str, torch.Tensor], fte: dict[str, torch.Tensor], train: list, test: list, aspect: str
) -> dict[str, Any]:
    """The probes of :func:`probe_ceiling` on per-image features (``{"tokens": [3N, F], "mean": [3N, F']}``,
    rows in the triplets' image order); ``ceiling`` is the best of :data:`CEILING_PROBES`, with its binomial
    standard error over the held-out triplets. ``pair_signed_*`` (signed channel weights) are diagnostics."""
    _, rtr, ctr = _probe_columns(train, aspect)
    _, rte, cte = _probe_columns(test, aspect)
    out: dict[str, Any] = {}
    # (1) the pair probe: a non-negative diagonal metric (the ceiling's), and its signed diagnostic
    for name in ("tokens", "mean"):
        out[f"pair_{name}"] = pair_probe(ftr[name], (rtr, ctr), fte[name], (rte, cte))
        out[f"pair_signed_{name}"] = pair_probe(ftr[name], (rtr, ctr), fte[name], (rte, cte), nonneg=False)
    # (2) the value probe: ridge on single images, the 2AFC answer from the predicted values
    vtr = torch.tensor([v[aspect] for t in train for v in t.values], dtype=torch.float64)
    ytr = encode_value(aspect, vtr)
    for name in ("tokens", "mean"):
        x, xt = ftr[name], fte[name]
        mu, sd = x.mean(0), x.std(0).clamp_min(1e-12)
        x, xt = (x - mu) / sd, (xt - mu) / sd

        def fit_score_v(a: torch.Tensor, b: torch.Tensor, lam: float, x: torch.Tensor = x) -> float:
            # folds over triplets (their three images together)
            ia = (3 * a[:, None] + torch.arange(3)).flatten()
            ib = (3 * b[:, None] + torch.arange(3)).flatten()
            beta = ridge(x[ia], ytr[ia], lam)
            pred = torch.cat([x[ib], torch.ones(len(ib), 1, dtype=x.dtype)], 1) @ beta
            return -float(((pred - ytr[ib]) ** 2).sum(1).mean())

        lam = _cv_pick(fit_score_v, len(train))
        beta = ridge(x, ytr, lam)
        pred = torch.cat([xt, torch.ones(len(xt), 1, dtype=xt.dtype)], 1) @ beta
        good, bad = (torch.tensor([c[k] for c in cte]) for k in (0, 1))
        ref = torch.tensor(rte)
        margin = value_distance(aspect, pred[ref], pred[bad]) - value_distance(aspect, pred[ref], pred[good])
        out[f"value_{name}"] = round(float(_right(margin.sign()).mean()), 4)
        if name == "tokens":  # how well the value itself is recovered on held-out values
            vte = torch.tensor([v[aspect] for t in test for v in t.values], dtype=torch.float64)
            err = value_distance(aspect, pred, encode_value(aspect, vte))
            out["value_error_tokens"] = round(float(err.mean()), 4)
    best = max(CEILING_PROBES, key=lambda k: out[k])
    n = len(test)
    out["ceiling"], out["ceiling_probe"] = out[best], best
    out["ceiling_stderr"] = round(math.sqrt(max(out[best] * (1 - out[best]), 1e-12) / n), 4)
    # above chance: 2 standard errors above 0.5 under the null (p = 0.5: sqrt(0.25 / n)), not under the plug-in
    # error, which is 0 at a ceiling of 1.0 and so called 1 right triplet out of 1 "above chance"
    out["ceiling_above_chance"] = out[best] - 2 * math.sqrt(0.25 / n) > 0.5
    return out


# -- the trained metric -----------------------------------------------------------------------------------


def two_afc_right(
    model: Any, triplets: list, *, aspect_text: Any = None, reference: str = "own", chunk: int = 32
) -> torch.Tensor:
    """``[N, 2]`` agreement (1, 0, or 0.5 for a tie) of each triplet's two 2AFC records (aspect order of the
    triplet's ``aspects``). ``aspect_text(record, triplet)`` replaces the aspect text; ``reference``:
    ``"own"``, ``"swapped"`` (the next triplet's reference) or ``"blank"`` (a grey image)."""
    from genmetrics.functional.agreement import per_sample_agreement

    recs = [(t, r) for t in triplets for r in t.two_afc()]
    n = len(triplets)
    refs = []
    for i, (_t, r) in enumerate(recs):
        if reference == "own":
            refs.append(r.reference)
        elif reference == "swapped":
            donor = triplets[(i // 2 + 1) % n]
            refs.append(donor.images[donor.reference])
        elif reference == "blank":
            refs.append(torch.full_like(r.reference, 128))
        else:
            raise ValueError(reference)
    texts = [r.aspect if aspect_text is None else aspect_text(r, t) for t, r in recs]
    sims = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(recs), chunk):
            sl = slice(i, i + chunk)
            s0 = model.similarity(refs[sl], [r.candidates[0] for _, r in recs[sl]], texts[sl])
            s1 = model.similarity(refs[sl], [r.candidates[1] for _, r in recs[sl]], texts[sl])
            sims.append(torch.stack([s0, s1], 1))
    votes = torch.tensor([r.votes for _, r in recs])
    return per_sample_agreement(torch.cat(sims).double(), votes).view(n, 2)


def summarise(right: torch.Tensor, aspects: tuple[str, str]) -> dict[str, float]:
    out = {a: round(float(right[:, k].mean()), 4) for k, a in enumerate(aspects)}
    out["mean"] = round(float(right.mean()), 4)
    out["both"] = round(float((right.sum(1) == 2).double().mean()), 4)
    return out


def evaluate(model: Any, test: list, aspects: tuple[str, str]) -> dict[str, Any]:
    other = {aspects[0]: aspects[1], aspects[1]: aspects[0]}
    return {
        "heldout": summarise(two_afc_right(model, test), aspects),
        "controls": {
            "aspect_overall": summarise(
                two_afc_right(model, test, aspect_text=lambda r, t: "overall"), aspects
            ),
            "aspect_other": summarise(
                two_afc_right(model, test, aspect_text=lambda r, t: other[r.aspect]), aspects
            ),
            "reference_swapped": summarise(two_afc_right(model, test, reference="swapped"), aspects),
            "reference_blank": summarise(two_afc_right(model, test, reference="blank"), aspects),
        },
    }


def run(args) -> list[dict]:
    from genmetrics.testing import tiny_qwen3vl_processor
    from genmetrics.tpips import TPIPSModel
    from genmetrics.tpips.synthetic import value_triplets
    from genmetrics.tpips.train import TrainConfig, train_tpips

    torch.set_num_threads(args.threads)
    learn = _learnability()
    pair = tuple(args.pair)
    t0 = time.process_time()
    train = value_triplets(args.train, pair, split="train", seed=args.seed, size=args.size)
    test = value_triplets(args.test, pair, split="test", seed=args.seed + 1000, size=args.size)
    seen = value_triplets(args.test, pair, split="train", seed=args.seed + 2000, size=args.size)
    processor = tiny_qwen3vl_processor(args.size)
    frozen = TPIPSModel(learn.small_backbone(args.seed), processor, "late")
    ceilings = {a: probe_ceiling(frozen, train, test, a) for a in pair}
    probe_cpu = time.process_time() - t0
    common = {
        "benchmark": "tpips_generalisation",
        "seed": args.seed,
        "pair": list(pair),
        "train_triplets": args.train,
        "test_triplets": args.test,
        "image_size": args.size,
    }
    lines: list[dict] = []
    summary: dict[str, Any] = {"variants": {}}
    for variant in args.variants:
        t1 = time.process_time()
        cfg = TrainConfig(
            variant=variant,
            lr=args.lr,
            batch_size=args.batch,
            micro_batch_size=args.batch,
            epochs=args.epochs,
            warmup_ratio=0.05,
            image_size=None,
            val_every=0,
            save_every=0,
            probe_layers=args.probe_layers,
            lora_r=args.lora_r,
            lora_dropout=0.0,
            seed=args.seed,
        )
        before = TPIPSModel(
            learn.small_backbone(args.seed), processor, variant, probe_layers=args.probe_layers
        )
        ev_before = summarise(two_afc_right(before, test), pair)
        with tempfile.TemporaryDirectory() as tmp:
            res = train_tpips(
                [r for t in train for r in t.records()],
                os.path.join(tmp, "run"),
                config=cfg,
                backbone=learn.small_backbone(args.seed),
                processor=processor,
                progress=False,
            )
        ev = evaluate(res.model, test, pair)
        ev_seen = summarise(two_afc_right(res.model, seen), pair)
        emb = None
        if args.embedding_probe and variant == "late":
            emb = {
                "before": embedding_probe(before, train, test, pair),
                "after": embedding_probe(res.model, train, test, pair),
            }
        cpu = round(time.process_time() - t1, 1)
        held = ev["heldout"]
        fractions: dict[str, float | None] = {}
        for a in pair:
            ceil = ceilings[a]["ceiling"]
            fractions[a], above = ceiling_fractions(held[a], ceil)
            lines.append(
                {
                    **common,
                    "line": "aspect",
                    "variant": variant,
                    "aspect": a,
                    "ceiling": ceil,
                    "ceiling_at_chance": not ceilings[a]["ceiling_above_chance"],
                    "heldout_2afc": held[a],
                    "fraction_of_ceiling": fractions[a],
                    "fraction_above_chance": above,
                    "seen_values_2afc": ev_seen[a],
                    "before_training": ev_before[a],
                    "controls": {k: v[a] for k, v in ev["controls"].items()},
                    "variant_cpu_s": cpu,  # training and every reading of this variant (both aspects)
                    **({"embedding_probe": {k: v[a] for k, v in emb.items()}} if emb else {}),
                    "probes": ceilings[a],
                }
            )
            print(json.dumps(lines[-1]), flush=True)
        known = [f for f in fractions.values() if f is not None]  # None: a ceiling of 0 (tiny held-out set)
        min_fraction = min(known) if len(known) == len(fractions) else None
        goal_fraction = min_fraction is not None and min_fraction >= 0.85
        both_possible = all(ceilings[a]["ceiling_above_chance"] for a in pair)
        summary["variants"][variant] = {
            "heldout": held,
            "min_fraction_of_ceiling": min_fraction,
            "seen_values": ev_seen,
            "before_training": ev_before,
            "controls": ev["controls"],
            "steps": res.steps,
            "first_loss": round(res.losses[0], 4),
            "last_loss": round(res.losses[-1], 4),
            "cpu_s": cpu,
            "goals_met": bool(goal_fraction and (held["both"] >= 0.6 or not both_possible)),
        }
    out = {
        **common,
        "line": "summary",
        "ceilings": {a: ceilings[a]["ceiling"] for a in pair},
        **summary,
        "probe_cpu_s": round(probe_cpu, 1),
        "cpu_s": round(time.process_time() - t0, 1),
        "goals_met": all(v["goals_met"] for v in summary["variants"].values()),
        "settings": {
            "epochs": args.epochs,
            "batch": args.batch,
            "lr": args.lr,
            "probe_layers": args.probe_layers,
            "lora_r": args.lora_r,
            "threads": args.threads,
            "backbone": "benchmarks/tpips_learnability.py small_backbone, random",
        },
    }
    lines.append(out)
    print(json.dumps(out), flush=True)
    return lines


def ceiling_fractions(held: float, ceiling: float) -> tuple[float | None, float | None]:
    """``(held / ceiling, (held - 0.5) / (ceiling - 0.5))``: the held-out 2AFC as a fraction of the ceiling, and
    of the ceiling's margin over chance; ``None`` where the denominator is not positive (a ceiling of 0 on a
    tiny held-out set; a ceiling at or below chance has no margin to be a fraction of).

    >>> ceiling_fractions(0.9, 1.0), ceiling_fractions(0.6, 0.5)
    ((0.9, 0.8), (1.2, None))
    """
    return (
        round(held / ceiling, 4) if ceiling > 0 else None,
        round((held - 0.5) / (ceiling - 0.5), 4) if ceiling > 0.5 else None,
    )


def probe_all(args) -> list[dict]:
    """The ceiling of every aspect of :data:`SCENE_ASPECTS` (each tested against a second aspect that names the
    other candidate: ``color``, or ``brightness`` for colour itself), one JSON line each."""
    from genmetrics.testing import tiny_qwen3vl_processor
    from genmetrics.tpips import TPIPSModel
    from genmetrics.tpips.synthetic import SCENE_ASPECTS, value_triplets

    torch.set_num_threads(args.threads)
    learn = _learnability()
    frozen = TPIPSModel(learn.small_backbone(args.seed), tiny_qwen3vl_processor(args.size), "late")
    lines = []
    for a in SCENE_ASPECTS:
        t0 = time.process_time()
        pair = (a, "brightness" if a == "color" else "color")
        train = value_triplets(args.train, pair, split="train", seed=args.seed, size=args.size)
        test = value_triplets(args.test, pair, split="test", seed=args.seed + 1000, size=args.size)
        line = {
            "benchmark": "tpips_generalisation",
            "line": "probe",
            "seed": args.seed,
            "aspect": a,
            "paired_with": pair[1],
            "train_triplets": args.train,
            "test_triplets": args.test,
            "image_size": args.size,
            **probe_ceiling(frozen, train, test, a),
            "cpu_s": round(time.process_time() - t0, 1),
        }
        lines.append(line)
        print(json.dumps(line), flush=True)
    return lines


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pair",
        type=parse_pair,
        default=PAIR,
        help="the two tested aspects, comma-separated (default: %(default)s)",
    )
    ap.add_argument(
        "--variants", nargs="+", choices=["late", "mid", "early"], default=["late", "mid", "early"]
    )
    ap.add_argument("--train", type=at_least(2), default=384, help="training triplets (2 records each)")
    ap.add_argument("--test", type=at_least(1), default=128, help="held-out triplets (2 2AFC records each)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--epochs", type=float, default=10.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe-layers", type=int, default=1, help="mid fusion: probe layers (1: the last)")
    ap.add_argument("--lora-r", type=int, default=16, help="LoRA rank (alpha = 2 x rank)")
    ap.add_argument(
        "--embedding-probe",
        action="store_true",
        help="late fusion: also the pair probe on the model's own embeddings, before and after training",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the slow test's setting")
    ap.add_argument(
        "--probe-only", action="store_true", help="only the probe ceiling of every scene aspect (no training)"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.train, args.test = 192, 96
    return probe_all(args) if args.probe_only else run(args)


if __name__ == "__main__":
    main()
