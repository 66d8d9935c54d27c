"""The ``precision`` option of every model-based metric: ``"fp32"`` (default) or ``"bf16"``
(bfloat16 autocast of the backbone's forward, :func:`genmetrics.data.device.precision_autocast`).

Registry-wide: every metric whose options take a model (``backbone`` / ``weights`` / ``model``) takes
``precision`` with default ``"fp32"``, so a new model-based metric is covered by its registration; the
metrics are built from their test recipes (tiny random backbones).

Tolerance of bf16 against fp32 (derived, not fitted). bfloat16 keeps 8 significant bits: each product's
inputs are rounded with relative error at most ``u = 2**-8`` (accumulation stays float32 under autocast).
Through ``D`` products in sequence the relative error of the features grows, for independent roundings, as
``u * sqrt(D)``; we take ``D`` = the number of linear / convolution / attention modules of the backbone, an
upper bound on the products any one path goes through. A score that is ``S`` times a cosine of two such
features moves by at most ``2 * S`` times their relative error (each side perturbed once), so
``|bf16 - fp32| <= 2 * S * u * sqrt(D)``, with ``S`` the half-width of the card's range for cosine-type
scores (1 for clip_i / dino / tpips / raclip, 100 for clipscore / hcs). For mie, whose score is an MLP
head on the last hidden state ``h``, ``S`` = the head's Lipschitz bound ``||W2|| * 1.13 * ||W1|| * ||h||``
(GELU's slope is at most 1.13), measured on the fp32 pass.

That bf16 really ran is checked against the same expression with float32's unit roundoff ``2**-24`` in
place of ``u`` (:func:`fp32_floor`): what float32 rounding alone (another kernel, another summation order,
another CPU) can move a score by. A bf16 pass moves it by up to ``2**16`` times more; a difference at or
below the floor says bf16 did not reach the backbone, whatever the CPU's rounding.
"""

from __future__ import annotations

import copy
import json
import math
import warnings

import pytest
import torch

import genmetrics as gm
from genmetrics.data import device as D
from genmetrics.errors import InputError
from tests.contract import tester as T
from tests.recipes import metric_recipe

U_BF16 = 2.0**-8  # bfloat16 unit roundoff (8 significant bits)
U_FP32 = 2.0**-24  # float32 unit roundoff (24 significant bits)
MODEL_OPTIONS = ("backbone", "weights", "model")


def _model_based(name: str) -> bool:
    return any(k in gm.registry.metric_options(name) for k in MODEL_OPTIONS)


MODEL_METRICS = [n for n in T.NAMES if _model_based(n)]
SET_METRICS = [n for n in MODEL_METRICS if gm.registry.get_card(n).level.value == "set"]
SAMPLE_METRICS = [n for n in MODEL_METRICS if n not in SET_METRICS]


@pytest.fixture(autouse=True)
def _quiet_and_fresh(monkeypatch):
    """Each test starts with no 'bf16 is slow here' warning given yet (the helper warns once per process)."""
    monkeypatch.setattr(D, "_warned", set())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="precision='bf16'")
        yield


def _build(name: str, precision: str) -> gm.Metric:
    return gm.create_metric(name, **metric_recipe(name)["kwargs"], precision=precision)


def _run(name: str, precision: str) -> tuple[gm.Metric, object]:
    m = _build(name, precision)
    for u in metric_recipe(name)["updates"]:
        m.update(**u)
    return m, m.compute()


def _flat(v: object) -> torch.Tensor:
    if isinstance(v, dict):
        return torch.cat([_flat(v[k]).reshape(-1) for k in sorted(v)])
    assert isinstance(v, torch.Tensor), type(v)
    return v.double().reshape(-1)


def _dtypes(v: object) -> set[torch.dtype]:
    if isinstance(v, dict):
        return set().union(*(_dtypes(x) for x in v.values()))
    return {v.dtype} if isinstance(v, torch.Tensor) else set()


def module_depth(*modules: torch.nn.Module) -> int:
    """``D``: the linear / convolution / attention modules of ``modules`` (module docstring)."""
    kinds = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.MultiheadAttention)
    return sum(isinstance(mod, kinds) for b in modules for mod in b.modules())


def _depth(m: gm.Metric) -> int:
    return module_depth(*m.backbones().values())


def fp32_floor(scale: float, depth: int) -> float:
    """``2 * S * 2**-24 * sqrt(D)``: how far float32 rounding alone can move a score (module docstring); a
    bf16 pass must differ from the fp32 one by more."""
    return 2 * scale * U_FP32 * math.sqrt(depth)


def test_the_model_based_metrics_are_the_expected_ones():
    assert set(MODEL_METRICS) == {
        "clip_i",
        "clipscore",
        "dino",
        "hcs",
        "mie",
        "pad",
        "raclip",
        "rsad",
        "sad",
        "tpips",
    }
    assert set(SET_METRICS) == {"pad", "rsad", "sad"}


@pytest.mark.parametrize("name", MODEL_METRICS)
def test_every_model_based_metric_takes_precision(name):
    assert gm.registry.metric_options(name).get("precision") == repr(
        "fp32"
    )  # the default: the paper's numbers
    with pytest.raises(InputError, match=r"option precision: expected one of 'fp32', 'bf16', got 'float16'"):
        _build(name, "float16")
    m = _build(name, "bf16")
    assert m.precision == "bf16" and m.options()["precision"] == "bf16"
    assert _build(name, "fp32").options()["precision"] == "fp32"  # given: recorded like any other option


def score_scale(name: str) -> float:
    """``S``: score units per unit of relative feature error (module docstring)."""
    if name == "mie":
        return _mie_head_lipschitz(name)
    if name in ("raclip", "tpips"):
        return 1.0  # raclip: a score in [0, 1] built from cosines; tpips (late): a cosine
    lo, hi = gm.registry.get_card(name).range or (-1.0, 1.0)
    return (hi - lo) / 2  # clip_i, dino: 1; clipscore, hcs: 100


def bf16_bound(name: str, metric: gm.Metric) -> float:
    """``2 * S * u * sqrt(D)`` (module docstring) for metric ``name`` built as ``metric``."""
    return 2 * score_scale(name) * U_BF16 * math.sqrt(_depth(metric))


@pytest.mark.parametrize("name", SAMPLE_METRICS)
def test_bf16_is_within_the_derived_bound_of_fp32(name):
    m32, v32 = _run(name, "fp32")
    _, v16 = _run(name, "bf16")
    assert _dtypes(v16) <= {torch.float32, torch.float64}, _dtypes(v16)  # outputs never bfloat16
    a, b = _flat(v32), _flat(v16)
    assert torch.isfinite(b).all()
    bound, floor = bf16_bound(name, m32), fp32_floor(score_scale(name), _depth(m32))
    diff = float((a - b).abs().max())
    assert floor < diff <= bound, (name, diff, floor, bound)  # > floor: bf16 did run (autocast reached it)


def _mie_head_lipschitz(name: str) -> float:
    """``||W2|| * 1.13 * ||W1|| * max ||h||`` of the mie score head over the recipe's fp32 pass."""
    m = _build(name, "fp32")
    model = m.mie_model()
    norms: list[float] = []
    hook = model.score_head.register_forward_pre_hook(
        lambda mod, args: norms.append(float(args[0].norm(dim=-1).max()))
    )
    try:
        for u in metric_recipe(name)["updates"]:
            m.update(**u)
    finally:
        hook.remove()
    w1, w2 = model.score_head[0].weight, model.score_head[2].weight
    spec = float(torch.linalg.matrix_norm(w1.double(), ord=2) * torch.linalg.matrix_norm(w2.double(), ord=2))
    return 1.13 * spec * max(norms)


@pytest.mark.parametrize("name", SET_METRICS)
def test_set_metrics_per_image_rows_within_the_bound(name):
    """sad / pad / rsad compare two sets of per-image RA-CLIPScores; the divergence of such tiny sets
    amplifies a score change by the inverse of the sets' variance (measured in docs/performance.md), so the
    bound is checked on the per-image rows, the part bf16 changes; the set value is checked finite and
    float64."""
    from genmetrics.testing import random_images

    images = random_images(4, 32, seed=5)
    rows = {}
    for p in ("fp32", "bf16"):
        m = _build(name, p)
        rows[p] = m._score_rows(list(images), "candidates")
        _, value = _run(name, p)
        assert _dtypes(value) == {torch.float64} and torch.isfinite(_flat(value)).all()
    bound = bf16_bound("raclip", m)  # the rows are RA-CLIPScores (or their clipscore / hcs inputs)
    floor = fp32_floor(score_scale("raclip"), _depth(m))
    for key in rows["fp32"]:
        diff = float((rows["fp32"][key] - rows["bf16"][key]).abs().max())
        assert rows["bf16"][key].dtype == torch.float64 and floor < diff <= bound, (
            name,
            key,
            diff,
            floor,
            bound,
        )


def test_fp32_switches_off_a_callers_autocast():
    """A metric called inside a caller's bf16 autocast region (a Lightning ``bf16-mixed`` validation step)
    with ``precision="fp32"`` gives exactly its float32 value; with ``"bf16"`` it gives its bf16 value."""
    from genmetrics.testing import random_images

    x, y = random_images(2, 32, seed=1), random_images(2, 32, seed=2)
    m32 = _build("clip_i", "fp32")
    want32 = m32.score(x, y)
    want16 = _build("clip_i", "bf16").score(x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got32 = _build("clip_i", "fp32").score(x, y)
        got16 = _build("clip_i", "bf16").score(x, y)
    assert torch.equal(got32, want32) and torch.equal(got16, want16)
    # the two values differ by more than float32 rounding could make them: the check tells them apart
    assert float((want32 - want16).abs().max()) > fp32_floor(score_scale("clip_i"), _depth(m32))


def test_vision_cache_never_serves_features_of_the_other_precision():
    """Two tpips metrics sharing one model (its vision cache): the bf16 one scored after the fp32 one gives
    what a bf16 metric on a fresh copy gives (features made under fp32 are not reused, nor the reverse)."""
    from genmetrics.tpips.loading import load_tpips

    r = metric_recipe("tpips")
    kw = r["kwargs"]
    model = load_tpips(
        None, backbone=kw["backbone"], processor=kw["processor"], variant="late", image_size=64
    )
    fresh = copy.deepcopy(model)
    u = r["updates"][0]
    s32 = gm.create_metric("tpips", backbone=model, precision="fp32").score(**u)
    s16 = gm.create_metric("tpips", backbone=model, precision="bf16").score(**u)
    want16 = gm.create_metric("tpips", backbone=fresh, precision="bf16").score(**u)
    again32 = gm.create_metric("tpips", backbone=model, precision="fp32").score(**u)
    assert torch.equal(s16, want16) and torch.equal(again32, s32)
    # bf16 moved the score by more than float32 rounding could: the check tells the precisions apart
    assert float((s16 - s32).abs().max()) > fp32_floor(score_scale("tpips"), module_depth(model))


def test_warns_once_on_a_cpu_without_bf16_units_and_not_with_them(monkeypatch):
    from genmetrics.testing import random_images

    x = random_images(1, 32, seed=1)
    monkeypatch.setattr(D, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    with pytest.warns(UserWarning, match=r"CPU without amx_bf16 or avx512_bf16.*slower than float32"):
        _build("clip_i", "bf16").score(x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _build("clip_i", "bf16").score(x, x)  # once per process
        _build("clip_i", "fp32").score(x, x)  # fp32 never warns
    monkeypatch.setattr(D, "_warned", set())
    monkeypatch.setattr(D, "cpu_flags", lambda: frozenset({"avx512f", "amx_bf16"}))
    assert D.bf16_units("cpu") == (True, "CPU with amx_bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _build("clip_i", "bf16").score(x, x)


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(
        "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16 amx_tile\n\nprocessor\t: 1\n"
    )
    assert D.cpu_flags.__wrapped__(str(f)) == frozenset({"fpu", "avx2", "avx512_bf16", "amx_tile"})
    assert D.cpu_flags.__wrapped__(str(tmp_path / "none")) is None
    f.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # aarch64 names its line Features
    assert D.cpu_flags.__wrapped__(str(f)) is None


def test_cli_option_precision(tmp_path, capsys):
    from PIL import Image

    from genmetrics.backbones.provider import use_provider
    from genmetrics.cli.main import main
    from genmetrics.testing import random_images, tiny_backbones

    for d, seed in (("ref", 3), ("gen", 4)):
        (tmp_path / d).mkdir()
        for i, img in enumerate(random_images(2, 32, seed=seed)):
            Image.fromarray(img.permute(1, 2, 0).numpy()).save(tmp_path / d / f"s{i}.png")
    files = {d: [str(tmp_path / d / f"s{i}.png") for i in range(2)] for d in ("ref", "gen")}
    args = ["score", "clip_i", "-r", str(tmp_path / "ref"), "-c", str(tmp_path / "gen"), "--json"]
    with use_provider(tiny_backbones):
        values = {}
        for p in ("fp32", "bf16"):
            assert main([*args, "--option", f"precision={p}"]) == 0
            values[p] = json.loads(capsys.readouterr().out)["value"]
            m = gm.create_metric("clip_i", precision=p)
            want = m.score(files["ref"], files["gen"])
            assert values[p] == pytest.approx(float(want), abs=1e-12)
        # the option reached the model: bf16 moved the value by more than float32 rounding could
        assert abs(values["fp32"] - values["bf16"]) > fp32_floor(score_scale("clip_i"), _depth(m))
        assert main([*args, "--option", "precision=bf17"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and "did you mean 'bf16'" in err[0]


def _forced_packed(monkeypatch):
    from genmetrics.accel import clip_packed
    from genmetrics.accel._torch_internals import onednn_linear_available

    if not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    monkeypatch.setattr(clip_packed, "packed_products_pay_off", lambda blk, dtype=torch.float32: True)
    clip_packed.release_packed_weights()
    return clip_packed


def test_packed_clip_weights_are_cast_once_per_precision(monkeypatch):
    """Under bfloat16 autocast the packed products run on weights rounded to bfloat16 once: several calls
    cast and pack each weight once (not per call), the float32 copy is kept beside it, an in-place change
    of the weights packs again, and another autocast dtype takes the modules' own products."""
    from genmetrics.backbones.clip_vision import encode_image
    from genmetrics.testing import tiny_clip

    clip_packed = _forced_packed(monkeypatch)
    packs: list[torch.dtype] = []
    real = clip_packed.reorder_linear_weight
    monkeypatch.setattr(
        clip_packed, "reorder_linear_weight", lambda w, r: packs.append(w.dtype) or real(w, r)
    )
    model = tiny_clip()[0]
    n = 4 * len(model.visual.transformer.resblocks)  # in, out, fc, proj per block
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            for _ in range(3):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    encode_image(model, x)
                encode_image(model, x)
            assert packs == [torch.bfloat16] * n + [torch.float32] * n, packs  # once each, not per call
            blocks = clip_packed.packed_vision_blocks(model.visual)
            assert blocks is not None and {b.dtype for b in blocks} == {torch.float32}
            assert clip_packed.packed_tower(torch.bfloat16) is model.visual
            model.visual.transformer.resblocks[0].mlp.c_fc.weight.mul_(1.0)  # an in-place change
            with torch.autocast("cpu", dtype=torch.bfloat16):
                encode_image(model, x)
                encode_image(model, x)
            assert packs[2 * n :] == [torch.bfloat16] * n  # packed again, once
            with torch.autocast("cpu", dtype=torch.float16):
                assert clip_packed.packed_vision_blocks(model.visual) is None
    finally:
        clip_packed.release_packed_weights()


def test_packed_bf16_block_within_the_derived_bound_of_fp32(monkeypatch):
    """One block on packed bfloat16 weights and activations (under autocast) against the explicit float32
    computation of the same block (:func:`sdpa_block`, no autocast): the block's update ``y - x`` passes
    through ``D = 6`` products (in-projection, two attention products, out-projection, c_fc, c_proj), each
    rounding its inputs to bfloat16, so its relative error (norm-wise) is at most ``2 * u * sqrt(D)`` (the
    module docstring's bound) and above float32's floor (bf16 did run)."""
    from genmetrics.accel.clip_blocks import sdpa_block
    from genmetrics.testing import tiny_clip

    clip_packed = _forced_packed(monkeypatch)
    blk = tiny_clip()[0].visual.transformer.resblocks[0]
    x = torch.randn(3, 17, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y32 = sdpa_block(blk, x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y16 = clip_packed.packed_block(blk, x, clip_packed.PackedBlock(blk, torch.bfloat16))
    assert y16.dtype == torch.float32  # the residual stream stays float32
    rel = float((y16 - y32).norm() / (y32 - x).norm())
    d = 6
    assert 2 * U_FP32 * math.sqrt(d) < rel <= 2 * U_BF16 * math.sqrt(d), rel


def test_ra_scorer_runs_only_the_tower_in_bf16():
    """RA-CLIPScore under ``precision="bf16"``: the image tower in bf16, Eq. 3-9 in float32 / float64; equal
    to the explicit second computation (tower under autocast, then the scoring with autocast off), even inside
    a caller's autocast region."""
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.raclip.model import RegionAttributeScorer, dense_tokens
    from genmetrics.testing import random_images, tiny_clip

    model, tok = tiny_clip()
    attrs = ["smiling", "wearing hat"]
    scorer = RegionAttributeScorer(model, tok, precision="bf16")
    x = clip_image_batch(random_images(3, 32, seed=9), model)
    with torch.no_grad():
        t_pos, t_neg = scorer.text_embeddings(attrs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z, attn, grid = dense_tokens(model, x)
        want = scorer._score(z, attn, grid, t_pos, t_neg).score
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = scorer(x, attrs).score
    assert z.dtype == torch.bfloat16 and want.dtype == torch.float32
    assert torch.equal(scorer(x, attrs).score, want) and torch.equal(inside, want)
    fp32 = RegionAttributeScorer(model, tok)(x, attrs).score
    # bf16 moved the scores (in [0, 1]: S = 1) by more than float32 rounding could: the check tells them apart
    assert float((fp32 - want).abs().max()) > fp32_floor(1.0, module_depth(model))


def test_disk_cache_keeps_precisions_apart(tmp_path):
    """clip_i / dino with ``cache_dir=``: a bf16 metric never reads the fp32 entries of the same images (nor
    the reverse); float32 entries keep the key they had before the option existed."""
    from genmetrics.testing import random_images

    x, y = random_images(2, 32, seed=1), random_images(2, 32, seed=2)
    kw = metric_recipe("clip_i")["kwargs"]
    plain = {p: gm.create_metric("clip_i", **kw, precision=p).score(x, y) for p in ("fp32", "bf16")}
    for p in ("fp32", "bf16", "fp32", "bf16"):  # each run reads what the runs before it wrote
        m = gm.create_metric("clip_i", **kw, precision=p, cache_dir=tmp_path)
        assert torch.equal(m.score(x, y), plain[p]), p
    m32 = gm.create_metric("clip_i", **kw, cache_dir=tmp_path)
    assert ":precision=" not in m32._cache_identity(m32._model())
