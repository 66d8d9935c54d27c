"""genmetrics.mie.common: backbone aliases, parameter names every wrapper agrees on, the image_size option."""

import re

import pytest

from genmetrics.errors import InputError
from genmetrics.mie.common import (
    BACKBONES,
    DEFAULT_BACKBONE,
    FROM_CHECKPOINT,
    LORA_TARGETS,
    canonical_name,
    image_size_option,
    resolve_backbone_name,
)


def test_aliases_resolve_in_any_case_and_other_names_pass_through():
    assert DEFAULT_BACKBONE in BACKBONES
    for alias, hub_id in BACKBONES.items():
        assert resolve_backbone_name(alias) == resolve_backbone_name(alias.upper()) == hub_id
        assert resolve_backbone_name(hub_id) == hub_id  # a hub id is not an alias: unchanged
    for other in ("/models/My-Backbone", "Qwen/Qwen3-VL-2B-Instruct", "8b"):
        assert resolve_backbone_name(other) == other


@pytest.mark.parametrize(
    "wrapped",
    [
        "{p}",
        "model.{p}",
        "base_model.model.model.{p}",
        "module.base_model.model.model.{p}",
    ],
)
@pytest.mark.parametrize(
    "plain",
    [
        "language_model.layers.3.mlp.up_proj.weight",
        "visual.blocks.0.attn.qkv.bias",
        "language_model.layers.0.self_attn.q_proj.lora_A.weight",
    ],
)
def test_a_wrapped_parameter_name_reduces_to_the_plain_one(wrapped, plain):
    """Prefixes of DDP, peft and the model class, peft's ``base_layer.`` and the adapter name all go; the
    reduction is idempotent."""
    name = wrapped.format(p=plain)
    if ".lora_A." in plain:
        name = name.replace(".lora_A.weight", ".lora_A.default.weight")
    else:
        name = re.sub(r"\.(weight|bias)$", r".base_layer.\1", name)
    assert canonical_name(name) == plain
    assert canonical_name(canonical_name(name)) == plain


def test_lora_targets_select_attention_and_mlp_projections_only():
    hit = re.compile(LORA_TARGETS).fullmatch
    for name in (
        "model.visual.blocks.2.attn.qkv",
        "model.visual.blocks.2.mlp.linear_fc1",
        "model.language_model.layers.7.self_attn.o_proj",
        "model.language_model.layers.1.linear_attn.in_proj_qkvz",
        "model.language_model.layers.0.mlp.down_proj",
    ):
        assert hit(name), name
    for name in ("model.visual.merger.linear_fc1", "model.language_model.embed_tokens", "lm_head"):
        assert not hit(name), name


@pytest.mark.parametrize(
    "value,expected", [(512, 512), ("64", 64), (None, None), (" None ", None), ("original", None)]
)
def test_image_size_takes_a_bound_or_unresized(value, expected):
    assert image_size_option(value) == expected


def test_checkpoint_is_a_value_only_where_allowed():
    assert image_size_option(" Checkpoint", allow_checkpoint=True) == FROM_CHECKPOINT
    with pytest.raises(InputError) as e:
        image_size_option("checkpoint", owner="mie-score")
    assert str(e.value).startswith("mie-score: option image_size: expected the longer image side")
    assert "'checkpoint'" in str(e.value) and "the checkpoint's own" not in str(e.value)


@pytest.mark.parametrize("bad", [0, -3, "big", 1.5, "12px"])
@pytest.mark.parametrize("allow", [False, True])
def test_a_bad_image_size_is_one_error_naming_the_value_and_the_choices(bad, allow):
    with pytest.raises(InputError) as e:
        image_size_option(bad, allow_checkpoint=allow)
    msg = str(e.value)
    assert msg.startswith("mie: option image_size: expected the longer image side in px (an integer >= 1)")
    assert msg.endswith(f"got {bad!r}") and ("'checkpoint'" in msg) == allow
