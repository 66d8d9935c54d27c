"""Tampered and faulty MIE checkpoints: heads, trained layers and LoRA adapters with NaN /
inf values, a wrong shape, an extra or a missing tensor are refused at load with the file and the tensor
named; a pickle that would run code never runs and is refused with one ``error:`` line naming the file and
the safe format; ``--heads`` takes a training run's folder; a run records its backbone folder absolute and a
checkpoint finds a backbone next to it, or says where it looked."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import torch
from _data import eval_argv, train_argv
from safetensors.torch import load_file, save_file

from genmetrics.cli.main import main
from genmetrics.errors import InputError


@pytest.fixture(scope="module")
def folders(tmp_path_factory, proc):
    """A lora_layer model (every trained tensor moved) in genmetrics' format and in the authors' layout."""
    from conftest import tiny_backbone

    from genmetrics.mie.checkpoint import export_authors_layout
    from genmetrics.mie.model import MIEModel

    root = tmp_path_factory.mktemp("ckpts")
    model = MIEModel(
        tiny_backbone(0), proc, tuning="lora_layer", unfreeze_layers=1, backbone_name="tiny/qwen3.5"
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    model.save_pretrained(root / "own")
    export_authors_layout(root / "own", root / "authors")
    return root


def _load(folder, proc):
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel

    return MIEModel.from_pretrained(folder, tiny_backbone(0), proc)


def _copy(folders, which, tmp_path):
    dst = tmp_path / which
    shutil.copytree(folders / which, dst)
    return dst


def _first(d, pred=lambda k: True):
    return next(k for k in d if pred(k))


def _pt(fn):
    """Edit a torch.save file of tensors in place."""

    def go(path):
        d = torch.load(path, weights_only=True)
        fn(d)
        torch.save(d, path)

    return go


def _st(fn):
    """Edit a safetensors file in place."""

    def go(path):
        d = load_file(str(path))
        fn(d)
        save_file(d, str(path))

    return go


def _nan(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


def _inf(t):
    t = t.clone()
    t.view(-1)[-1] = float("inf")
    return t


def _set(key_of, value_of):
    """``d[key] = value`` with the key chosen from the dict (``key_of(d)``) and the value from the old one."""
    return lambda d: d.update({key_of(d): value_of(d[key_of(d)] if key_of(d) in d else None)})


LAYER = lambda d: _first(d, lambda k: k.endswith("weight"))  # noqa: E731
LORA_B = lambda d: _first(d, lambda k: "lora_B" in k)  # noqa: E731
OWN_LAYER = lambda d: _first(d, lambda k: k.startswith("backbone."))  # noqa: E731
HEADS, LAYERS, ADAPTER, OWN = (
    "mie_heads.pt",
    "trainable_backbone.pt",
    "lora_adapter/adapter_model.safetensors",
    "mie_weights.safetensors",
)

# every case: (name, layout, file, how the file is changed, words the error must hold)
CASES = [
    (
        "heads-nan",
        "authors",
        HEADS,
        _pt(lambda d: _set(lambda h: "0.weight", _nan)(d["score_head"])),
        [HEADS, "'0.weight'", "NaN"],
    ),
    (
        "heads-inf",
        "authors",
        HEADS,
        _pt(lambda d: _set(lambda h: "2.bias", _inf)(d["classification_head"])),
        [HEADS, "classification_head", "'2.bias'", "infinite"],
    ),
    (
        "heads-shape",
        "authors",
        HEADS,
        _pt(lambda d: d["score_head"].update({"2.weight": torch.zeros(2, 16)})),
        [HEADS, "score_head", "2.weight (2, 16)"],
    ),
    (
        "heads-extra-tensor",
        "authors",
        HEADS,
        _pt(lambda d: d["score_head"].update({"4.weight": torch.zeros(1)})),
        [HEADS, "unexpected ['4.weight']"],
    ),
    (
        "heads-missing-tensor",
        "authors",
        HEADS,
        _pt(lambda d: d["score_head"].pop("0.bias")),
        [HEADS, "missing tensors ['0.bias']"],
    ),
    (
        "heads-extra-entry",
        "authors",
        HEADS,
        _pt(lambda d: d.update({"payload": {"w": torch.zeros(1)}})),
        [HEADS, "'payload'"],
    ),
    (
        "heads-not-tensor",
        "authors",
        HEADS,
        _pt(lambda d: d["score_head"].update({"0.bias": 3})),
        [HEADS, "'0.bias'", "not a tensor"],
    ),
    ("layers-nan", "authors", LAYERS, _pt(_set(LAYER, _nan)), [LAYERS, "NaN", "layers."]),
    (
        "layers-shape",
        "authors",
        LAYERS,
        _pt(_set(LAYER, lambda t: torch.zeros(3))),
        [LAYERS, "shape mismatches", "(3,)"],
    ),
    (
        "layers-extra",
        "authors",
        LAYERS,
        _pt(lambda d: d.update({"model.language_model.layers.0.extra.weight": torch.zeros(1)})),
        [LAYERS, "layers.0.extra.weight"],
    ),
    (
        "layers-missing",
        "authors",
        LAYERS,
        _pt(lambda d: d.pop(LAYER(d))),
        [LAYERS, "not in the file but trained"],
    ),
    ("adapter-nan", "authors", ADAPTER, _st(_set(LORA_B, _nan)), ["lora_adapter", "lora_B", "NaN"]),
    (
        "adapter-shape",
        "authors",
        ADAPTER,
        _st(_set(LORA_B, lambda t: torch.zeros(2, 2))),
        ["lora_adapter", "shape mismatches"],
    ),
    (
        "adapter-extra",
        "authors",
        ADAPTER,
        _st(
            lambda d: d.update(
                {"base_model.model.model.language_model.layers.0.zzz.lora_X.weight": torch.zeros(1)}
            )
        ),
        ["lora_adapter", "zzz"],
    ),
    (
        "adapter-missing",
        "authors",
        ADAPTER,
        _st(lambda d: d.pop(LORA_B(d))),
        ["lora_adapter", "not in the file but trained"],
    ),
    ("own-nan", "own", OWN, _st(_set(OWN_LAYER, _nan)), [OWN, "backbone.", "NaN"]),
    (
        "own-inf-head",
        "own",
        OWN,
        _st(_set(lambda d: "score_head.0.bias", _inf)),
        [OWN, "score_head.0.bias", "infinite"],
    ),
    ("own-extra", "own", OWN, _st(lambda d: d.update({"payload.w": torch.zeros(1)})), [OWN, "payload.w"]),
    (
        "own-missing-lora",
        "own",
        OWN,
        _st(lambda d: d.pop(_first(d, lambda k: k.startswith("lora.")))),
        [OWN, "(lora)", "not in the file but trained"],
    ),
    (
        "own-shape-head",
        "own",
        OWN,
        _st(lambda d: d.update({"classification_head.2.weight": torch.zeros(4, 16)})),
        [OWN, "classification_head", "2.weight (4, 16)"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_faulty_tensors_are_refused_naming_file_and_tensor(case, folders, proc, tmp_path):
    _, layout, file, tamper, words = case
    folder = _copy(folders, layout, tmp_path)
    tamper(folder / file)
    with pytest.raises(InputError) as e:  # a damaged file is bad input: exit 2
        _load(folder, proc)
    msg = " ".join(str(e.value).split())
    for w in words:
        assert w in msg, (w, msg)
    assert str(folder) in msg  # the file is named with its path


def test_the_untampered_checkpoints_load(folders, proc):
    a, b = _load(folders / "own", proc), _load(folders / "authors", proc)
    assert a.load_report["lora"] == b.load_report["lora"] > 0


class _Payload:
    """A pickle that would create a marker file when unpickled with code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


@pytest.mark.parametrize("target", ["heads", "layers", "adapter_bin"])
def test_a_pickle_with_code_never_runs_and_gets_one_error_line(
    target, folders, proc, tmp_path, capsys, monkeypatch
):
    from conftest import tiny_provider

    from genmetrics.backbones.provider import use_provider

    folder = _copy(folders, "authors", tmp_path)
    marker = tmp_path / "PWNED"
    if target == "heads":
        d = torch.load(folder / "mie_heads.pt", weights_only=True)
        d["score_head"]["x"] = _Payload(marker)
        torch.save(d, folder / "mie_heads.pt")
        file, safe = "mie_heads.pt", "dict of tensors"
    elif target == "layers":
        torch.save({"w": _Payload(marker)}, folder / "trainable_backbone.pt")
        file, safe = "trainable_backbone.pt", "dict of tensors"
    else:
        ad = folder / "lora_adapter"
        (ad / "adapter_model.safetensors").unlink()
        torch.save({"w": _Payload(marker)}, ad / "adapter_model.bin")
        file, safe = "adapter_model.bin", "adapter_model.safetensors"
    pairs = tmp_path / "pairs.jsonl"
    from _data import write_pairs

    pairs = write_pairs(tmp_path / "data", 2)
    with use_provider(tiny_provider):
        rc = main(eval_argv(str(pairs), str(folder), str(tmp_path / "e")))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:"), err
    assert file in err[0] and safe in err[0] and "would run code" in err[0], err[0]
    assert "weights_only=False" not in err[0]  # never torch's advice to load it with code
    assert not marker.exists()


def test_heads_takes_a_training_run_folder(tmp_path, pairs_file, proc, capsys, provider):
    """`train mie --out RUN` then `--heads RUN`: the run's best/ checkpoint (else final/), as the hint says."""
    import genmetrics as gm
    from genmetrics.mie.checkpoint import resolve_heads

    run = tmp_path / "run"
    rc = main(train_argv(pairs_file, run, "--subset", "4", "--val-fraction", "0.5"))
    assert rc == 0, capsys.readouterr().err
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resolve_heads(run) == pathlib.Path(res["checkpoint"]) == run / "best"
    rc = main(eval_argv(str(pairs_file), str(run), str(tmp_path / "e")))
    assert rc == 0, capsys.readouterr().err
    assert gm.create_metric("mie", heads=str(run)).mie_model().load_report["backbone"] > 0
    shutil.rmtree(run / "best")
    assert resolve_heads(run) == run / "final"
    # an unfinished run (only the trainer's own checkpoints): say how to finish it
    shutil.rmtree(run / "final")
    (run / "checkpoints" / "step-1").mkdir(parents=True, exist_ok=True)
    rc = main(eval_argv(str(pairs_file), str(run), str(tmp_path / "f")))
    err = capsys.readouterr().err
    assert rc == 1 and "unfinished training run" in err and "--resume" in err


def test_a_local_backbone_is_found_from_another_working_folder(
    tmp_path, pairs_file, proc, monkeypatch, capsys
):
    """A run trained on a local backbone folder given relative to the working folder records it absolute and
    loads from elsewhere; a checkpoint naming a folder next to itself finds it; a missing folder is one error
    naming where it looked."""
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel
    from genmetrics.mie.train import train_mie

    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    tiny_backbone(0).save_pretrained(work / "models" / "vlm")
    proc.save_pretrained(work / "models" / "vlm")
    monkeypatch.chdir(work)
    train_mie(
        data=str(pairs_file),
        out="run",
        backbone="models/vlm",
        unfreeze_layers=1,
        subset=2,
        val_fraction=0.0,
        epochs=1,
        batch_pairs=2,
        grad_accum=1,
        progress=False,
        save_every=None,
    )
    cfg = json.loads((work / "run" / "final" / "mie_config.json").read_text())
    assert cfg["base_model_name"] == str((work / "models" / "vlm").resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    ckpt = work / "run" / "final"
    ref = MIEModel.from_pretrained(ckpt, tiny_backbone(0), proc).score_head[0].weight
    assert torch.equal(MIEModel.from_pretrained(ckpt).score_head[0].weight, ref)
    # an older checkpoint naming its backbone relative to itself
    shutil.copytree(work / "models" / "vlm", ckpt / "vlm")
    cfg["base_model_name"] = "vlm"
    (ckpt / "mie_config.json").write_text(json.dumps(cfg))
    assert MIEModel.from_pretrained(ckpt).load_report["backbone"] > 0
    cfg["base_model_name"] = "./models/vlm"  # relative to a working folder we are not in
    (ckpt / "mie_config.json").write_text(json.dumps(cfg))
    capsys.readouterr()  # the progress lines of the loads above
    rc = main(["evaluate-human", "mie", "--data", str(pairs_file), "--heads", str(ckpt), "--out", "e"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert str(elsewhere / "models" / "vlm") in err[0] and str(ckpt / "models" / "vlm") in err[0], err[0]
    assert os.getcwd() == str(elsewhere)
