"""The memory model against closed forms on toy configs, its scaling properties, and the batching utilities
picking the batch it predicts (a fake device memory is injected; no GPU needed)."""

from __future__ import annotations

import pytest

from genmetrics.backbones.memory_model import CUDA_OVERHEAD_BYTES, image_tokens, predict_memory
from genmetrics.backbones.real_configs import RealConfig, count_parameters
from genmetrics.data.batching import map_batches, safe_batch_size

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
    import genmetrics.data.batching as batching

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
