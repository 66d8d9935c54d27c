"""MIEModel: shapes, batch invariance, shared vision features, tuning modes, bad input, save/load."""

import warnings

import pytest
import torch

from genmetrics.errors import InputError, WeightsUnavailableError


def _perturb_lora(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def test_score_shapes_and_fp32_heads(make_model, imgs):
    m = make_model()
    out = m.score([[imgs[0], imgs[1]], [imgs[2], imgs[3], imgs[4]]], ["a dog and a cat", "three friends"], imgs[5:7])
    assert out.score.shape == (2,) and out.diagnostics.shape == (2, 3)
    assert out.score.dtype == torch.float32 and out.diagnostics.dtype == torch.float32
    assert m.rank_head.weight.dtype == torch.float32 and m.diag_head.weight.dtype == torch.float32
    m.to(torch.bfloat16)
    assert m.rank_head.weight.dtype == torch.float32  # heads stay fp32 whatever the backbone dtype
    assert torch.isfinite(out.score).all() and out.probabilities.shape == (2, 3)


def test_sequence_layout_and_fixed_readout(make_model, imgs):
    m = make_model()
    batch = m.prepare([[imgs[0], imgs[1]]], ["a dog"], [imgs[2]])
    seq = batch.sequences[0]
    text = m.tokenizer.decode(seq.ids)
    assert text.index("Reference 1:") < text.index("Reference 2:") < text.index("Prompt: a dog") < text.index("Generated image:")
    assert text.endswith("<|im_start|>assistant\n")
    assert seq.ids.count(m.image_token_id) == 3 * 4  # 64x64 images -> 4 tokens each
    assert len(seq.image_keys) == 3


def test_candidate_score_independent_of_batch(make_model, imgs):
    """Different reference counts pad differently; a candidate's outputs must not change."""
    m = make_model()
    _perturb_lora(m)
    refs = [[imgs[0], imgs[1]], [imgs[2], imgs[3], imgs[4], imgs[5], imgs[6], imgs[7]], [imgs[8]] * 8,
            [imgs[9], imgs[10], imgs[11], imgs[12]]]
    prompts = ["two subjects", "six subjects with a much longer prompt that pads the others", "eight", "four"]
    cands = [imgs[13], imgs[14], imgs[15], imgs[0]]
    full = m.score(refs, prompts, cands)
    for i in range(4):
        alone = m.score(refs[i:i + 1], prompts[i:i + 1], cands[i:i + 1])
        torch.testing.assert_close(alone.score, full.score[i:i + 1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone.diagnostics, full.diagnostics[i:i + 1], atol=1e-5, rtol=1e-5)
    m.token_budget = 150  # forces other groupings (one or two sequences per forward)
    small = m.score(refs[::-1], prompts[::-1], cands[::-1])
    torch.testing.assert_close(small.score.flip(0), full.score, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(small.diagnostics.flip(0), full.diagnostics, atol=1e-5, rtol=1e-5)


def test_vision_tower_calls_per_pair(make_model, imgs):
    m = make_model()
    seen: list[int] = []
    hook = m.vlm.visual.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append(int(kwargs["grid_thw"].shape[0])), with_kwargs=True)
    try:
        for k in (2, 8):
            seen.clear()
            a, b = m.score_pairs([list(imgs[:k])], ["p"], [imgs[10]], [imgs[11]])
            assert sum(seen) == k + 2  # each reference once, shared by both candidates
            assert a.score.shape == b.score.shape == (1,)
    finally:
        hook.remove()
    # the shared features give the same scores as scoring each candidate on its own
    a, b = m.score_pairs([list(imgs[:3])], ["p"], [imgs[10]], [imgs[11]])
    sep = m.score([list(imgs[:3])] * 2, ["p", "p"], [imgs[10], imgs[11]])
    torch.testing.assert_close(torch.cat([a.score, b.score]), sep.score, atol=1e-5, rtol=1e-5)


def test_vision_cache_across_calls(make_model, imgs):
    m = make_model(vision_cache_size=8)
    m.score([[imgs[0], imgs[1]]], ["p"], [imgs[2]])
    n = m.stats["images_encoded"]
    m.score([[imgs[0], imgs[1]]], ["p"], [imgs[3]])
    assert m.stats["images_encoded"] == n + 1


def _trainable(model):
    return set(model.trainable_parameter_names())


def test_tuning_lora_layer_trains_exactly_lora_heads_last_layers(make_model):
    m = make_model("lora_layer", last_k=1)
    names = _trainable(m)
    heads = {"rank_head.weight", "rank_head.bias", "diag_head.weight", "diag_head.bias"}
    assert heads <= names
    last = {n for n in names if n.startswith("vlm.language_model.layers.1.") or n.startswith("vlm.language_model.norm.")}
    expected_last = {f"vlm.{n}" for n in m.full_layer_names()}
    assert last == expected_last and "vlm.language_model.norm.weight" in last
    lora = names - heads - last
    assert lora and all("lora_" in n for n in lora)
    assert {int(n.split("layers.")[1].split(".")[0]) for n in lora} == {0}  # not the fully trained layer
    assert not any("visual" in n or "embed_tokens" in n for n in names)
    # every linear layer of layer 0 (Gated-DeltaNet + MLP) has an adapter
    assert any("linear_attn.in_proj_qkv.lora_A" in n for n in lora) and any("mlp.down_proj.lora_B" in n for n in lora)
    # and the frozen parameters really stay frozen: one optimizer step changes only the trainable ones
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)
    from genmetrics.testing import random_images

    im = random_images(3, 64, seed=9)
    out = m(m.prepare([[im[0]]], ["p"], [im[1]]))
    (out.score.sum() + out.diagnostics.sum()).backward()
    opt.step()
    changed = {n for n, p in m.named_parameters() if not torch.equal(p, before[n])}
    assert changed <= names
    assert any("lora_B" in n for n in changed) and "rank_head.weight" in changed


@pytest.mark.parametrize("last_k", [0, 2])
def test_tuning_layer_only(make_model, last_k):
    m = make_model("layer_only", last_k=last_k)
    names = _trainable(m)
    heads = {"rank_head.weight", "rank_head.bias", "diag_head.weight", "diag_head.bias"}
    assert not any("lora_" in n for n in names)
    expected = heads | {f"vlm.{n}" for n in m.full_layer_names()}
    assert names == expected
    if last_k == 0:
        assert names == heads
    else:
        layers = {int(n.split("layers.")[1].split(".")[0]) for n in names if "layers." in n}
        assert layers == {0, 1}


def test_qwen3vl_backbone_with_deepstack(proc, imgs):
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    m = MIEModel(tiny_qwen3vl(0), tiny_qwen3vl_processor(), tuning="layer_only", last_k=1).eval()
    full = m.score([[imgs[0], imgs[1]], [imgs[2]] * 5], ["a", "b"], [imgs[3], imgs[4]])
    alone = m.score([[imgs[2]] * 5], ["b"], [imgs[4]])
    torch.testing.assert_close(alone.score, full.score[1:], atol=1e-5, rtol=1e-5)
    # features passed back through mm_encoder_outputs equal a plain forward with pixel values
    batch = m.prepare([[imgs[0]]], ["a"], [imgs[3]])
    seq = batch.sequences[0]
    pv = m.processor.image_processor(images=[__import__("genmetrics.data.images", fromlist=["x"]).to_pil(x)
                                             for x in (imgs[0], imgs[3])], return_tensors="pt")
    ids = torch.tensor([seq.ids])
    with torch.no_grad():
        ref = m.vlm(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pv["pixel_values"],
                    image_grid_thw=pv["image_grid_thw"], mm_token_type_ids=(ids == m.image_token_id).int(),
                    use_cache=False).last_hidden_state[0, -1]
        ours = m.score([[imgs[0]]], ["a"], [imgs[3]])
    torch.testing.assert_close(m.rank_head(ref.float()), ours.score, atol=1e-5, rtol=1e-5)


def test_bad_input(make_model, imgs):
    m = make_model()
    with pytest.raises(InputError, match="got 0 reference images"):
        m.score([[]], ["p"], [imgs[0]])
    with pytest.raises(InputError, match="got 9 reference images"):
        m.score([list(imgs[:9])], ["p"], [imgs[0]])
    with pytest.raises(InputError, match=r"candidates\[1\] is missing"):
        m.score([[imgs[0]], [imgs[1]]], ["p", "q"], [imgs[2], None])
    with pytest.raises(InputError, match="candidates: missing"):
        m.score([[imgs[0]]], ["p"], None)
    with pytest.raises(InputError, match=r"references\[0\] is missing"):
        m.score([None], ["p"], [imgs[0]])
    with pytest.raises(InputError, match="reference sets for 2 candidates"):
        m.score([[imgs[0]]], ["p"], [imgs[1], imgs[2]])
    with pytest.raises(InputError, match="does not exist"):
        m.score([["/nonexistent/ref.png"]], ["p"], [imgs[1]])
    with pytest.raises(InputError, match="empty"):
        m.score([[imgs[0]]], [""], [imgs[1]])
    with pytest.raises(InputError, match="tuning"):
        make_model("full")
    with pytest.raises(InputError, match="last_k"):
        make_model("layer_only", last_k=3)
    with pytest.raises(InputError, match="leaves none for LoRA"):
        make_model("lora_layer", last_k=2)


def test_overlong_prompt_truncated_by_tokenizer(make_model, imgs):
    m = make_model()
    long_prompt = "a dog and a cat playing in the park " * 200
    with pytest.warns(UserWarning, match="truncated"):
        batch = m.prepare([[imgs[0], imgs[1]]], [long_prompt], [imgs[2]])
    seq = batch.sequences[0]
    assert seq.truncated and len(seq.ids) == m.max_length
    assert m.tokenizer.decode(seq.ids).endswith("<|vision_end|><|im_end|>\n<|im_start|>assistant\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = m.score([[imgs[0], imgs[1]]], [long_prompt], [imgs[2]])
    assert torch.isfinite(out.score).all()
    strict = make_model(truncate_prompt=False)
    with pytest.raises(InputError, match="do not fit"):
        strict.score([[imgs[0]]], [long_prompt], [imgs[2]])
    tight = make_model(max_length=20)
    with pytest.raises(InputError, match="context limit"):
        tight.score([[imgs[0]] * 4], ["p"], [imgs[2]])


@pytest.mark.parametrize("tuning", ["lora_layer", "layer_only"])
def test_save_and_reload_identical(make_model, imgs, tmp_path, tuning):
    from genmetrics.mie.model import MIEModel, tiny_backbone

    m = make_model(tuning, last_k=1)
    _perturb_lora(m)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.requires_grad and "lora_" not in n:
                p.add_(0.01 * torch.randn_like(p))
    refs, prompts, cands = [[imgs[0], imgs[1]], [imgs[2]] * 3], ["a", "b"], [imgs[3], imgs[4]]
    before = m.score(refs, prompts, cands)
    m.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "heads.safetensors").is_file()
    assert (tmp_path / "ckpt" / "adapter" / "adapter_model.safetensors").is_file() == (tuning == "lora_layer")
    again = MIEModel.from_pretrained(tmp_path / "ckpt", tiny_backbone(0), m.processor)
    after = again.score(refs, prompts, cands)
    assert torch.equal(before.score, after.score) and torch.equal(before.diagnostics, after.diagnostics)
    # the checkpoint names its backbone, so it also loads without one
    third = MIEModel.from_pretrained(tmp_path / "ckpt")
    assert torch.equal(third.score(refs, prompts, cands).score, before.score)


def test_missing_checkpoint_is_clear(tmp_path):
    from genmetrics.mie.model import MIEModel

    with pytest.raises(WeightsUnavailableError, match="genmetrics train mie"):
        MIEModel.from_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsUnavailableError, match="mie_config.json"):
        MIEModel.from_pretrained(tmp_path / "empty")
    with pytest.raises(WeightsUnavailableError, match="genmetrics train mie"):  # hub id, offline in tests
        MIEModel.from_pretrained("someone/mie-heads-that-is-not-cached")
