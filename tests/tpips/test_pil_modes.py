"""PIL modes reach TPIPS as the official Qwen3-VL-Embedding embedder sends them: every mode (1, L,
LA, P, P with transparency, PA, RGB, RGBA, CMYK, I, I;16, F), as a PIL image and as a file, equals an
independent re-implementation of the official preprocessing (``test_preprocessing.official_embeddings``);
``image_modes="genmetrics"`` is the named deviation (alpha on white, 16/32-bit rescaled) and differs exactly on
the modes where the official conversion loses information, with a warning naming it. Also: the instruction's
final full stop, and a vision cache that never serves features of another dtype."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from genmetrics.data.io.images import to_rgb
from genmetrics.errors import InputError
from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
from genmetrics.tpips.common import PROMPTS, prompt_for
from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.metric import TPIPS
from genmetrics.tpips.model import TPIPSModel
from genmetrics.tpips.train import TPIPSTrainTask, TrainConfig
from tests.test_precision import fp32_floor, module_depth

from .test_legacy_adapters import DATA as LEGACY
from .test_preprocessing import official_embeddings

H, W = 70, 50  # non-square: smart_resize gives 64 x 64, so every image is resampled
TOL = 1e-5  # the parity bound of test_preprocessing (measured 7.5e-8 there)
#: file format per mode (PNG cannot hold PA, I, F or CMYK)
SUFFIX = {"PA": ".tiff", "I": ".tiff", "F": ".tiff", "CMYK": ".tiff"}


def _arr(shape: tuple[int, ...], hi: int, seed: int, dtype=np.uint8) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hi, shape, generator=g, dtype=torch.int64).numpy().astype(dtype)


def make(case: str, seed: int = 0) -> Image.Image:
    """One image per case; the values exercise what the conversions do differently."""
    rgb = Image.fromarray(_arr((H, W, 3), 256, seed))
    grey = Image.fromarray(_arr((H, W), 256, seed + 1))
    alpha = Image.fromarray(_arr((H, W), 256, seed + 2))
    if case == "1":
        return grey.convert("1")
    if case in ("L", "RGB", "CMYK"):
        return {"L": grey, "RGB": rgb, "CMYK": rgb.convert("CMYK")}[case]
    if case == "LA":
        return Image.merge("LA", (grey, alpha))
    if case == "RGBA":
        return Image.merge("RGBA", (*rgb.split(), alpha))
    if case in ("P", "P+transparency", "PA"):
        pal = rgb.quantize(16)
        if case == "P+transparency":
            pal.info["transparency"] = 3
            return pal
        if case == "PA":
            pa = pal.convert("PA")
            pa.putalpha(alpha)
            return pa
        return pal
    if case == "I;16":
        return Image.fromarray(_arr((H, W), 65536, seed, np.uint16))
    if case == "I;16 <= 255":
        return Image.fromarray(_arr((H, W), 256, seed, np.uint16))
    if case == "I":
        return Image.fromarray(_arr((H, W), 70000, seed, np.int32))
    if case == "F 0..1":
        return Image.fromarray(_arr((H, W), 256, seed, np.float32) / 255.0)
    raise ValueError(case)


CASES = [
    "1",
    "L",
    "LA",
    "P",
    "P+transparency",
    "PA",
    "RGB",
    "RGBA",
    "CMYK",
    "I",
    "I;16",
    "I;16 <= 255",
    "F 0..1",
]
#: cases where the official conversion and the genmetrics contract give different pixels
DIFFER = {"LA", "P+transparency", "PA", "I", "I;16", "I;16 <= 255", "F 0..1"}


@pytest.fixture(scope="module")
def vlm():
    return tiny_qwen3vl(seed=0)


@pytest.fixture(scope="module")
def baseline(vlm):
    """The zero-shot embedding baseline (App. C.3 prompt), default image_modes."""
    return load_tpips(
        None,
        backbone=vlm,
        processor=tiny_qwen3vl_processor(),
        variant="late",
        prompts=PROMPTS["embedding_baseline"],
    )


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _embed(model, images) -> torch.Tensor:
    return model.embed(images, ["color"] * len(images))


@pytest.mark.parametrize("source", ["pil", "file"])
def test_every_mode_equals_the_official_embedder(vlm, baseline, source, tmp_path):
    images = [make(c, seed=i) for i, c in enumerate(CASES)]
    if source == "file":
        paths = []
        for c, im in zip(CASES, images):
            path = (
                tmp_path
                / f"{c.replace(' ', '_').replace('<=', 'le').replace(';', '_')}{SUFFIX.get(im.mode, '.png')}"
            )
            im.save(path)
            assert Image.open(path).mode == im.mode, c  # the file holds the mode under test
            paths.append(path)
        images = paths
    assert baseline.image_modes == "official"
    ref = official_embeddings(
        vlm, tiny_qwen3vl_processor(), images, [prompt_for("embedding_baseline", "color")] * len(CASES)
    )
    got = _embed(baseline, [str(p) for p in images] if source == "file" else images)
    err = (got - ref).abs().max(1).values
    assert float(err.max()) < TOL, dict(zip(CASES, err.tolist()))


def test_genmetrics_modes_is_the_named_deviation(vlm, baseline):
    """image_modes="genmetrics" converts by the project's image contract (data.images.to_rgb): different from
    the official embedder exactly on the cases that lose information there, the same elsewhere."""
    contract = TPIPSModel(
        vlm, tiny_qwen3vl_processor(), "late", prompts=PROMPTS["embedding_baseline"], image_modes="genmetrics"
    )
    images = [make(c, seed=i) for i, c in enumerate(CASES)]
    official, ours = _embed(baseline, images), _embed(contract, images)
    by_contract = _embed(baseline, [to_rgb(im) for im in images])  # RGB in: both conversions are the identity
    assert torch.allclose(ours, by_contract, atol=1e-6)
    diff = (official - ours).abs().max(1).values
    for c, d in zip(CASES, diff.tolist()):
        assert (d > 1e-4) == (c in DIFFER), (c, d)


def test_official_conversion_warns_when_it_loses_information(baseline):
    for case, lossy in [
        ("LA", True),
        ("I;16", True),
        ("P+transparency", True),
        ("I;16 <= 255", False),
        ("L", False),
    ]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            baseline.load_images([make(case)])
        notes = [str(w.message) for w in caught if "image_modes='official'" in str(w.message)]
        assert bool(notes) == lossy, (case, notes)
        if lossy:
            assert "image_modes='genmetrics'" in notes[0]
    opaque = Image.merge("LA", (make("L"), Image.new("L", (W, H), 255)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        baseline.load_images([opaque])
    assert not [w for w in caught if "image_modes" in str(w.message)]


def test_float_images_outside_0_1(baseline, tmp_path):
    """A float image in 0..255: the official conversion reads it as 8-bit values; the genmetrics contract
    refuses it (float images are 0..1 by their sample type), naming the file."""
    im = Image.fromarray(_arr((H, W), 256, 3, np.float32))
    path = tmp_path / "f255.tiff"
    im.save(path)
    assert torch.allclose(_embed(baseline, [str(path)]), _embed(baseline, [im.convert("L")]), atol=1e-6)
    contract = TPIPSModel(baseline.backbone, tiny_qwen3vl_processor(), "late", image_modes="genmetrics")
    with pytest.raises(InputError, match=r"f255\.tiff: 32-bit float image with values in"):
        contract.load_images([str(path)])


def test_image_modes_reach_every_path(vlm, tmp_path):
    """The option is recorded in the adapter (older adapters, without it, keep the contract they were trained
    with), the metric converts mode-sensitive inputs through the model, training collates as inference loads."""
    model = TPIPSModel(vlm, tiny_qwen3vl_processor(), "late")
    folder = model.save_pretrained(tmp_path / "a")
    assert json.loads((folder / "tpips.json").read_text())["image_modes"] == "official"
    assert load_tpips(folder, backbone=vlm, processor=tiny_qwen3vl_processor()).image_modes == "official"
    legacy = load_tpips(LEGACY / "late", backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor())
    assert legacy.image_modes == "genmetrics"
    with pytest.raises(InputError, match="image_modes='rgb'"):
        TPIPSModel(vlm, tiny_qwen3vl_processor(), "late", image_modes="rgb")

    la, other = make("LA"), make("RGB", seed=5)
    direct = model.similarity([la], [other], "color")
    assert torch.equal(TPIPS(model).similarities([la], [other], "color").float(), direct)
    contract = TPIPSModel(vlm, tiny_qwen3vl_processor(), "late")
    via_option = TPIPS(contract, image_modes="genmetrics").similarities([la], [other], "color").float()
    assert torch.equal(via_option, model.similarity([to_rgb(la)], [other], "color"))
    assert not torch.equal(via_option, direct)

    path = tmp_path / "la.png"
    la.save(path)
    rgb = tmp_path / "rgb.png"
    other.save(rgb)
    from genmetrics.data.jsonl import OddOneOutRecord

    record = OddOneOutRecord(id="r", images=(path, rgb, rgb), aspect="color", votes=(1.0, 0.0, 0.0))
    task = TPIPSTrainTask(model, TrainConfig().resolved(), None)
    batch = task.collate([record])
    assert torch.equal(batch["x"][0][0], model.load_images([str(path)])[0])
    assert not torch.equal(batch["x"][0][0], contract.load_images([to_rgb(la)])[0])  # not the contract's


@pytest.mark.parametrize(
    "template",
    [
        ("Compare {aspect}", "Compare"),
        ("Is it about {aspect}?", "Is it alike?"),
        (" Look at {aspect} ", "Look"),
    ],
)
def test_custom_instruction_is_finished_as_the_embedder_does(vlm, template):
    """A custom template without final punctuation gets a full stop (and is stripped), as
    Qwen3VLEmbedder.format_model_input does; one that ends in punctuation is kept."""
    model = TPIPSModel(vlm, tiny_qwen3vl_processor(), "late", prompts=template)
    images = [make("RGB", seed=1), make("RGB", seed=2)]
    raw = [template[0].format(aspect="color"), template[1]]  # what a caller wrote, unfinished
    ref = official_embeddings(vlm, tiny_qwen3vl_processor(), images, raw)
    got = model.embed(images, ["color", "overall"])
    assert float((got - ref).abs().max()) < TOL
    assert prompt_for("late", "color", template)[-1] in ".?"


@pytest.mark.parametrize("variant", ["late", "mid", "early"])
def test_vision_cache_never_serves_another_dtype(variant):
    """Features cached in float32, then the model moved to bfloat16: the tower runs again and the scores are
    those of a model built in bfloat16 (bitwise), not a mix of float32 features and bfloat16 layers."""
    proc = tiny_qwen3vl_processor()
    a, b = [make("RGB", seed=1)], [make("RGB", seed=2)]
    model = TPIPSModel(tiny_qwen3vl(seed=0), proc, variant, probe_layers=2)
    s32 = model.similarity(a, b, "color")
    calls = model.vision_calls
    model.to(torch.bfloat16)
    s16 = model.similarity(a, b, "color")
    assert model.vision_calls == calls + 2  # both images again, at the new dtype
    fresh = TPIPSModel(tiny_qwen3vl(seed=0).to(torch.bfloat16), proc, variant, probe_layers=2)
    if variant == "mid":
        fresh.fusion.load_state_dict(model.fusion.state_dict())
    elif variant == "early":
        fresh.fusion.register.data.copy_(model.fusion.register.data)
    assert torch.equal(s16, fresh.similarity(a, b, "color")), (s16, s32)
    # bfloat16 moved the cosine by more than float32 rounding could (tests/test_precision.py's floor): the
    # check can tell the precisions apart on any CPU
    assert float((s16.float() - s32.float()).abs().max()) > fp32_floor(1.0, module_depth(model))
