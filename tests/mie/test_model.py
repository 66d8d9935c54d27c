"""MIEModel: heads, layout and read-out, batch invariance, shared reference features across several pairs,
tuning modes as the authors define them, determinism, bad input, save/load."""

import pytest
import torch

from genmetrics.errors import InputError, WeightsUnavailableError


def _perturb(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _n, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def test_heads_are_fp32_mlps(make_model, imgs):
    m = make_model()
    h = m.hidden_size
    for head, n in ((m.score_head, 1), (m.classification_head, 3)):
        assert [type(x).__name__ for x in head] == ["Linear", "GELU", "Linear"]
        assert (head[0].in_features, head[0].out_features, head[2].out_features) == (h, h // 2, n)
    out = m.score(
        [[imgs[0], imgs[1]], [imgs[2], imgs[3], imgs[4]]], ["a dog and a cat", "three friends"], imgs[5:7]
    )
    assert out.score.shape == (2,) and out.diagnostics.shape == (2, 3)
    assert out.score.dtype == torch.float32 and out.diagnostics.dtype == torch.float32
    m.to(torch.bfloat16)
    assert m.score_head[0].weight.dtype == torch.float32  # heads stay fp32 whatever the backbone dtype


def test_layout_references_first_candidate_last(make_model, imgs):
    m = make_model()
    batch = m.prepare([[imgs[0], imgs[1]]], ["a dog"], [imgs[2]])
    seq = batch.sequences[0]
    text = m.tokenizer.decode(seq.ids.tolist())
    assert text.startswith("<|im_start|>user\n<|vision_start|>")
    assert text.endswith("The last image is the generated candidate. Prompt: a dog<|im_end|>\n")
    assert seq.ids.tolist().count(m.image_token_id) == 3 * 4  # 64x64 images -> 4 tokens each
    assert len(seq.image_keys) == 3 and seq.image_keys[-1] == batch.sequences[0].image_keys[2]


def test_readout_is_the_last_token_of_a_plain_forward(proc, imgs):
    """Score = head(final hidden state at the last token) of an ordinary forward with pixel values, on a
    Qwen3-VL backbone (DeepStack features passed back too)."""
    from genmetrics.data.io.images import to_pil
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    m = MIEModel(tiny_qwen3vl(0), tiny_qwen3vl_processor(), tuning="layer_only", unfreeze_layers=1).eval()
    _perturb(m)
    seq = m.prepare([[imgs[0], imgs[1]]], ["a"], [imgs[3]]).sequences[0]
    pv = m.processor.image_processor(
        images=[to_pil(x) for x in (imgs[0], imgs[1], imgs[3])], return_tensors="pt"
    )
    ids = seq.ids[None]
    with torch.no_grad():
        hs = m.vlm(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pv["pixel_values"],
            image_grid_thw=pv["image_grid_thw"],
            mm_token_type_ids=(ids == m.image_token_id).int(),
            use_cache=False,
        ).last_hidden_state[0]
        ours = m.score([[imgs[0], imgs[1]]], ["a"], [imgs[3]])
    torch.testing.assert_close(m.score_head(hs[-1:].float()).squeeze(-1), ours.score, atol=1e-5, rtol=1e-5)
    assert (
        m.score_head(hs[-2:-1].float()).squeeze(-1) - ours.score
    ).abs().item() > 1e-4  # another token differs


def test_candidate_score_independent_of_batch(make_model, imgs):
    m = make_model()
    _perturb(m)
    refs = [
        [imgs[0], imgs[1]],
        [imgs[2], imgs[3], imgs[4], imgs[5], imgs[6], imgs[7]],
        [imgs[8]] * 8,
        [imgs[9], imgs[10], imgs[11], imgs[12]],
    ]
    prompts = ["two subjects", "six subjects with a much longer prompt", "eight", "four"]
    cands = [imgs[13], imgs[14], imgs[15], imgs[0]]
    full = m.score(refs, prompts, cands)
    for i in range(4):
        alone = m.score(refs[i : i + 1], prompts[i : i + 1], cands[i : i + 1])
        torch.testing.assert_close(alone.score, full.score[i : i + 1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone.diagnostics, full.diagnostics[i : i + 1], atol=1e-5, rtol=1e-5)
    m.token_budget = 60  # one sequence per forward
    small = m.score(refs[::-1], prompts[::-1], cands[::-1])
    torch.testing.assert_close(small.score.flip(0), full.score, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tuning", ["layer_only", "lora_layer"])
def test_pairs_share_their_own_references(make_model, imgs, tuning):
    """Several pairs with different references: both candidates of pair i are scored against pair i's
    references (as if scored alone), and each reference goes through the vision tower once."""
    m = make_model(tuning)
    _perturb(m)
    refs = [
        [imgs[0], imgs[1]],
        [imgs[2], imgs[3], imgs[4]],
        [imgs[5], imgs[6]],
        [imgs[7], imgs[8], imgs[9], imgs[10]],
    ]
    prompts = ["p0", "the second pair", "p2", "p3"]
    ca, cb = [imgs[11], imgs[12], imgs[13], imgs[14]], [imgs[15], imgs[0], imgs[3], imgs[6]]
    seen: list[int] = []
    hook = m.vlm.visual.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append(int(kwargs["grid_thw"].shape[0])), with_kwargs=True
    )
    try:
        a, b = m.score_pairs(refs, prompts, ca, cb)
    finally:
        hook.remove()
    assert sum(seen) == 16  # every distinct image once: imgs[0..15]
    for i in range(4):
        alone = m.score([refs[i], refs[i]], [prompts[i]] * 2, [ca[i], cb[i]])
        torch.testing.assert_close(torch.stack([a.score[i], b.score[i]]), alone.score, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            torch.stack([a.diagnostics[i], b.diagnostics[i]]), alone.diagnostics, atol=1e-5, rtol=1e-5
        )


def test_pairs_decode_each_file_once(make_model, imgs, tmp_path):
    """Files as inputs: a pair's references, shared by its two candidates, and a file named by several pairs
    are decoded once per batch (the batch keeps each path's key), and the batch equals one built from the
    decoded images."""
    from genmetrics.testing import write_images
    from genmetrics.testing.pil_counts import count_pil

    files = write_images(tmp_path, imgs[:8])
    m = make_model()
    refs = [[files[0], files[1]], [files[2], files[0]]]
    prompts, ca, cb = ["p0", "p1"], [files[3], files[4]], [files[5], files[3]]
    with count_pil() as c:
        batch = m.prepare_pairs(refs, prompts, ca, cb)
    assert {f: c.decodes[str(f)] for f in files[:6]} == dict.fromkeys(files[:6], 1)
    as_images = m.prepare_pairs(
        [[imgs[0], imgs[1]], [imgs[2], imgs[0]]], prompts, [imgs[3], imgs[4]], [imgs[5], imgs[3]]
    )
    assert [s.image_keys for s in batch.sequences] == [s.image_keys for s in as_images.sequences]
    assert all(torch.equal(batch.pixels[k], as_images.pixels[k]) for k in as_images.pixels)


def test_score_is_deterministic_in_any_mode(make_model, imgs):
    m = make_model("lora_layer", lora_dropout=0.3)
    _perturb(m)
    m.train()
    runs = [m.score([[imgs[0], imgs[1]]], ["p"], [imgs[2]]).score for _ in range(4)]
    assert all(torch.equal(r, runs[0]) for r in runs) and m.training  # the mode is left as it was
    m.eval()
    assert torch.equal(m.score([[imgs[0], imgs[1]]], ["p"], [imgs[2]]).score, runs[0])


def test_vision_cache_across_calls(make_model, imgs):
    m = make_model(vision_cache_size=8)
    m.score([[imgs[0], imgs[1]]], ["p"], [imgs[2]])
    n = m.stats["images_encoded"]
    m.score([[imgs[0], imgs[1]]], ["p"], [imgs[3]])
    assert m.stats["images_encoded"] == n + 1


def _scored(model, args):
    """Scores, the vision features the language model was given (the batch's, cached or fresh) and the
    final hidden state at the read-out token (before the fp32 heads), at the model's own precision."""
    seen = []
    hook = model.vlm.register_forward_hook(lambda mod, a, out: seen.append(out.last_hidden_state[:, -1]))
    batch = model.prepare(*args)
    try:
        with torch.no_grad():
            out = model(batch)
    finally:
        hook.remove()
    return out.score, [batch.features[k].embeds for k in batch.images], torch.cat(seen)


@pytest.mark.parametrize(
    ("tuning", "dtype"),
    [("layer_only", torch.bfloat16), ("lora_layer", torch.bfloat16), ("lora_layer", torch.float64)],
)
def test_vision_cache_never_serves_another_dtype(make_model, proc, imgs, tuning, dtype):
    """Features cached in float32, then the model moved to bfloat16 / float64: the tower runs again (the cache
    is keyed by content, dtype and device: backbones.qwen_vl.feature_scope), and the features, hidden states
    and scores are those of a model built at that dtype, bitwise: the same computation on the same weights,
    not float32 features fed to layers of another precision.

    The comparison is made on the features and hidden states at the new dtype, not on the float32 scores:
    the heads run in float32, so a float64 backbone may round to the very same float32 score as the float32
    one (it does on some CPUs)."""
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel

    m = make_model(tuning, vision_cache_size=8)
    _perturb(m)  # LoRA's B starts at zero: make every trained tensor matter
    args = ([[imgs[0], imgs[1]]], ["a dog and a cat"], [imgs[2]])
    s32, f32, _ = _scored(m, args)
    n = m.stats["images_encoded"]
    assert torch.equal(_scored(m, args)[0], s32) and m.stats["images_encoded"] == n  # served from the cache
    m.to(dtype)
    s_new, f_new, h_new = _scored(m, args)
    assert m.stats["images_encoded"] == n + 3  # all three images again, at the new dtype
    # what the language model was given is of the new dtype: float32 features from the cache would be float32
    assert {f.dtype for f in f32} == {torch.float32} and {f.dtype for f in f_new} == {dtype}
    assert h_new.dtype == dtype
    fresh = MIEModel(
        tiny_backbone(0).to(dtype),
        proc,
        tuning=tuning,
        unfreeze_layers=1,
        backbone_name="tiny/qwen3.5",
    ).eval()
    fresh.load_state_dict(m.state_dict())  # the same trained tensors (heads fp32, backbone at dtype)
    s_fresh, f_fresh, h_fresh = _scored(fresh, args)
    assert all(torch.equal(a, b) for a, b in zip(f_new, f_fresh, strict=True))
    assert torch.equal(h_new, h_fresh) and torch.equal(s_new, s_fresh), (s_new, s32)
    if dtype == torch.float64:
        # the float64 features carry bits that no float32 feature cast up has (each element of a float64
        # computation is float32-representable with probability 2**-29), so equality with the fresh model's
        # could not be met by float32 features served and cast up: the check tells them apart
        assert any(not torch.equal(f.float().double(), f) for f in f_new)
    assert m.score(*args).score.equal(s_new) and m.stats["images_encoded"] == n + 3  # new features cached


def _trainable(model):
    return set(model.trainable_parameter_names())


HEADS = {
    f"{h}.{i}.{w}" for h in ("score_head", "classification_head") for i in (0, 2) for w in ("weight", "bias")
}


def test_lora_layer_is_the_authors(make_model, imgs):
    """LoRA on the attention and MLP projections of the vision and language towers, plus the top layers."""
    m = make_model("lora_layer", unfreeze_layers=1)
    names = _trainable(m)
    assert HEADS <= names
    full = {f"vlm.{n}" for n in m.full_layer_names()}
    assert full and all(n.startswith("vlm.language_model.layers.1.") for n in full)
    assert "vlm.language_model.norm.weight" not in names  # the authors unfreeze layers, not the final norm
    lora = names - HEADS - full
    assert lora and all("lora_" in n for n in lora)
    mods = {n.split(".lora_")[0] for n in lora}
    for part in (
        "visual.blocks.0.attn.qkv",
        "visual.blocks.1.mlp.linear_fc2",
        "language_model.layers.0.linear_attn.in_proj_qkv",
        "language_model.layers.1.self_attn.q_proj",
        "language_model.layers.1.mlp.down_proj",
    ):
        assert f"vlm.{part}" in mods, part
    assert not any("merger" in n or "embed" in n or "act_fn" in n for n in mods)
    for n in mods:  # r 16, alpha 32 (scaling 2), dropout 0 -- the authors' peft_kwargs
        layer = m.get_submodule(n)
        assert layer.r["default"] == 16 and layer.scaling["default"] == 2.0, n
        assert isinstance(layer.lora_dropout["default"], torch.nn.Identity), n
    # one optimizer step changes only the trainable parameters, vision LoRA included
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)
    m.train()
    _perturb(m, seed=5)  # lora_B leaves zero so the LoRA A matrices get gradients too
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    out = m(m.prepare([[imgs[0]]], ["p"], [imgs[1]]))
    (out.score.sum() + out.diagnostics.sum()).backward()
    opt.step()
    changed = {n for n, p in m.named_parameters() if not torch.equal(p, before[n])}
    assert changed <= names
    assert any("visual" in n and "lora_" in n for n in changed) and "score_head.0.weight" in changed


@pytest.mark.parametrize("k", [0, 2])
def test_layer_only(make_model, k):
    m = make_model("layer_only", unfreeze_layers=k)
    names = _trainable(m)
    assert not any("lora_" in n for n in names)
    assert names == HEADS | {f"vlm.{n}" for n in m.full_layer_names()}
    layers = {int(n.split("layers.")[1].split(".")[0]) for n in names if "layers." in n}
    assert layers == ({0, 1} if k == 2 else set())


def test_bad_input(make_model, imgs):
    m = make_model()
    with pytest.raises(InputError, match="got 0 reference images"):
        m.score([[]], ["p"], [imgs[0]])
    with pytest.raises(InputError, match="got 9 reference images"):
        m.score([list(imgs[:9])], ["p"], [imgs[0]])
    with pytest.raises(InputError, match=r"candidates\[1\] is missing"):
        m.score([[imgs[0]], [imgs[1]]], ["p", "q"], [imgs[2], None])
    with pytest.raises(InputError, match="reference sets for 2 candidates"):
        m.score([[imgs[0]]], ["p"], [imgs[1], imgs[2]])
    with pytest.raises(InputError, match="does not exist"):
        m.score([["/nonexistent/ref.png"]], ["p"], [imgs[1]])
    with pytest.raises(InputError, match="tuning"):
        make_model("full")
    with pytest.raises(InputError, match="context limit"):
        make_model(max_length=20).score([[imgs[0]] * 4], ["p"], [imgs[2]])


def test_images_fit_512_keeping_aspect(make_model):
    from PIL import Image

    from genmetrics.mie.model import fit_image

    im = Image.new("RGB", (1024, 640))
    assert fit_image(im, 512).size == (512, 320)
    assert fit_image(Image.new("RGB", (300, 200)), 512).size == (300, 200)  # never upscaled
    assert make_model().image_size == 512


@pytest.mark.parametrize("tuning", ["lora_layer", "layer_only", None])
def test_save_and_reload_identical(make_model, imgs, tmp_path, tuning, provider):
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel

    m = make_model(tuning, unfreeze_layers=1)
    _perturb(m)
    refs, prompts, cands = [[imgs[0], imgs[1]], [imgs[2]] * 3], ["a", "b"], [imgs[3], imgs[4]]
    before = m.score(refs, prompts, cands)
    m.save_pretrained(tmp_path / "ckpt")
    again = MIEModel.from_pretrained(tmp_path / "ckpt", tiny_backbone(0), m.processor)
    after = again.score(refs, prompts, cands)
    assert torch.equal(before.score, after.score) and torch.equal(before.diagnostics, after.diagnostics)
    third = MIEModel.from_pretrained(
        tmp_path / "ckpt"
    )  # the backbone named in the checkpoint, via the provider
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
