"""Export to the authors' layout: a genmetrics-trained checkpoint, written with
``export_authors_layout`` / ``genmetrics export mie``, is loaded by an INDEPENDENT loader written here after
the authors' ``MIE_Inference/mie_loader.py`` (plain transformers + peft: ``*ForConditionalGeneration``,
``PeftModel.from_pretrained`` on ``lora_adapter/``, ``trainable_backbone.pt`` through
``load_state_dict(strict=False)``, the heads with ``load_state_dict``) and scores as genmetrics does.

Tolerance 1e-5: both sides run the same fp32 operations on sequences of ~60 tokens of width 64 through 6
layers; float32 rounding (1.2e-7 per operation, accumulated over reductions of 64..128 terms and a few
dozen sequential operations) stays below 1e-6 (measured 4.5e-7 / 8.1e-7 in test_authors_parity), so 1e-5
leaves a margin of 10 while a wrongly named or missing tensor moves scores by 1e-2 or more."""

from __future__ import annotations

import json

import pytest
import torch
from _authors import authors_score

from genmetrics.cli.main import main

TEXT = {"num_hidden_layers": 6}  # the top 4 train, 2 stay frozen
NAME = "org/tiny-qwen3.5"


def _base():
    from genmetrics.testing import tiny_qwen35_for_generation

    return tiny_qwen35_for_generation(0, text_config=dict(TEXT))


class AuthorsLoader(torch.nn.Module):
    """What ``load_runtime`` + ``score`` of the authors' mie_loader.py do, without their package: the base
    model named in the config (here the tiny stand-in), LoRA via peft, trained layers via a non-strict
    state-dict load (checked: every tensor of the file applies, which their loader checks only as >0)."""

    def __init__(self, ckpt, processor):
        super().__init__()
        from peft import PeftModel

        cfg = json.loads((ckpt / "mie_config.json").read_text())
        assert cfg["base_model_name"] == NAME
        mode = cfg["mode"]
        base = _base()
        h = base.config.text_config.hidden_size
        n = int(cfg.get("num_error_classes", 3))
        self.score_head = torch.nn.Sequential(
            torch.nn.Linear(h, h // 2), torch.nn.GELU(), torch.nn.Linear(h // 2, 1)
        )
        self.classification_head = torch.nn.Sequential(
            torch.nn.Linear(h, h // 2), torch.nn.GELU(), torch.nn.Linear(h // 2, n)
        )
        heads = torch.load(ckpt / "mie_heads.pt", map_location="cpu", weights_only=True)
        self.score_head.load_state_dict(heads["score_head"])
        self.classification_head.load_state_dict(heads["classification_head"])
        self.backbone = base
        self.report = {"mode": mode}
        if mode in {"lora", "lora_layer"}:
            self.backbone = PeftModel.from_pretrained(base, str(ckpt / "lora_adapter"), is_trainable=False)
            self.report["lora_params"] = sum(1 for n, _ in self.backbone.named_parameters() if "lora_" in n)
            assert self.report["lora_params"] > 0
        if mode in {"layer_only", "partial", "lora_layer", "full"}:
            updates = torch.load(ckpt / "trainable_backbone.pt", map_location="cpu", weights_only=True)
            result = self.backbone.load_state_dict(updates, strict=False)
            self.report["unexpected"] = list(result.unexpected_keys)
            self.report["applied"] = len(updates) - len(result.unexpected_keys)
        self.processor = processor
        self.eval()

    def forward(self, refs, prompt, cand):
        return authors_score(
            self.backbone, self.score_head, self.classification_head, self.processor, refs, prompt, cand
        )


def _trained(mode, proc, seed=3):
    """A genmetrics MIE model whose every trained tensor (heads, top layers, LoRA A and B) is away from its
    initial value, so a tensor that does not reach the authors' model changes the score."""
    from genmetrics.mie.model import MIEModel

    model = MIEModel(_base(), proc, tuning=mode, backbone_name=NAME).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def _assert_same(loader, ours, samples):
    worst = 0.0
    for i, (refs, prompt, cand) in enumerate(samples[: len(ours)]):
        s, d = loader(refs, prompt, cand)
        torch.testing.assert_close(ours.score[i : i + 1], s, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.diagnostics[i : i + 1], d, atol=1e-5, rtol=1e-5)
        worst = max(
            worst, float((ours.score[i] - s[0]).abs()), float((ours.diagnostics[i] - d[0]).abs().max())
        )
    return worst


@pytest.mark.parametrize("mode", ["layer_only", "lora_layer"])
def test_export_loads_in_the_authors_loader_with_the_same_scores(mode, proc, samples, tmp_path):
    from genmetrics.mie.checkpoint import export_authors_layout
    from genmetrics.mie.model import MIEModel

    model = _trained(mode, proc)
    args = ([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples])
    ours = model.score(*args)
    model.save_pretrained(tmp_path / "own")  # a genmetrics checkpoint on disk, as training writes it
    info = export_authors_layout(tmp_path / "own", tmp_path / "authors")
    loader = AuthorsLoader(tmp_path / "authors", proc)
    assert loader.report["unexpected"] == [] and loader.report["applied"] == len(model.full_layer_names())
    if mode == "lora_layer":
        assert loader.report["lora_params"] == len(model.lora_parameter_names()) == info["tensors"]["lora"]
    worst = _assert_same(loader, ours, samples)
    print(f"export {mode}: max |genmetrics - authors' loader| = {worst:.2e}")
    # and genmetrics reads its own export back to the same numbers
    again = MIEModel.from_pretrained(tmp_path / "authors", _base(), proc)
    assert again.tuning == mode and again.load_report["backbone"] == info["tensors"]["backbone"]
    torch.testing.assert_close(again.score(*args).score, ours.score, atol=1e-5, rtol=1e-5)


def test_a_trained_run_exports_from_the_command_line(proc, samples, pairs_file, tmp_path, capsys):
    """`genmetrics train mie` (lora_layer, 2 steps), then `genmetrics export mie CHECKPOINT --authors-layout
    DIR`: the authors' loader gives genmetrics' scores; a non-empty target and an authors'-layout source
    are refused with one error line."""
    from genmetrics.mie.model import MIEModel
    from genmetrics.mie.train import train_mie

    res = train_mie(
        data=str(pairs_file),
        out=str(tmp_path / "run"),
        vlm=_base(),
        processor=proc,
        tuning="lora_layer",
        lr=1e-2,
        max_steps=2,
        batch_pairs=2,
        grad_accum=1,
        val_fraction=0.0,
        warmup=0.0,
        image_size=None,
        progress=False,
        save_every=None,
    )
    ckpt = res["checkpoint"]
    cfg = json.loads((tmp_path / "run" / "final" / "mie_config.json").read_text())
    cfg["base_model_name"] = NAME  # the backbone's hub id, as a real run records it
    (tmp_path / "run" / "final" / "mie_config.json").write_text(json.dumps(cfg))
    rc = main(["export", "mie", ckpt, "--authors-layout", str(tmp_path / "authors"), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    info = json.loads(out.out)
    assert info["mode"] == "lora_layer" and info["tensors"]["lora"] > 0
    model = MIEModel.from_pretrained(ckpt, _base(), proc)
    b = [n for n, p in model.vlm.named_parameters() if "lora_B" in n]
    assert any(float(model.vlm.get_parameter(n).detach().abs().max()) > 0 for n in b)  # training moved LoRA B
    ours = model.score([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples])
    loader = AuthorsLoader(tmp_path / "authors", proc)
    assert loader.report["unexpected"] == []
    _assert_same(loader, ours, samples)
    assert main(["export", "mie", ckpt, "--authors-layout", str(tmp_path / "authors")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", "mie", str(tmp_path / "authors"), "--authors-layout", str(tmp_path / "x")]) == 2
    assert "already in the authors' layout" in capsys.readouterr().err
