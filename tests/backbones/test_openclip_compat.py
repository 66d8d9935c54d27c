"""``genmetrics.backbones._openclip_compat``: each private open_clip member it wraps is still there on the
installed open_clip and gives what the public computation gives; a release without it fails with an error
naming the member and the installed version, and the fast paths that gate on it fall back to the public
``encode_image`` / ``encode_text`` with the same result."""

from __future__ import annotations

import open_clip.pretrained as ocp
import pytest
import torch
from open_clip.transformer import TextTransformer, VisionTransformer

from genmetrics.backbones import _openclip_compat as compat
from genmetrics.errors import DependencyChanged, installed_version
from genmetrics.testing import tiny_clip


def _tiny_text_tower(**kw):
    torch.manual_seed(0)
    return TextTransformer(
        context_length=8, vocab_size=100, width=16, heads=2, layers=1, output_dim=8, **kw
    ).eval()


def test_the_installed_open_clip_has_every_member():
    compat.check_openclip_private_apis()
    assert len(compat.PRIVATE_APIS) == 3


def test_vision_embeds_is_the_first_blocks_input_from_public_attributes():
    """The embedding equals the same steps written with the tower's public attributes, bit for bit."""
    v = tiny_clip()[0].visual
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        got = compat.vision_embeds(v, x)
        h = v.conv1(x).flatten(2).transpose(1, 2)
        h = torch.cat([v.class_embedding.view(1, 1, -1).expand(2, -1, -1), h], dim=1) + v.positional_embedding
        want = v.ln_pre(v.patch_dropout(h))
    assert torch.equal(got, want)


@pytest.mark.parametrize("pad_mask", [False, True])
def test_text_embeds_gives_the_embeddings_and_the_towers_mask(pad_mask):
    tower = _tiny_text_tower()
    tower.use_pad_mask = pad_mask  # as open_clip sets it for towers that mask their padding
    ids = torch.tensor([[3, 4, 5, 0, 0], [3, 4, 5, 6, 7]])
    with torch.no_grad():
        x, mask = compat.text_embeds(tower, ids)
        want = tower.token_embedding(ids) + tower.positional_embedding[:5]
    assert mask is not None
    assert torch.equal(x, want)
    if not pad_mask:
        assert torch.equal(mask, tower.attn_mask)
    else:  # per head: the causal mask at length 5, plus -inf on the first text's two padded keys
        causal = tower.attn_mask[:5, :5]
        assert mask.shape == (2 * tower.heads, 5, 5)
        assert torch.isinf(mask[: tower.heads, :, 3:]).all()
        assert torch.equal(mask[: tower.heads, :, :3], causal[:, :3].expand(tower.heads, -1, -1))
        assert torch.equal(mask[tower.heads :], causal.expand(tower.heads, -1, -1))


def test_safetensors_alternatives_follow_open_clips_hub_names():
    assert compat.safetensors_alternatives(ocp.HF_WEIGHTS_NAME) == [ocp.HF_SAFE_WEIGHTS_NAME]
    assert compat.safetensors_alternatives("weights/model.pth") == ["weights/model.safetensors"]
    assert compat.safetensors_alternatives("model.safetensors") == []


@pytest.mark.parametrize(
    "owner, name, call",
    [
        (
            VisionTransformer,
            "_embeds",
            lambda: compat.vision_embeds(tiny_clip()[0].visual, torch.rand(1, 3, 32, 32)),
        ),
        (
            TextTransformer,
            "_embeds",
            lambda: compat.text_embeds(_tiny_text_tower(), torch.ones(1, 4, dtype=torch.long)),
        ),
        (ocp, "_get_safe_alternatives", lambda: compat.safetensors_alternatives("model.bin")),
    ],
)
def test_a_release_without_the_member_fails_naming_it_and_the_version(monkeypatch, owner, name, call):
    monkeypatch.delattr(owner, name)
    version = installed_version("open_clip_torch")
    for fn in (call, compat.check_openclip_private_apis):
        with pytest.raises(DependencyChanged, match=rf"open_clip_torch {version} has no .*{name}"):
            fn()


def test_without_embeds_the_fast_paths_fall_back_to_the_public_forward(monkeypatch):
    """A tower without ``_embeds`` (``has_embeds`` False): the fast image path and the trimmed text path step
    aside and the embeddings are the model's own ``encode_image`` / ``encode_text``."""
    from genmetrics.backbones import clip_text, clip_vision

    model = tiny_clip()[0]
    x = torch.rand(2, 3, 32, 32)

    class TextTowerCLIP(torch.nn.Module):  # open_clip's CustomTextCLIP layout: the text tower as .text
        def __init__(self):
            super().__init__()
            self.text = _tiny_text_tower()

        def encode_text(self, ids):
            return self.text(ids)

    wrapped = TextTowerCLIP()
    ids = torch.tensor([[3, 4, 0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        assert clip_vision.fast_vision_tower(model) is model.visual
        assert clip_text.causal_text_tower(wrapped) is not None
        monkeypatch.setattr(clip_vision, "has_embeds", lambda tower: False)
        monkeypatch.setattr(clip_text, "has_embeds", lambda tower: False)
        assert clip_vision.fast_vision_tower(model) is None and clip_text.causal_text_tower(wrapped) is None
        assert torch.equal(clip_vision.encode_image(model, x), model.encode_image(x))
        assert torch.equal(clip_text.encode_text_ids(wrapped, ids), wrapped.encode_text(ids))
