"""raclip / clipscore / hcs / sad / pad / rsad metrics: streaming == functional, order and batch-size
invariance, HCS antisymmetry, options and errors."""

import copy

import numpy as np
import pytest
import torch

import genmetrics as gm
from genmetrics.errors import InputError
from genmetrics.functional import pad as f_pad
from genmetrics.functional import rsad as f_rsad
from genmetrics.functional import sad as f_sad
from genmetrics.raclip import RegionAttributeScorer
from genmetrics.testing import random_images

ATTRS = ["smiling", "wearing hat", "a red car"]


@pytest.fixture(scope="module")
def sets():
    real = random_images(7, 32, seed=41)
    gen = (random_images(6, 32, seed=42).int() * 2 // 3).to(torch.uint8)
    return real, gen


@pytest.fixture(scope="module")
def scored(clip, sets):
    from genmetrics.backbones.openclip import clip_image_batch

    model, tok = clip
    s = RegionAttributeScorer(model, tok)
    real, gen = sets
    return s(clip_image_batch(real, model), ATTRS), s(clip_image_batch(gen, model), ATTRS)


def _make(name, clip, **kw):
    model, tok = clip
    return gm.create_metric(name, backbone=model, tokenizer=tok, attributes=ATTRS, **kw)


def test_streaming_equals_functional(clip, sets, scored):
    real, gen = sets
    r, g = scored
    m = _make("sad", clip, batch_size=2)
    m.update(reference=real[:3])
    m.update(candidates=gen)
    m.update(reference=real[3:])
    out = m.compute()
    torch.testing.assert_close(out["per_attribute"], f_sad(r.score, g.score), rtol=1e-5, atol=1e-7)
    assert out["mean"].ndim == 0 and out["per_attribute"].dtype == torch.float64
    p = _make("pad", clip, batch_size=4)
    p.update(candidates=gen[:2])
    p.update(reference=real, candidates=gen[2:])
    torch.testing.assert_close(p.compute()["per_pair"], f_pad(r.score, g.score), rtol=1e-5, atol=1e-7)
    assert p.pairs == [("smiling", "wearing hat"), ("smiling", "a red car"), ("wearing hat", "a red car")]
    q = _make("rsad", clip)
    q.update(candidates=gen)
    q.update(reference=real)
    res = q.compute()
    torch.testing.assert_close(res["map"], f_rsad(r.patch_scores, g.patch_scores), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res["per_attribute"], res["map"].abs().mean(0))
    assert res["map"].shape == (16, 3) and q.grid == (4, 4)
    a = _make("raclip", clip, batch_size=3)
    a.update(candidates=gen)
    torch.testing.assert_close(a.compute(), g.score.double().mean(0), rtol=1e-5, atol=1e-7)


def test_order_and_batch_size_invariance(clip, sets):
    real, gen = sets
    results = []
    for bs, order in ((1, "rg"), (5, "gr"), (32, "mixed")):
        m = _make("pad", clip, batch_size=bs)
        if order == "rg":
            m.update(reference=real)
            m.update(candidates=gen)
        elif order == "gr":
            m.update(candidates=gen)
            m.update(reference=real)
        else:
            for i in range(0, 7, 2):
                m.update(reference=real[i : i + 2], candidates=gen[i : i + 2] if i < 6 else None)
        results.append(m.compute()["per_pair"])
    for r in results[1:]:
        torch.testing.assert_close(r, results[0], rtol=1e-5, atol=1e-8)


def test_identical_sets_zero_and_rsad_flips(clip, sets):
    real, gen = sets
    for name, key in (("sad", "per_attribute"), ("pad", "per_pair"), ("rsad", "map")):
        v = _make(name, clip).compute(real, real)[key]
        assert float(v.abs().max()) < 1e-9, name
    m = _make("rsad", clip)
    a, b = m.compute(real, gen)["map"], m.compute(gen, real)["map"]
    torch.testing.assert_close(a, -b)
    assert float(a.abs().max()) > 0


def test_state_is_constant_size(clip, sets):
    real, gen = sets
    m = _make("pad", clip)
    m.update(reference=real, candidates=gen)
    states = [k for k in m._defaults if k.startswith(("real_", "gen_"))]  # the set statistics
    size = {k: tuple(getattr(m, k).shape) for k in states}
    m.update(reference=real, candidates=gen)
    assert {k: tuple(getattr(m, k).shape) for k in states} == size
    assert all(getattr(m, k).dtype == torch.float64 for k in states)
    assert all(
        getattr(f, "__name__", "") == "dim_zero_sum" for k, f in m._reductions.items() if k in states
    )  # dist_reduce_fx="sum"


def test_kl_direction_and_kde_mode(clip, sets, scored):
    from genmetrics.functional import kde_pad, kde_sad

    real, gen = sets
    r, g = scored
    m = _make("sad", clip, kl_direction="real||gen")
    torch.testing.assert_close(
        m.compute(real, gen)["per_attribute"],
        f_sad(r.score, g.score, direction="real||gen"),
        rtol=1e-5,
        atol=1e-7,
    )
    k = _make("sad", clip, divergence="kde", kde_points=500)
    torch.testing.assert_close(
        k.compute(real, gen)["per_attribute"],
        kde_sad(r.score, g.score, n_points=500, grid=(0.0, 1.0), direction="gen||real"),
        rtol=1e-4,
        atol=1e-8,
    )
    kp = _make("pad", clip, divergence="kde", kde_points=100, kl_direction="real||gen")
    torch.testing.assert_close(
        kp.compute(real, gen)["per_pair"],
        kde_pad(r.score, g.score, n_points=100, grid=(0.0, 1.0)),
        rtol=1e-4,
        atol=1e-8,
    )
    with pytest.raises(InputError, match="divergence"):
        _make("sad", clip, divergence="hist")
    with pytest.raises(InputError, match="kl_direction"):
        _make("sad", clip, kl_direction="gen|real")


def test_hcs_antisymmetric_with_two_attributes(clip, sets):
    model, tok = clip
    real, gen = sets
    m = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=["smiling", "frowning"])
    m.update(candidates=gen)
    m.update(reference=real)
    per = m.per_sample()["scores"]
    torch.testing.assert_close(per[:, 0], -per[:, 1], rtol=0, atol=1e-9)
    torch.testing.assert_close(m.compute(), per.mean(0))
    # HCS-mode SaD: reference centre from the real set, same HCS numbers as the hcs metric
    s = gm.create_metric(
        "sad", backbone=model, tokenizer=tok, attributes=["smiling", "frowning"], score="hcs"
    )
    s.update(candidates=gen)
    s.update(reference=real)
    m2 = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=["smiling", "frowning"])
    m2.update(reference=real, candidates=real)
    torch.testing.assert_close(s.compute()["per_attribute"], f_sad(m2.per_sample()["scores"], per))
    with pytest.raises(InputError, match="no reference"):
        gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS).compute(None, gen)


def test_clipscore_and_condition_modes(clip, sets):
    from genmetrics.backbones.openclip import clip_image_batch

    model, tok = clip
    _, gen = sets
    with torch.no_grad():
        img = torch.nn.functional.normalize(model.encode_image(clip_image_batch(gen, model)), dim=-1)
        txt = torch.nn.functional.normalize(model.encode_text(tok(ATTRS)), dim=-1)
    c = gm.create_metric("clipscore", backbone=model, tokenizer=tok, attributes=ATTRS)
    torch.testing.assert_close(
        c.compute(None, gen), (100 * img @ txt.T).double().mean(0), rtol=1e-5, atol=1e-5
    )
    cap = gm.create_metric("clipscore", backbone=model, tokenizer=tok)
    texts = [ATTRS[i % 3] for i in range(6)]
    expected = (100 * img @ txt.T).double()[torch.arange(6), torch.arange(6) % 3].mean()
    torch.testing.assert_close(cap.compute(None, gen, texts), expected, rtol=1e-5, atol=1e-5)
    ra = gm.create_metric("raclip", backbone=model, tokenizer=tok)
    full = gm.create_metric("raclip", backbone=model, tokenizer=tok, attributes=ATTRS)
    full.update(candidates=gen)
    per = full.per_sample()["scores"]
    torch.testing.assert_close(
        ra.compute(None, gen, texts), per[torch.arange(6), torch.arange(6) % 3].mean(), rtol=1e-6, atol=1e-7
    )
    with pytest.raises(InputError, match="condition"):
        ra.update(candidates=gen)


def test_attribute_sets_and_options(clip):
    m = _make("sad", clip)
    assert m.attributes == ATTRS
    model, tok = clip
    s = gm.create_metric("sad", backbone=model, tokenizer=tok, attributes="celeba-20")
    assert len(s.attributes) == 20
    with pytest.raises(ValueError, match="unknown option"):
        gm.create_metric("sad", backbone=model, tokenizer=tok, attributes=ATTRS, temprature=2.0)
    t = gm.create_metric(
        "sad",
        backbone=model,
        tokenizer=tok,
        attributes=ATTRS,
        temperature=0.5,
        dual_prompt=False,
        global_token=False,
    )
    assert t._scorer().temperature == 0.5 and not t._scorer().dual_prompt


def test_errors(clip, sets):
    from genmetrics.testing import tiny_clip_resnet

    real, gen = sets
    model, tok = clip
    with pytest.raises(InputError, match="empty"):
        gm.create_metric("sad", backbone=model, tokenizer=tok, attributes=[])
    with pytest.raises(InputError, match="duplicate"):
        gm.create_metric("pad", backbone=model, tokenizer=tok, attributes=["hat", "smiling", "hat"])
    with pytest.raises(InputError, match="no attributes"):
        gm.create_metric("rsad", backbone=model, tokenizer=tok)
    for name in ("sad", "pad", "rsad"):
        m = _make(name, clip)
        m.update(reference=real)
        with pytest.raises(InputError, match="no generated images"):
            m.compute()
        m.reset()
        m.update(candidates=gen)
        with pytest.raises(InputError, match="no reference"):
            m.compute()
    with pytest.raises(InputError, match="at least 2"):
        _make("sad", clip).compute(real[:1], gen)
    rn, rtok = tiny_clip_resnet()
    with pytest.raises(InputError, match="VisionTransformer"):
        gm.create_metric("sad", backbone=rn, tokenizer=rtok, attributes=ATTRS)
    with pytest.raises(InputError, match="tokenizer"):
        gm.create_metric("sad", backbone=model, attributes=ATTRS)
    with pytest.raises(InputError, match="condition"):
        _make("sad", clip).update(candidates=gen, condition=["x"] * 6)
    with pytest.raises(InputError, match="pad: needs at least 2"):
        gm.create_metric("pad", backbone=model, tokenizer=tok, attributes=["hat"])
    with pytest.raises(InputError, match="candidates"):
        _make("sad", clip).update(candidates=torch.zeros(2, 4, 32, 32))
    with pytest.raises(ValueError, match="unknown option 'score' for metric 'rsad'"):
        _make("rsad", clip, score="hcs")


def test_cards():
    for n in ("raclip", "clipscore", "hcs", "sad", "pad", "rsad"):
        info = gm.metric_info(n)
        assert info["family"] == "raclip" and info["default_weights"]
    assert gm.metric_info("sad")["level"] == "set"
    assert gm.list_metrics("*sad") == ["rsad", "sad"]


def test_hcs_text_center_bare_is_the_2024_code(clip, sets):
    import torch.nn.functional as F

    from genmetrics.backbones.openclip import clip_image_batch, encode_image

    model, tok = clip
    real, gen = sets
    m = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS, text_center="bare")
    m.update(reference=real, candidates=gen)
    # core/hcs.py of the 2024 code, in float64 (text: untrimmed float64 tower), on the metric's image tower
    # (the fast tower equals encode_image within float32 rounding, tests/backbones/test_clip_vision.py; the
    # centring amplifies that rounding, so a 1e-6 comparison must use the same tower)
    with torch.no_grad():
        c_img = encode_image(model, clip_image_batch(real, model)).double().mean(0)
        e = encode_image(model, clip_image_batch(gen, model)).double()
        m64 = copy.deepcopy(model).double()
        t = m64.encode_text(tok(["a photo of " + a for a in ATTRS]))
        c_text = m64.encode_text(tok(ATTRS)).mean(0)
    expected = 100 * F.normalize(e - c_img, dim=-1) @ F.normalize(t - c_text, dim=-1).T
    assert float((m.per_sample()["scores"] - expected).abs().max()) <= 1e-6
    with pytest.raises(InputError, match="text_center"):
        gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS, text_center="mean")


def test_keep_scores_bootstrap_matches_per_image_scores():
    """sad/pad with keep_scores=True: same value as streaming, and a bootstrap interval equal to the one
    computed from per-image RA-CLIPScores of an explicit scorer run."""
    import genmetrics as gm
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.raclip import RegionAttributeScorer
    from genmetrics.raclip.report import bootstrap_means
    from genmetrics.testing import random_images, tiny_clip

    model, tok = tiny_clip()
    attrs = ["smiling", "male", "wearing hat"]
    real, gen = random_images(9, seed=1), random_images(7, seed=2)
    scorer = RegionAttributeScorer(model, tok)
    r = scorer(clip_image_batch(real, model), attrs).score.double()
    g = scorer(clip_image_batch(gen, model), attrs).score.double()
    for name in ("sad", "pad"):
        kept = gm.create_metric(
            name, backbone=model, tokenizer=tok, attributes=attrs, keep_scores=True, batch_size=4
        )
        plain = gm.create_metric(name, backbone=model, tokenizer=tok, attributes=attrs)
        for m in (kept, plain):
            m.update(candidates=gen)
            m.update(reference=real)
        assert torch.allclose(kept.compute()["mean"], plain.compute()["mean"], atol=1e-9)
        ci = kept.bootstrap_ci(n_boot=50, seed=3)
        ref = bootstrap_means(r, g, n_boot=50, seed=3, pad_budget=float("inf"))[name]
        assert ci == pytest.approx(ref, rel=1e-4)  # float32 scores, other batch sizes
        assert plain.bootstrap_ci() is None
    with pytest.raises(ValueError, match="keep_scores"):  # R-SaD keeps map sums only: the option is refused
        gm.create_metric("rsad", backbone=model, tokenizer=tok, attributes=attrs, keep_scores=True)


# ------------------------------------------------------------------- KL direction, by explicit formulas
def _kl_normal(mu_p, var_p, mu_q, var_q):
    """KL(N(mu_p, var_p) || N(mu_q, var_q)) in nats, written out."""
    return 0.5 * np.log(var_q / var_p) + (var_p + (mu_p - mu_q) ** 2) / (2 * var_q) - 0.5


def _kl_bivariate(mp, cp, mq, cq):
    inv = np.linalg.inv(cq)
    d = mq - mp
    return 0.5 * (np.trace(inv @ cp) + d @ inv @ d - 2 + np.log(np.linalg.det(cq) / np.linalg.det(cp)))


def test_kl_direction_is_gen_given_real_by_explicit_formula(clip, sets, scored):
    """Eq. 12 / 13: KL(N_gen || N_real), checked against formulas written here (not genmetrics.functional),
    so a flipped direction anywhere in the stack fails; Eq. 14's sign likewise."""
    real, gen = sets
    r, g = (o.score.double().numpy() for o in scored)
    eps = 1e-6
    mr, vr, mg, vg = r.mean(0), r.var(0, ddof=1) + eps, g.mean(0), g.var(0, ddof=1) + eps
    expected = _kl_normal(mg, vg, mr, vr)
    other = _kl_normal(mr, vr, mg, vg)
    assert (
        np.abs(expected - other).max() > 0.05 * np.abs(expected).max()
    )  # the data tell the directions apart
    got = _make("sad", clip).compute(real, gen)["per_attribute"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-9)
    got_rg = _make("sad", clip, kl_direction="real||gen").compute(real, gen)["per_attribute"].numpy()
    np.testing.assert_allclose(got_rg, other, rtol=1e-4, atol=1e-9)
    pairs, pairs_rg = [], []
    for i, j in ((0, 1), (0, 2), (1, 2)):
        cr = np.cov(r[:, [i, j]].T) + eps * np.eye(2)
        cg = np.cov(g[:, [i, j]].T) + eps * np.eye(2)
        pairs.append(_kl_bivariate(g[:, [i, j]].mean(0), cg, r[:, [i, j]].mean(0), cr))
        pairs_rg.append(_kl_bivariate(r[:, [i, j]].mean(0), cr, g[:, [i, j]].mean(0), cg))
    np.testing.assert_allclose(
        _make("pad", clip).compute(real, gen)["per_pair"].numpy(), pairs, rtol=1e-4, atol=1e-9
    )
    np.testing.assert_allclose(
        _make("pad", clip, kl_direction="real||gen").compute(real, gen)["per_pair"].numpy(),
        pairs_rg,
        rtol=1e-4,
        atol=1e-9,
    )
    rs = _make("rsad", clip).compute(real, gen)["map"]
    expected_map = scored[0].patch_scores.double().mean(0) - scored[1].patch_scores.double().mean(0)
    torch.testing.assert_close(rs, expected_map, rtol=1e-5, atol=1e-6)  # positive = more present in real


# ------------------------------------------------------------------------------- compat="hcs2024"
def _hcs2024_reference(model, tok, real, gen, attrs, n_points):
    """The 2024 code's math (notou10/sadpad core/hcs.py, core/sad.py, core/pad.py, utils/plot.py) re-done
    in float64 numpy/scipy: C_text = mean of the bare attribute strings, prompts "a photo of " + attr,
    C_img = mean of the real set; KDE on linspace(-35, 35, n) x 70/n (+1e-10); PaD on an (nb+1)^2 grid
    averaged over 2x2 windows x (70/nb)^2; KL = mean over cells of P log(P/Q) with P = real, clipped at 0;
    printed value = round(mean, 10) * 1e7."""
    from scipy.stats import gaussian_kde

    from genmetrics.backbones.openclip import clip_image_batch, encode_image

    with torch.no_grad():  # the metric's image tower (see test_hcs_text_center_bare_is_the_2024_code)
        e_r = encode_image(model, clip_image_batch(real, model)).double().numpy()
        e_g = encode_image(model, clip_image_batch(gen, model)).double().numpy()
        m64 = copy.deepcopy(model).double()  # text: open_clip's untrimmed encode_text in float64
        t_prompt = m64.encode_text(tok(["a photo of " + a for a in attrs])).numpy()
        t_bare = m64.encode_text(tok(list(attrs))).numpy()
    img_mean, text_mean = e_r.mean(0), t_bare.mean(0)
    t = t_prompt - text_mean
    t = t / np.linalg.norm(t, axis=1, keepdims=True)

    def hcs(e):
        x = e - img_mean
        return 100.0 * (x / np.linalg.norm(x, axis=1, keepdims=True)) @ t.T

    h_r, h_g = hcs(e_r), hcs(e_g)
    xs = np.linspace(-35, 35, n_points)
    sad = []
    for c in range(len(attrs)):
        p = gaussian_kde(h_r[:, c])(xs) * (70 / n_points) + 1e-10
        q = gaussian_kde(h_g[:, c])(xs) * (70 / n_points) + 1e-10
        sad.append(max(np.mean((-p * np.log(q)) - (-p * np.log(p))), 0.0))
    nb = int(np.sqrt(n_points))
    ax = np.linspace(-35, 35, nb + 1)
    gx, gy = np.meshgrid(ax, ax)
    pts = np.array([gx.flatten(), gy.flatten()])

    def cells(h, i, j):
        d = gaussian_kde(np.vstack((h[:, i], h[:, j])))(pts).reshape(nb + 1, nb + 1)
        pooled = np.lib.stride_tricks.sliding_window_view(d, (2, 2)).mean(
            axis=(-1, -2)
        )  # AvgPool2d(2, stride 1)
        return pooled * (70 / nb) * (70 / nb) + 1e-10

    pad = []
    for i in range(len(attrs)):
        for j in range(i + 1, len(attrs)):
            p, q = cells(h_r, i, j), cells(h_g, i, j)
            pad.append(max(np.mean(p * np.log(p) - p * np.log(q)), 0.0))
    return h_g, np.array(sad), np.array(pad)


def test_hcs2024_compat_reproduces_the_2024_code(clip):
    model, tok = clip
    attrs = ["smiling", "wearing hat", "a red car"]
    real = random_images(16, 32, seed=61)
    gen = (random_images(12, 32, seed=62).int() * 3 // 4).to(torch.uint8)
    n_points = 400
    h_g, sad_ref, pad_ref = _hcs2024_reference(model, tok, real, gen, attrs, n_points)
    assert sad_ref.max() > 1e-6 and pad_ref.max() > 1e-6  # a non-trivial case
    kw = dict(backbone=model, tokenizer=tok, attributes=attrs, compat="hcs2024", kde_points=n_points)
    for name, key, ref in (("sad", "per_attribute", sad_ref), ("pad", "per_pair", pad_ref)):
        m = gm.create_metric(name, **kw)
        m.update(candidates=gen)
        m.update(reference=real)
        out = m.compute()
        np.testing.assert_allclose(out[key].numpy(), ref, rtol=1e-6, atol=1e-12)
        assert float(out["mean"]) == pytest.approx(ref.mean(), rel=1e-6)
        assert float(out["printed_x1e7"]) == pytest.approx(round(ref.mean(), 10) * 1e7, rel=1e-6)
        assert (m.score_kind, m.text_center, m.kl_direction, m.divergence, m.kde_range) == (
            "hcs",
            "bare",
            "real||gen",
            "kde",
            (-35.0, 35.0),
        )
    h = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=attrs, compat="hcs2024")
    h.update(reference=real, candidates=gen)
    np.testing.assert_allclose(h.per_sample()["scores"].numpy(), h_g, rtol=1e-6, atol=1e-6)
    # the default (paper) modes are not the 2024 numbers
    assert "printed_x1e7" not in _make("sad", clip).compute(real, gen)


# ------------------------------------------------------------------------------ no-op options refused
@pytest.mark.parametrize(
    "name, kw, needle",
    [
        ("sad", {"score": "hcs", "temperature": 0.5}, "option temperature has no effect with score='hcs'"),
        (
            "pad",
            {"score": "clipscore", "dual_prompt": False},
            "option dual_prompt has no effect with score='clipscore'",
        ),
        ("sad", {"score": "hcs", "global_token": True}, "option global_token has no effect with score='hcs'"),
        ("sad", {"text_center": "bare"}, "option text_center has no effect with score='raclip'"),
        ("sad", {"kde_points": 100}, "option kde_points has no effect with divergence='gaussian'"),
        ("pad", {"kde_range": (0.0, 1.0)}, "option kde_range has no effect with divergence='gaussian'"),
        ("sad", {"divergence": "kde", "eps": 1e-3}, "option eps has no effect with divergence='kde'"),
        (
            "pad",
            {"divergence": "kde", "keep_scores": True},
            "option keep_scores has no effect with divergence='kde'",
        ),
        (
            "sad",
            {"compat": "hcs2024", "kl_direction": "gen||real"},
            "option kl_direction cannot be combined with compat",
        ),
        ("pad", {"compat": "hcs2024", "score": "hcs"}, "option score cannot be combined with compat"),
        (
            "sad",
            {"compat": "hcs2024", "temperature": 2.0},
            "option temperature has no effect with score='hcs'",
        ),
        ("sad", {"compat": "hcs2024", "eps": 1e-3}, "option eps has no effect with divergence='kde'"),
        ("sad", {"compat": "hcs2020"}, "option compat: expected None or one of"),
        (
            "hcs",
            {"compat": "hcs2024", "text_center": "bare"},
            "option text_center cannot be combined with compat",
        ),
        (
            "raclip",
            {"local_tokens": False, "temperature": 0.5},
            "option temperature has no effect with local_tokens=False",
        ),
        (
            "raclip",
            {"dual_prompt": False, "negative_template": "no {}"},
            "option negative_template has no effect",
        ),
        (
            "rsad",
            {"local_tokens": False, "temperature": 0.5},
            "option temperature has no effect with local_tokens=False",
        ),
    ],
)
def test_noop_options_refused(clip, name, kw, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        _make(name, clip, **kw)


def test_rsad_refuses_the_divergence_options(clip):
    from genmetrics.core.registry import metric_options
    from genmetrics.raclip.metric import _KL_ONLY, RSaD

    model, tok = clip
    assert not set(_KL_ONLY) & set(metric_options("rsad"))
    values = {
        "score": "raclip",
        "kl_direction": "gen||real",
        "eps": 1e-6,
        "divergence": "gaussian",
        "kde_points": 100,
        "kde_range": (0.0, 1.0),
        "text_center": "prompts",
        "keep_scores": True,
        "compat": "hcs2024",
    }
    for k in _KL_ONLY:
        with pytest.raises(InputError, match=f"rsad: option {k} has no effect on R-SaD"):
            RSaD(ATTRS, backbone=model, tokenizer=tok, **{k: values[k]})
        with pytest.raises(ValueError, match=f"unknown option '{k}' for metric 'rsad'"):
            _make("rsad", clip, **{k: values[k]})
    with pytest.raises(InputError, match="image_center=, so reference images would change nothing"):
        gm.create_metric(
            "hcs", backbone=model, tokenizer=tok, attributes=ATTRS, image_center=torch.zeros(32)
        ).update(reference=random_images(2, 32, seed=1))
    with pytest.raises(InputError, match="option tokenizer has no effect without backbone"):
        gm.create_metric("sad", tokenizer=tok, attributes=ATTRS)
    # the same options where they do act are accepted
    _make("sad", clip, score="hcs", text_center="bare")
    _make("pad", clip, divergence="kde", kde_points=100, kde_range=(0.0, 1.0))
    _make("sad", clip, eps=1e-4, keep_scores=True, temperature=0.5, negative_template="no {} at all")
    _make("sad", clip, compat="hcs2024", kde_points=100)


def test_update_scores_equals_update_and_refuses_other_rows():
    """Scores fed with ``update_scores`` give the value ``update`` on the images gives; rows of the wrong
    width, non-finite rows and the hcs mode (whose rows are embeddings) are refused, naming the input."""
    import genmetrics as gm
    from genmetrics.backbones.clip_preprocess import clip_image_batch
    from genmetrics.raclip.model import RegionAttributeScorer
    from genmetrics.testing import random_images, tiny_clip

    model, tok = tiny_clip()
    attrs = ["smiling", "wearing hat", "a red car"]
    real, gen = random_images(5, seed=1), random_images(4, seed=2) // 2
    scorer = RegionAttributeScorer(model, tok)
    for name in ("sad", "pad"):
        direct = gm.create_metric(name, attributes=attrs, backbone=model, tokenizer=tok, batch_size=8)
        direct.update(reference=real, candidates=gen)
        fed = gm.create_metric(name, attributes=attrs, backbone=model, tokenizer=tok)
        fed.update_scores(
            reference=scorer(clip_image_batch(list(real), model), attrs).score,
            candidates=scorer(clip_image_batch(list(gen), model), attrs).score,
        )
        a, b = direct.compute(), fed.compute()
        assert all(torch.equal(a[k], b[k]) for k in a)
    m = gm.create_metric("sad", attributes=attrs, backbone=model, tokenizer=tok)
    with pytest.raises(InputError, match=r"update_scores\(reference=...\): expected float scores \[N, 3\]"):
        m.update_scores(reference=torch.zeros(4, 2))
    with pytest.raises(InputError, match=r"update_scores\(candidates=...\): the scores hold NaN"):
        m.update_scores(candidates=torch.full((4, 3), float("nan")))
    hcs = gm.create_metric("sad", attributes=attrs, backbone=model, tokenizer=tok, score="hcs")
    with pytest.raises(InputError, match="score='hcs'"):
        hcs.update_scores(reference=torch.zeros(4, 3))
