"""Batch composition never changes an MIE score: rows that mix image sizes, aspect ratios, PIL
modes (L, LA, RGBA, P, I;16, CMYK, RGB), prompts and the NUMBER of references give, in any batch, the numbers
of the same row scored alone -- for ``MIEModel.score``, ``score_pairs``, the ``mie`` metric and the training
forward, in both tuning modes, with batches of 1, 3 and all rows.

Tolerance 1e-5 (absolute, on scores and logits of magnitude <= 1): a row's numbers come from the same fp32
operations whether it is alone or in a batch. Batching changes only which rows share a matrix product, and a
blocked product may then sum a row's terms in another order: a reordered float32 sum of n terms moves by at
most n * eps * sum|terms| and in practice by about sqrt(n) * eps relative (eps = 1.19e-7); with n <= 256 (the
MLP width of the tiny model) that is ~2e-6 relative per product, and LayerNorm and the small heads do not
amplify it over 2 layers, so 1e-5 holds on any CPU while a row scored with another row's image or references
moves by 1e-2 or more. Measured on this machine: the largest difference is printed by each test."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

MODES = ("layer_only", "lora_layer")


def _image(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    w, h = size
    if mode == "L":
        return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), mode="L")
    if mode == "LA":
        return Image.fromarray(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), mode="LA")
    if mode == "RGBA":
        return Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), mode="RGBA")
    if mode == "CMYK":
        return Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), mode="CMYK")
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))
    rgb = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), mode="RGB")
    return rgb.quantize(colors=16) if mode == "P" else rgb


@pytest.fixture(scope="module")
def rows():
    """7 rows: 1 to 4 references, sizes from 40x120 to 120x48, every PIL mode, one image shared by two rows."""
    spec = [  # (references as (mode, size)), candidate, prompt
        ([("L", (64, 64))], ("RGB", (96, 48)), "a cat"),
        ([("LA", (40, 120)), ("RGBA", (80, 80))], ("P", (64, 64)), "a cat and a dog on a sofa"),
        ([("I;16", (56, 72)), ("CMYK", (120, 48)), ("RGB", (64, 64))], ("L", (72, 56)), "three friends"),
        ([("P", (48, 96)), ("RGB", (64, 96)), ("L", (80, 64)), ("LA", (64, 64))], ("CMYK", (96, 64)), "four"),
        ([("RGBA", (64, 40))], ("I;16", (64, 64)), "a red ball left of a blue box"),
        ([("CMYK", (72, 72)), ("I;16", (48, 48))], ("RGBA", (120, 40)), "two subjects, touching"),
        ([("L", (64, 64))], ("LA", (40, 120)), "the same reference as row 0"),
    ]
    out = []
    for i, (refs, cand, prompt) in enumerate(spec):
        ims = [_image(m, s, 100 * i + j) for j, (m, s) in enumerate(refs)]
        out.append((ims, prompt, _image(cand[0], cand[1], 100 * i + 50)))
    out[6] = ([out[0][0][0]], out[6][1], out[6][2])  # a reference shared with row 0 (encoded once)
    assert {im.mode for r in out for im in [*r[0], r[2]]} >= {"L", "LA", "RGBA", "P", "I;16", "CMYK", "RGB"}
    return out


def _split(rows, bs):
    return [rows[i : i + bs] for i in range(0, len(rows), bs)]


def _cols(rows):
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def _compare(got_s, got_d, alone, what):
    worst = 0.0
    for i, (s, d) in enumerate(alone):
        torch.testing.assert_close(
            got_s[i : i + 1].float(), s.float(), atol=1e-5, rtol=0, msg=f"{what} row {i}"
        )
        torch.testing.assert_close(
            got_d[i : i + 1].float(), d.float(), atol=1e-5, rtol=0, msg=f"{what} row {i}"
        )
        worst = max(worst, float((got_s[i] - s[0]).abs()), float((got_d[i] - d[0]).abs().max()))
    return worst


@pytest.fixture(scope="module", params=MODES)
def model(request, proc):
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel

    m = MIEModel(tiny_backbone(0), proc, tuning=request.param, unfreeze_layers=1).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA B and the heads away from their initial values: every path matters
        for p in m.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return m


@pytest.fixture(scope="module")
def alone(model, rows):
    out = []
    for r in rows:
        o = model.score(*_cols([r]))
        out.append((o.score, o.diagnostics))
    return out


def test_score_rows_equal_rows_alone(model, rows, alone):
    worst = 0.0
    for bs in (1, 3, len(rows)):
        outs = [model.score(*_cols(chunk)) for chunk in _split(rows, bs)]
        s, d = torch.cat([o.score for o in outs]), torch.cat([o.diagnostics for o in outs])
        worst = max(worst, _compare(s, d, alone, f"score bs={bs}"))
    print(f"score ({model.tuning}): max |batched - alone| = {worst:.2e}")


def test_score_pairs_rows_equal_rows_alone(model, rows, alone):
    """Pair i: row i's references and prompt, candidates row i's and row i+1's (scored alone for both)."""
    n = len(rows)
    other = [(rows[i][0], rows[i][1], rows[(i + 1) % n][2]) for i in range(n)]
    alone_b = [model.score(*_cols([r])) for r in other]
    worst = 0.0
    for bs in (1, 3, n):
        a_s, a_d, b_s, b_d = [], [], [], []
        for lo in range(0, n, bs):
            a, b = model.score_pairs(
                [r[0] for r in rows[lo : lo + bs]],
                [r[1] for r in rows[lo : lo + bs]],
                [r[2] for r in rows[lo : lo + bs]],
                [r[2] for r in other[lo : lo + bs]],
            )
            a_s.append(a.score), a_d.append(a.diagnostics), b_s.append(b.score), b_d.append(b.diagnostics)
        worst = max(worst, _compare(torch.cat(a_s), torch.cat(a_d), alone, f"pairs a bs={bs}"))
        worst = max(
            worst,
            _compare(
                torch.cat(b_s),
                torch.cat(b_d),
                [(o.score, o.diagnostics) for o in alone_b],
                f"pairs b bs={bs}",
            ),
        )
    print(f"score_pairs ({model.tuning}): max |batched - alone| = {worst:.2e}")


def test_metric_rows_equal_rows_alone(model, rows, alone):
    import genmetrics as gm

    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    for bs in (1, 3, len(rows)):
        metric = gm.create_metric("mie", model=model, batch_size=bs, vision_cache_size=0)
        for chunk in _split(rows, 4):  # updates of 4 and 3 rows, chunked again by batch_size
            refs, prompts, cands = _cols(chunk)
            metric.update(refs, cands, prompts)
        ps = metric.per_sample()
        _compare(ps["scores"], ps["diagnostics"], alone, f"metric batch_size={bs}")
    # the caller's model is used as is: it stays trainable (it may be under training) and its mode is kept
    assert trained and [n for n, p in model.named_parameters() if p.requires_grad] == trained
    model.train()
    gm.create_metric("mie", model=model)
    assert model.training
    model.eval()


def test_training_forward_rows_equal_rows_alone(model, rows):
    """The forward the trainer calls (train mode, gradients on; LoRA dropout 0 as the authors), on pairs."""
    n = len(rows)
    refs, prompts, cands = _cols(rows)
    cands_b = [rows[(i + 1) % n][2] for i in range(n)]
    was = model.training
    model.train()
    try:
        with torch.enable_grad():
            single = [
                model(model.prepare_pairs([refs[i]], [prompts[i]], [cands[i]], [cands_b[i]]))
                for i in range(n)
            ]
            for bs in (1, 3, n):
                for lo in range(0, n, bs):
                    sl = slice(lo, lo + bs)
                    out = model(model.prepare_pairs(refs[sl], prompts[sl], cands[sl], cands_b[sl]))
                    k = len(refs[sl])
                    assert out.score.requires_grad
                    for j in range(k):
                        ref = single[lo + j]
                        for side in (0, 1):
                            torch.testing.assert_close(
                                out.score[side * k + j], ref.score[side], atol=1e-5, rtol=0
                            )
                            torch.testing.assert_close(
                                out.diagnostics[side * k + j], ref.diagnostics[side], atol=1e-5, rtol=0
                            )
    finally:
        model.train(was)
