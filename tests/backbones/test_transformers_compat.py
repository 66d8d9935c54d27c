"""``genmetrics.backbones._transformers_compat``: the attention implementation a model was built with is
read back from its config on the installed transformers; a release without the member fails with an error
naming it and the installed version."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, PretrainedConfig

from genmetrics.backbones import _transformers_compat as compat
from genmetrics.backbones.qwen_vl import attn_implementation, resolve_parts
from genmetrics.errors import DependencyChanged, installed_version
from genmetrics.testing import tiny_qwen3vl_config


def test_the_installed_transformers_has_every_member():
    compat.check_transformers_private_apis()


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_reads_back_the_implementation_the_model_was_built_with(impl):
    model = AutoModel.from_config(tiny_qwen3vl_config(), attn_implementation=impl, dtype=torch.float32)
    assert compat.attn_implementation_of(model.config) == impl
    assert attn_implementation(resolve_parts(model)) == impl


def test_a_release_without_the_member_fails_naming_it_and_the_version(monkeypatch):
    config = tiny_qwen3vl_config()
    monkeypatch.delattr(PretrainedConfig, "_attn_implementation")
    version = installed_version("transformers")
    for call in (compat.check_transformers_private_apis, lambda: compat.attn_implementation_of(config)):
        with pytest.raises(DependencyChanged, match=rf"transformers {version} has no .*_attn_implementation"):
            call()
