"""Real-size models with random weights (genmetrics.testing.real_models): the published configuration values reach
the transformers config (the tiny tokenizer's ids unless the real ones are asked for), reduced variants keep
the structure, builds are seeded and leave the caller's RNG alone, processors carry the real image settings,
and a name of the wrong kind or a bad ``token_ids`` is one clear error."""

from __future__ import annotations

import pytest

from genmetrics.errors import InputError
from genmetrics.testing import real_models as rm


def test_the_published_configs_values_reach_the_transformers_config():
    cfg = rm.hf_config("Qwen3-VL-Embedding-2B", token_ids="real")
    assert cfg.vision_config.deepstack_visual_indexes == [5, 11, 17]
    assert cfg.text_config.rope_parameters["mrope_section"] == [24, 20, 20]
    assert cfg.text_config.rope_parameters["rope_theta"] == 5_000_000.0
    assert (cfg.image_token_id, cfg.vision_start_token_id) == (151655, 151652)
    tiny = rm.hf_config("Qwen3-VL-Embedding-2B")
    assert tiny.image_token_id == 12 and tiny.text_config.vocab_size == 151936
    q = rm.hf_config("Qwen3.5-0.8B")
    assert q.text_config.layer_types == (["linear_attention"] * 3 + ["full_attention"]) * 6
    assert q.text_config.rope_parameters["partial_rotary_factor"] == 0.25
    assert q.vision_config.depth == 12 and q.vision_config.out_hidden_size == 1024
    with pytest.raises(Exception, match="token_ids"):
        rm.hf_config("Qwen3.5-0.8B", token_ids="other")


@pytest.mark.parametrize("name", ["Qwen3-VL-Embedding-2B", "Qwen3.5-0.8B"])
def test_reduced_configs_keep_the_structure(name):
    full, red = rm.hf_config(name), rm.hf_config(name, reduced=True)
    ft, rt, fv, rv = full.text_config, red.text_config, full.vision_config, red.vision_config
    assert rt.num_hidden_layers == ft.num_hidden_layers
    assert list(getattr(rt, "layer_types", []) or []) == list(getattr(ft, "layer_types", []) or [])
    assert rt.head_dim == ft.head_dim and rt.rope_parameters == ft.rope_parameters
    assert rv.depth == fv.depth and rv.patch_size == fv.patch_size
    assert rv.spatial_merge_size == fv.spatial_merge_size
    assert rv.num_position_embeddings == fv.num_position_embeddings
    assert rv.hidden_size // rv.num_heads == fv.hidden_size // fv.num_heads  # vision head dim
    assert getattr(rv, "deepstack_visual_indexes", None) == getattr(fv, "deepstack_visual_indexes", None)
    assert rv.out_hidden_size == rt.hidden_size < ft.hidden_size
    if name == "Qwen3.5-0.8B":
        assert rt.linear_key_head_dim == ft.linear_key_head_dim
        assert rt.linear_conv_kernel_dim == ft.linear_conv_kernel_dim


def test_builds_are_seeded_and_leave_the_callers_rng_alone():
    import torch

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = rm.build_real_model("ViT-B-32-quickgelu", reduced=True, seed=1)
    after = torch.rand(1)
    b = rm.build_real_model("ViT-B-32-quickgelu", reduced=True, seed=1)
    assert torch.equal(before, after)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_processors_carry_the_real_image_settings():
    p = rm.processor_for("Qwen3.5-0.8B").image_processor
    assert (p.patch_size, p.merge_size, list(p.image_mean), list(p.image_std)) == (
        16,
        2,
        [0.5] * 3,
        [0.5] * 3,
    )
    assert p.size == {"shortest_edge": 65536, "longest_edge": 16777216}
    e = rm.processor_for("Qwen3-VL-Embedding-2B").image_processor
    assert e.size == {"shortest_edge": 4 * 32 * 32, "longest_edge": 1800 * 32 * 32}
    # the released tokenizers' context, not the tiny tokenizer's 512 (MIE's default limit comes from it)
    assert rm.processor_for("Qwen3.5-0.8B").tokenizer.model_max_length == 262144


def test_wrong_kind_and_unknown_token_ids_are_named():
    with pytest.raises(
        InputError, match=r"ViT-B-16-quickgelu is an open_clip model; build it with build_real_model"
    ):
        rm.hf_config("ViT-B-16-quickgelu")
    with pytest.raises(
        InputError, match=r"token_ids='other': expected 'tiny' \(offline tokenizer\) or 'real'"
    ):
        rm.hf_config("Qwen3.5-0.8B", token_ids="other")


def test_open_clip_entries_give_open_clip_s_tokenizer():
    import open_clip

    tok = rm.processor_for("ViT-B-32-quickgelu")
    assert type(tok) is type(open_clip.get_tokenizer("ViT-B-32-quickgelu"))
    assert tok(["a cat"]).shape == (1, 77)
