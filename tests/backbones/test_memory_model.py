"""The memory model against closed forms on toy configs, its scaling properties, and the batching utilities
picking the batch it predicts (a fake device memory is injected; no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from genmetrics.backbones.memory_model import CUDA_OVERHEAD_BYTES, image_tokens, predict_memory
from genmetrics.backbones.real_configs import RealConfig, count_parameters
from genmetrics.data.io.batching import map_batches, safe_batch_size

TOY_VL = RealConfig(
    name="toy-vl",
    family="tpips",
    kind="qwen3_vl",
    config={
        "text_config": {
            "vocab_size": 10,
            "hidden_size": 8,
            "intermediate_size": 12,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 4,
        },
        "vision_config": {
            "depth": 1,
            "hidden_size": 8,
            "intermediate_size": 16,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 2,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 8,
            "num_position_embeddings": 4,
            "deepstack_visual_indexes": [0],
        },
    },
    config_source="toy",
    published_params=0,
    params_source="toy",
    image={"min_pixels": 16, "max_pixels": 64},
)

TOY_CLIP = RealConfig(
    name="toy-clip",
    family="raclip",
    kind="open_clip",
    config={
        "embed_dim": 4,
        "quick_gelu": True,
        "vision_cfg": {"image_size": 8, "layers": 2, "width": 8, "patch_size": 4},
        "text_cfg": {"context_length": 5, "vocab_size": 10, "width": 4, "heads": 1, "layers": 1},
    },
    config_source="toy",
    published_params=0,
    params_source="toy",
    image={"image_size": 8},
)


def test_toy_vl_language_pass_closed_form():
    # 2 sequences, each one 8x8 image (16 patches of 2x2 -> 4 merged tokens) + 100 text tokens = 104 tokens
    est = predict_memory(TOY_VL, batch=2, image_size=(8, 8), text_tokens=100, dtype_bytes=4)
    assert image_tokens(TOY_VL, (8, 8)) == (16, 4)
    assert est.weights == 4 * count_parameters(TOY_VL)
    # language, per token: 4 hidden-wide tensors (4*8) + the widest mixer (q + attention out: 2*2*4 = 16)
    # + the MLP's gate, up and product (3*12) = 84 floats; 208 tokens -> 17472 floats
    # vision features kept for the language pass: 2 images x 4 merged x 8 wide x (1 + 1 DeepStack) = 128
    # keys and values of one layer, expanded to the 2 query heads: 2 seqs x 104 x 2 x 4 x 2 = 3328 floats
    assert est.activations == 4 * (17472 + 128)
    assert est.kv == 4 * 3328
    # the vision pass (32 patches x 154 floats, below) is narrower here
    assert est.total == est.weights + 4 * (17472 + 128 + 3328)


TOY_35 = RealConfig(
    name="toy-35",
    family="mie",
    kind="qwen3_5",
    config={
        "text_config": {
            "vocab_size": 10,
            "hidden_size": 8,
            "intermediate_size": 12,
            "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "full_attention"],
            "num_attention_heads": 3,
            "num_key_value_heads": 1,
            "head_dim": 4,
            "linear_num_key_heads": 1,
            "linear_num_value_heads": 2,
            "linear_key_head_dim": 2,
            "linear_value_head_dim": 2,
            "linear_conv_kernel_dim": 4,
        },
        "vision_config": {**TOY_VL.config["vision_config"], "deepstack_visual_indexes": []},
    },
    config_source="toy",
    published_params=0,
    params_source="toy",
    image={"min_pixels": 16, "max_pixels": 64},
)


def test_toy_qwen35_language_pass_closed_form():
    # gated full attention: q and its output gate (2 x 3 x 4) + the attention output (3 x 4) = 36 floats;
    # Gated-DeltaNet: q,k,v (2 x 1 x 2 + 2 x 2 = 8) and their convolved copy, z and the core output
    # (2 x 2 x 2) = 24 floats; the wider, 36, counts. Per token: 4 x 8 + 36 + 3 x 12 = 104 floats.
    est = predict_memory(TOY_35, batch=2, image_size=(8, 8), text_tokens=100, dtype_bytes=4)
    tokens = 2 * (4 + 100)
    assert est.activations == 4 * (tokens * 104 + 2 * 4 * 8)  # + the image features, no DeepStack
    assert est.kv == 4 * (2 * 104 * 3 * 4 * 2)


def test_toy_vl_vision_pass_is_the_peak_when_wider():
    # 6 text tokens: the language pass is 20 x 84 + 128 + 320 = 2128 floats; the vision pass, per patch:
    # the 24-wide input row x (4 + 4) / 4 (float32 rows and their model-dtype copy) + 9 x 8 hidden-wide
    # tensors + 2 x 16 MLP + 1 DeepStack level x 8 / 4 = 154 floats, 32 patches: 4928 floats, the peak
    est = predict_memory(TOY_VL, batch=2, image_size=(8, 8), text_tokens=6, dtype_bytes=4)
    assert est.kv == 0 and est.activations == 4 * 32 * 154  # the vision pass holds no text keys / values


def test_toy_clip_closed_form():
    # 3 images of 8x8 with patch 4: 4 patches + the class token = 5 tokens; width 8;
    # per token: residual, ln, q/k/v (3), attention out, MLP hidden + activation (4 + 4), block out = 15 w
    est = predict_memory(TOY_CLIP, batch=3, image_size=(8, 8), dtype_bytes=4, device="cpu")
    acts = 3 * 5 * 15 * 8 * 4 + 3 * 3 * 8 * 8 * 4  # + the float32 pixels
    # CPU float32: the blocks' linear weights packed once more (12 w^2) + the freed scaled MLP copy (4 w^2)
    packed = 2 * (12 + 4) * 8 * 8 * 4
    assert (est.activations, est.kv) == (acts, 0)
    assert est.weights == 4 * count_parameters(TOY_CLIP) + packed
    gpu = predict_memory(TOY_CLIP, batch=3, image_size=(8, 8), dtype_bytes=2, device="cuda")
    assert gpu.weights == 2 * count_parameters(TOY_CLIP) and gpu.overhead == CUDA_OVERHEAD_BYTES


@pytest.mark.parametrize("name", ["Qwen3-VL-Embedding-2B", "Qwen3.5-0.8B"])
def test_scaling_properties_at_real_size(name):
    kw = {"image_size": (1024, 1024), "images_per_item": 2, "text_tokens": 40}
    p = [predict_memory(name, batch=b, **kw) for b in (1, 2, 3, 4)]
    assert len({e.weights for e in p}) == 1
    steps = [b.total - a.total for a, b in zip(p, p[1:])]
    assert all(s > 0 for s in steps) and max(steps) - min(steps) <= 1  # linear in the batch
    half = predict_memory(name, batch=2, dtype_bytes=2, **kw)
    assert half.weights * 2 == p[1].weights
    # bf16 activations are half of float32's, except the processor's float32 pixel rows
    assert 0.5 * p[1].activations < half.activations < 0.6 * p[1].activations
    long = {"batch": 2, "image_size": (256, 256), "images_per_item": 2, "text_tokens": 2000}
    mid, late = predict_memory(name, variant="mid", **long), predict_memory(name, variant="late", **long)
    assert mid.total > late.total  # where the language pass is the peak, mid fusion adds its probe layers


def test_early_fusion_on_cpu_counts_the_dense_mask_attention():
    # long text so that the language pass is the peak: S = 2 x 64 image tokens + 2000 = 2128
    kw = {"batch": 2, "image_size": (256, 256), "images_per_item": 2, "text_tokens": 2000, "variant": "early"}
    cpu, gpu = (
        predict_memory("Qwen3-VL-Embedding-2B", **kw),
        predict_memory("Qwen3-VL-Embedding-2B", device="cuda", **kw),
    )
    s = 2 * 64 + 2000
    assert cpu.activations - gpu.activations == 2 * 16 * s * s * 4  # heads x S x S float32, per sequence


def test_safe_batch_size_is_the_largest_that_fits():
    peak = lambda b: 10 * 2**30 + b * 3 * 2**30  # noqa: E731 - 10 GiB + 3 GiB per item
    for mem_gib, expected in [(24, 3), (80, 20), (141, 38)]:
        got = safe_batch_size(peak, memory=mem_gib * 2**30, max_batch_size=64)
        assert got == expected
        assert peak(got) <= 0.9 * mem_gib * 2**30 < peak(got + 1)
    assert safe_batch_size(peak, memory=80 * 2**30, max_batch_size=8) == 8  # capped
    assert safe_batch_size(peak, memory=2**30, max_batch_size=8) == 1  # nothing fits: the minimum
    with pytest.raises(ValueError):
        safe_batch_size(peak, memory=2**30, max_batch_size=0)


def test_map_batches_starts_at_the_predicted_batch_on_a_fake_gpu(monkeypatch):
    import genmetrics.data.io.batching as batching

    def peak(b: int) -> float:
        return predict_memory(
            "Qwen3-VL-Embedding-2B",
            batch=b,
            image_size=(768, 1024),
            text_tokens=30,
            dtype_bytes=2,
            device="cuda",
        ).total

    fake = 24 * 2**30
    expected = max(b for b in range(1, 257) if peak(b) <= 0.9 * fake)
    monkeypatch.setattr(batching, "device_memory", lambda device=None: fake)  # a 24 GiB "GPU"
    sizes = map_batches(lambda s: s.stop - s.start, 300, 256, peak_bytes=peak, device="cuda")
    assert sizes[0] == expected and sum(sizes) == 300 and 1 < expected < 256
    # without a memory model the start stays where the caller put it
    assert map_batches(lambda s: s.stop - s.start, 300, 256)[0] == 256


# ------------------------------------------------------------------------------ metrics on a fake GPU
# Batch invariance bound: the families' own batch-composition bound (tests/tpips/test_batch_composition.py
# and tests/mie/test_batch_composition.py, 1e-5: float32 reductions of the tiny towers re-ordered by the
# batch, ~eps * width * layers ~ 1.2e-7 * 64 * 2 ~ 1.5e-5 worst case, observed far below).
BATCH_TOL = 1e-5


def _fake_gpu(monkeypatch, memory: int) -> None:
    """Every module that asks for the device's memory gets ``memory`` (a CUDA device of that size)."""
    import genmetrics.data.io.batching as batching
    import genmetrics.mie.metric as mie_metric
    import genmetrics.tpips.metric as tpips_metric

    for mod in (batching, tpips_metric, mie_metric):
        monkeypatch.setattr(mod, "device_memory", lambda device=None: memory)


def _spy_sizes(metric) -> list[int]:
    sizes: list[int] = []
    score = metric.score_batch

    def spy(batch):
        sizes.append(len(batch["candidates"]))
        return score(batch)

    metric.score_batch = spy
    return sizes


def _memory_for(peak, batch: int) -> int:
    """A device on which exactly ``batch`` items fit under safe_batch_size's 0.9 headroom."""
    mem = int(peak(batch) / 0.9) + 1
    assert peak(batch) <= 0.9 * mem < peak(batch + 1)
    return mem


def test_real_config_from_model_matches_the_entry_or_builds_one():
    from genmetrics.backbones.memory_model import real_config_from_model
    from genmetrics.testing import tiny_qwen3vl
    from genmetrics.testing.real_models import build_real_model

    for name in ("Qwen3-VL-Embedding-2B", "Qwen3.5-0.8B"):
        assert real_config_from_model(build_real_model(name, device="meta")).name == name
    tiny = tiny_qwen3vl()
    e = real_config_from_model(tiny)
    assert e is not None and e.kind == "qwen3_vl"
    # the entry built from the loaded config counts the loaded model's parameters exactly
    assert count_parameters(e) == sum(p.numel() for p in tiny.parameters())
    assert real_config_from_model({"model_type": "llama"}) is None


def test_tpips_first_batch_is_the_memory_models_on_a_fake_gpu(monkeypatch):
    import warnings

    from genmetrics.backbones.memory_model import real_config_from_model
    from genmetrics.testing import random_images, tiny_tpips
    from genmetrics.tpips.metric import TPIPS

    model = tiny_tpips("late")
    ref, cand = random_images(7, 48, seed=1), random_images(7, 48, seed=2)
    ref[3] = torch.nn.functional.interpolate(ref[3:4], size=(48, 48)).squeeze(0)  # same size, kept simple
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = TPIPS(model, batch_size=8)
        cpu_sizes = _spy_sizes(cpu)
        cpu.update(reference=ref, candidates=cand, condition="lighting")
    assert cpu_sizes == [7]  # on the CPU nothing changes: the caller's batch size

    entry = real_config_from_model(model.backbone)
    hw = model.resize.target(48, 48)

    def peak(b: int) -> float:  # the second computation: 2 sequences (reference, candidate) per pair
        return predict_memory(
            entry, batch=2 * b, image_size=hw, text_tokens=model.max_aspect_tokens + 32, device="cuda"
        ).total

    mem = _memory_for(peak, 3)
    assert safe_batch_size(peak, memory=mem, max_batch_size=8) == 3
    _fake_gpu(monkeypatch, mem)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu = TPIPS(model, batch_size=8)
        sizes = _spy_sizes(gpu)
        gpu.update(reference=ref, candidates=cand, condition="lighting")
        one_shot = gpu.similarities(ref, cand, "lighting")  # the one-shot entry point batches alike
    assert sizes == [3, 3, 1, 3, 3, 1]
    diff = (gpu.per_sample()["scores"] - cpu.per_sample()["scores"]).abs().max()
    assert float(diff) <= BATCH_TOL
    assert float((one_shot - cpu.per_sample()["scores"]).abs().max()) <= BATCH_TOL


def test_mie_first_batch_is_the_memory_models_on_a_fake_gpu(monkeypatch):
    import warnings

    import genmetrics as gm
    from genmetrics.backbones.memory_model import real_config_from_model
    from genmetrics.backbones.qwen_vl import smart_resize
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor

    proc = tiny_qwen35_processor()
    vlm = tiny_qwen35(
        0, text_config={"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}
    )
    model = MIEModel(vlm, proc, tuning="lora_layer", unfreeze_layers=1, backbone_name="tiny/qwen3.5").eval()
    refs = [[im] for im in random_images(5, 64, seed=3)]
    refs[1] = [refs[1][0], random_images(1, 64, seed=4)[0]]  # two references: 3 images per item
    cands = list(random_images(5, 64, seed=5, height=96))  # 96 x 64, resized within the pixel budget
    prompts = [f"prompt {i}" for i in range(5)]

    def run(batch_size: int):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            metric = gm.create_metric("mie", model=model, batch_size=batch_size, vision_cache_size=0)
            sizes = _spy_sizes(metric)
            metric.update(refs, cands, prompts)
        return metric.per_sample()["scores"], sizes

    cpu_scores, cpu_sizes = run(8)
    assert cpu_sizes == [5]
    entry = real_config_from_model(model.vlm)
    v = entry.config["vision_config"]
    budget = proc.image_processor.size
    factor = v["patch_size"] * v["spatial_merge_size"]
    seen = [
        smart_resize(h, w, factor, budget["shortest_edge"], budget["longest_edge"])
        for h, w in [(64, 64), (96, 64)]
    ]
    hw = max(seen, key=lambda s: s[0] * s[1])  # the largest image the vision tower sees, by area

    def peak(b: int) -> float:
        dtype_bytes = next(model.vlm.parameters()).element_size()
        return predict_memory(
            entry,
            batch=b,
            image_size=hw,
            images_per_item=3,
            text_tokens=128,
            variant="mie",
            dtype_bytes=dtype_bytes,
            device="cuda",
        ).total

    _fake_gpu(monkeypatch, _memory_for(peak, 2))
    scores, sizes = run(8)
    assert sizes == [2, 2, 1]
    assert float((scores - cpu_scores).abs().max()) <= BATCH_TOL
