"""Loading transformers models and peft adapters (genmetrics.backbones.hf): local folders first, then the caches,
then the hub (never when offline: no connection is attempted); what cannot be had is one
``WeightsUnavailableError`` naming where it looked and the fix; LoRA adapts the language tower only and starts
as the identity; an adapter saved and loaded again computes the same; adapter files are safetensors only."""

from __future__ import annotations

import socket

import pytest
import torch
from safetensors.torch import save_file

from genmetrics.backbones.hf import (
    add_lora,
    check_adapter_file,
    load_peft_adapter,
    load_vlm,
    resolve_dtype_device,
    unavailable_error,
)
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.testing import tiny_vlm as tv
from tests.testing.test_tiny_vlm import PAIR_TEXT, _images


@pytest.fixture(scope="module")
def pair_inputs():
    """Two images and a text through the tiny processor (as in tests/testing/test_tiny_vlm.py)."""
    return tv.tiny_qwen3vl_processor()(images=_images(2), text=[PAIR_TEXT], return_tensors="pt")


@pytest.fixture(params=["qwen3vl", "qwen3_5"])
def model_and_kind(request):
    build = tv.tiny_qwen3vl if request.param == "qwen3vl" else tv.tiny_qwen35
    return build(), request.param


def test_resolve_dtype_device_defaults():
    dtype, dev = resolve_dtype_device(None, "cpu")
    assert dtype == torch.float32 and dev.type == "cpu"
    assert resolve_dtype_device("bf16", "cpu")[0] == torch.bfloat16
    with pytest.raises(InputError):
        resolve_dtype_device("int3", "cpu")


def test_load_vlm_missing_local_path(tmp_path):
    missing = tmp_path / "no" / "such" / "checkpoint"
    with pytest.raises(WeightsUnavailableError) as ei:
        load_vlm(missing)
    msg = str(ei.value)
    assert str(missing) in msg
    assert "--weights" in msg or "backbone=" in msg
    assert isinstance(ei.value, OSError)


def test_load_vlm_folder_without_config(tmp_path):
    with pytest.raises(WeightsUnavailableError, match="config.json"):
        load_vlm(tmp_path)


def test_load_vlm_offline_unknown_hub_id_makes_no_request(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))

    def no_network(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(WeightsUnavailableError) as ei:
        load_vlm("genmetrics-test-org/does-not-exist-vlm")
    msg = str(ei.value)
    assert "genmetrics-test-org/does-not-exist-vlm" in msg
    assert str(tmp_path / "home" / "hf") in msg
    assert "hf download genmetrics-test-org/does-not-exist-vlm" in msg
    assert "offline" in msg
    with pytest.raises(WeightsUnavailableError):
        load_peft_adapter(tv.tiny_qwen3vl(), "genmetrics-test-org/does-not-exist-adapter")


def test_load_vlm_roundtrip_local_folder(tmp_path, pair_inputs):
    model, proc = tv.tiny_qwen3vl(seed=3), tv.tiny_qwen3vl_processor()
    model.save_pretrained(tmp_path)
    proc.save_pretrained(tmp_path)
    loaded, lproc = load_vlm(tmp_path, device="cpu")
    assert type(loaded).__name__ == "Qwen3VLModel" and not loaded.training
    assert loaded.dtype == torch.float32
    assert loaded.config._attn_implementation == "sdpa"
    assert lproc.image_processor.patch_size == 16 and list(lproc.image_processor.image_mean) == [0.5] * 3
    x = lproc(images=_images(2), text=[PAIR_TEXT], return_tensors="pt")
    assert torch.equal(x.input_ids, pair_inputs.input_ids)
    with torch.no_grad():
        a = model(**x, use_cache=False).last_hidden_state
        b = loaded(**x, use_cache=False).last_hidden_state
    assert torch.equal(a, b)
    with pytest.raises(InputError):
        load_vlm(tmp_path, kind="qwen3_5")


def test_load_vlm_detects_qwen35(tmp_path):
    tv.tiny_qwen35().save_pretrained(tmp_path)
    tv.tiny_qwen35_processor().save_pretrained(tmp_path)
    model, _ = load_vlm(tmp_path, kind=None, device="cpu")
    assert type(model).__name__ == "Qwen3_5Model"


def test_add_lora_freezes_vision_tower(model_and_kind):
    model, _ = model_and_kind
    peft_model = add_lora(model)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("visual" in n for n in trainable)
    assert all(not p.requires_grad for n, p in peft_model.named_parameters() if "visual" in n)
    assert not any("lora_" in n for n, _ in peft_model.named_parameters() if "visual" in n)
    cfg = peft_model.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (16, 32, 0.05)
    # language tower linear layers are adapted (attention + MLP)
    assert any("language_model" in n and "mlp" in n and "lora_A" in n for n in trainable)


@torch.no_grad()
def test_add_lora_starts_as_identity(pair_inputs):
    ref = tv.tiny_qwen3vl()(**pair_inputs, use_cache=False).last_hidden_state
    peft_model = add_lora(tv.tiny_qwen3vl()).eval()
    got = peft_model(**pair_inputs, use_cache=False).last_hidden_state
    assert torch.allclose(got, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["qwen3vl", "qwen3_5"])
def test_lora_save_and_load_peft_adapter_roundtrip(tmp_path, pair_inputs, kind):
    build = tv.tiny_qwen3vl if kind == "qwen3vl" else tv.tiny_qwen35
    peft_model = add_lora(build(seed=0), r=4)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # make the adapter non-trivial (lora_B starts at zero)
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    peft_model.eval()
    with torch.no_grad():
        want = peft_model(**pair_inputs, use_cache=False).last_hidden_state
        base = build(seed=0)(**pair_inputs, use_cache=False).last_hidden_state
    assert not torch.allclose(want, base, atol=1e-4)
    peft_model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()

    loaded = load_peft_adapter(build(seed=0), tmp_path / "adapter")
    assert not any(p.requires_grad for p in loaded.parameters())
    with torch.no_grad():
        got = loaded.eval()(**pair_inputs, use_cache=False).last_hidden_state
    assert torch.equal(got, want)

    trainable = load_peft_adapter(build(seed=0), tmp_path / "adapter", is_trainable=True)
    names = [n for n, p in trainable.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)


def test_load_peft_adapter_missing_path(tmp_path):
    with pytest.raises(WeightsUnavailableError, match="adapter_config.json"):
        load_peft_adapter(tv.tiny_qwen3vl(), tmp_path)
    with pytest.raises(WeightsUnavailableError) as ei:
        load_peft_adapter(tv.tiny_qwen3vl(), tmp_path / "missing" / "adapter")
    assert str(tmp_path / "missing" / "adapter") in str(ei.value)


@pytest.mark.parametrize(
    "name,dtype",
    [
        ("bf16", torch.bfloat16),
        ("BFloat16", torch.bfloat16),
        ("half", torch.float16),
        ("float", torch.float32),
    ],
)
def test_dtype_names(name, dtype):
    assert resolve_dtype_device(name, "cpu") == (dtype, torch.device("cpu"))
    assert resolve_dtype_device(torch.float64, "cpu")[0] is torch.float64
    with pytest.raises(InputError, match=r"dtype 'int3' is not understood; expected one of \["):
        resolve_dtype_device("int3", "cpu")


def test_a_file_in_place_of_the_checkpoint_folder_is_named(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(
        WeightsUnavailableError, match=r"pass the checkpoint \*folder\* \(holding config.json\)"
    ):
        load_vlm(tmp_path / "model.safetensors")


def test_unavailable_error_names_what_where_and_why():
    e = unavailable_error("org/m", ["/a", "/b"], cause=OSError("disk gone"), hint="Fix: x.")
    assert isinstance(e, WeightsUnavailableError) and isinstance(e, OSError)
    assert str(e).startswith("weights 'org/m' are not available (") and "Looked in: /a, /b." in str(e)
    assert "disk gone" in str(e) and str(e).endswith("Fix: x.")
    assert "(the hub is down)" in str(unavailable_error("org/m", ["/a"], why="the hub is down", hint=""))


def test_add_lora_refuses_a_rank_below_one():
    with pytest.raises(InputError, match="LoRA rank r must be positive, got 0"):
        add_lora(tv.tiny_qwen3vl(), r=0)


def test_adapter_files_are_safetensors_with_finite_values(tmp_path):
    (tmp_path / "adapter_model.bin").write_bytes(b"never read")
    with pytest.raises(InputError, match=r"adapter_model\.bin is a pickle file; .* never unpickles"):
        check_adapter_file(tmp_path)
    (tmp_path / "adapter_model.bin").unlink()
    with pytest.raises(InputError, match="no adapter_model.safetensors next to adapter_config.json"):
        check_adapter_file(tmp_path)
    path = tmp_path / "adapter_model.safetensors"
    save_file({"a": torch.ones(3), "b": torch.tensor([1.0, float("nan"), float("inf")])}, str(path))
    with pytest.raises(InputError, match=r"tensor 'b' holds 2 NaN or infinite value\(s\)"):
        check_adapter_file(tmp_path)
    path.write_bytes(b"\x00" * 10)
    with pytest.raises(InputError, match="not a readable safetensors file"):
        check_adapter_file(tmp_path)
    save_file({"a": torch.ones(3), "n": torch.arange(3)}, str(path))
    assert check_adapter_file(tmp_path) == path
