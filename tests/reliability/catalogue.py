"""The catalogue of bad inputs: each case says what is fed in, which error (or clean handling) is expected,
and the message fragment users will see. ``docs/errors.md`` lists the same ids.

``api(ws)`` runs the Python API on the workspace ``ws`` (a folder of prepared files, see ``make_workspace``);
``cli(ws)`` returns the argv of the equivalent command. ``error=None`` means the input is handled cleanly
by a documented rule (no error).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.testing import random_images, tiny_clip


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    error: type[BaseException] | None
    fragment: str
    api: Callable[[Path], Any] | None = None
    cli: Callable[[Path], list[str]] | None = None
    exit_code: int = 2


class Payload:
    """Stands for an arbitrary pickled object in a checkpoint."""

    def __reduce__(self):
        return (print, ("a pickle payload ran",))


def make_workspace(root: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    for d in ("ref", "gen", "empty", "mixed", "bad_in_good"):
        (root / d).mkdir()
    for i in range(3):
        arr = torch.randint(0, 256, (24, 24, 3), generator=g, dtype=torch.uint8).numpy()
        Image.fromarray(arr).save(root / "ref" / f"s{i}.png")
        Image.fromarray(np.clip(arr.astype(int) + 9, 0, 255).astype(np.uint8)).save(root / "gen" / f"s{i}.png")
        Image.fromarray(arr).save(root / "bad_in_good" / f"s{i}.png")
        Image.fromarray(arr).resize((24 + 8 * i, 24)).save(root / "mixed" / f"s{i}.png")
    (root / "bad_in_good" / "s9.png").write_bytes(b"not a png at all")
    Image.new("L", (24, 24), 90).save(root / "gray.png")
    p = Image.new("P", (24, 24))
    p.putpalette([0, 128, 255] * 256)
    p.save(root / "palette.png")
    Image.new("CMYK", (24, 24), (10, 20, 30, 0)).save(root / "cmyk.jpg")
    Image.new("RGBA", (24, 24), (255, 0, 0, 128)).save(root / "rgba.png")
    Image.fromarray(np.full((24, 24), 40000, dtype=np.uint16)).save(root / "deep16.png")
    buf = io.BytesIO()
    Image.new("RGB", (24, 24), (5, 5, 5)).save(buf, "PNG")
    (root / "corrupt.png").write_bytes(buf.getvalue()[:30] + b"\x00" * 40 + buf.getvalue()[70:])
    buf = io.BytesIO()
    Image.fromarray(random_images(1, 64)[0].permute(1, 2, 0).numpy()).save(buf, "JPEG")
    (root / "truncated.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])
    (root / "text.jpg").write_text("this is a text file with an image extension")
    (root / "zero.png").write_bytes(b"")
    Image.new("1", (16500, 16500)).save(root / "bomb.png")  # 272M pixels, a few KB on disk
    good = {"id": "a", "images": ["ref/s0.png", "ref/s1.png", "ref/s2.png"], "aspect": "color", "votes": [1, 2, 0]}
    (root / "bad_json.jsonl").write_text(json.dumps(good) + "\n{oops\n")
    (root / "missing_key.jsonl").write_text(json.dumps({k: v for k, v in good.items() if k != "votes"}) + "\n")
    (root / "wrong_type.jsonl").write_text(json.dumps({**good, "votes": "1,2,0"}) + "\n")
    (root / "zero_votes.jsonl").write_text(json.dumps({**good, "votes": [0, 0, 0]}) + "\n")
    (root / "ckpt_corrupt.safetensors").write_bytes(b"\x00\x01garbage")

    # a pickled object: torch.load(weights_only=True) must refuse it
    torch.save({"w": torch.zeros(2), "obj": Payload()}, root / "pickled.pt")
    torch.save({"w": torch.zeros(2)}, root / "plain.pt")
    return root


def _psnr(ref: Any, cand: Any, **kw: Any) -> Any:
    return gm.create_metric("psnr", **kw).compute(ref, cand)


def _clip_i(ref: Any, cand: Any) -> Any:
    model, _ = tiny_clip()
    return gm.create_metric("clip_i", backbone=model).compute(ref, cand)


def _clip_t(cand: Any, cond: Any) -> Any:
    model, tok = tiny_clip()
    return gm.create_metric("clip_t", backbone=model, tokenizer=tok).compute(None, cand, cond)


def _score(name: str, ws: Path, cand: str, ref: str | None = "ref", *extra: str) -> list[str]:
    argv = ["score", name, "--candidates", str(ws / cand)]
    if ref:
        argv += ["--reference", str(ws / ref)]
    return argv + list(extra)


def _file_vs_ref(ws: Path, name: str) -> Any:
    return _clip_i([ws / "ref" / "s0.png"], [ws / name])


def _one_file(ws: Path, name: str) -> list[str]:
    return ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / name)]


def _raclip(**kw: Any) -> Any:
    model, tok = tiny_clip()
    return gm.create_metric("raclip", backbone=model, tokenizer=tok, **kw)


def _ok_or_raise(fn: Callable[[], Any]) -> Any:
    out = fn()
    if isinstance(out, torch.Tensor):
        assert torch.isfinite(out).all()
    return out


X = torch.rand(2, 3, 16, 16)
CASES: list[Case] = [
    # ---- tensors
    Case("tensor-rank", "a tensor of rank 5", InputError, "expected a tensor [B,3,H,W]",
         api=lambda ws: _psnr(X, torch.rand(2, 3, 16, 16, 1))),
    Case("tensor-channels", "4 channels (RGBA tensor)", InputError, "expected 3 channels",
         api=lambda ws: _psnr(X, torch.rand(2, 4, 16, 16))),
    Case("tensor-channels-last", "channels-last [H,W,3] tensors", InputError, "channels-last",
         api=lambda ws: _psnr(X, torch.rand(2, 16, 16, 3))),
    Case("tensor-dtype", "an int32 tensor", InputError, "unsupported dtype",
         api=lambda ws: _psnr(X, torch.zeros(2, 3, 16, 16, dtype=torch.int32))),
    Case("tensor-uint16", "a uint16 tensor", InputError, "65535",
         api=lambda ws: _psnr(X, torch.zeros(2, 3, 16, 16, dtype=torch.uint16))),
    Case("tensor-nan", "NaN values", InputError, "NaN",
         api=lambda ws: _psnr(X, torch.full((2, 3, 16, 16), float("nan")))),
    Case("tensor-inf", "infinite values", InputError, "infinite",
         api=lambda ws: _psnr(X, torch.full((2, 3, 16, 16), float("inf")))),
    Case("tensor-range-signed", "floats in [-1,1]", InputError, "(x + 1) / 2",
         api=lambda ws: _psnr(X, X * 2 - 1)),
    Case("tensor-range-255", "floats in 0..255 without data_range", InputError, "data_range=255",
         api=lambda ws: _psnr(X, X * 255)),
    Case("numpy-array", "a numpy array", InputError, "numpy arrays are not accepted",
         api=lambda ws: _psnr([np.zeros((16, 16, 3), np.uint8)], [np.zeros((16, 16, 3), np.uint8)])),
    Case("empty-batch", "an empty list of images", InputError, "empty",
         api=lambda ws: _psnr([], [])),
    # ---- files
    Case("file-grayscale", "a grayscale file (converted: channel replicated)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "gray.png")), cli=lambda ws: _one_file(ws, "gray.png")),
    Case("file-palette", "a palette file (converted to RGB)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "palette.png")), cli=lambda ws: _one_file(ws, "palette.png")),
    Case("file-cmyk", "a CMYK JPEG (converted to RGB)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "cmyk.jpg")), cli=lambda ws: _one_file(ws, "cmyk.jpg")),
    Case("file-rgba", "an RGBA file (alpha composited on white)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "rgba.png")), cli=lambda ws: _one_file(ws, "rgba.png")),
    Case("file-16bit", "a 16-bit PNG (scaled by 1/257 to 8 bits)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "deep16.png")), cli=lambda ws: _one_file(ws, "deep16.png")),
    Case("file-corrupt", "a corrupt PNG", InputError, "corrupt.png",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "corrupt.png"]),
         cli=lambda ws: ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / "corrupt.png")]),
    Case("file-truncated", "a truncated JPEG", InputError, "truncated.jpg",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "truncated.jpg"]),
         cli=lambda ws: ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / "truncated.jpg")]),
    Case("file-text-as-jpg", "a text file named .jpg", InputError, "not an image",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "text.jpg"]),
         cli=lambda ws: ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / "text.jpg")]),
    Case("file-zero-size", "a 0-byte image file", InputError, "empty (0 bytes)",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "zero.png"]),
         cli=lambda ws: ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / "zero.png")]),
    Case("file-bomb", "a decompression bomb (272M pixels)", InputError, "decompression-bomb",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "bomb.png"]),
         cli=lambda ws: ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(ws / "bomb.png")]),
    Case("path-missing", "a path that does not exist", InputError, "does not exist",
         api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "nope.png"]),
         cli=lambda ws: _score("psnr", ws, "nope")),
    Case("folder-empty", "an empty folder", InputError, "contains no images",
         cli=lambda ws: _score("psnr", ws, "empty")),
    Case("folder-mixed-sizes", "a folder of mixed sizes against same-size references (pixel metric)", InputError,
         "differs from its reference",
         api=lambda ws: _psnr(sorted((ws / "ref").iterdir()), sorted((ws / "mixed").iterdir())),
         cli=lambda ws: _score("psnr", ws, "mixed")),
    Case("folder-mixed-sizes-resized", "mixed sizes with a resizing metric (clip_i: the model's resize policy)", None, "",
         api=lambda ws: _ok_or_raise(lambda: _clip_i(sorted((ws / "ref").iterdir()), sorted((ws / "mixed").iterdir())))),
    Case("folder-bad-file-stop", "a bad file among good ones (default --on-error stop)", InputError, "s9.png",
         cli=lambda ws: _score("psnr", ws, "bad_in_good", "bad_in_good")),
    Case("folder-bad-file-skip", "a bad file among good ones with --on-error skip: reported, the rest scored", None,
         "n=3", cli=lambda ws: _score("psnr", ws, "bad_in_good", "bad_in_good", "--on-error", "skip"), exit_code=0),
    # ---- text
    Case("condition-empty", "an empty condition", InputError, "empty or whitespace",
         api=lambda ws: _clip_t(random_images(1), [""])),
    Case("condition-whitespace", "a whitespace-only condition", InputError, "empty or whitespace",
         api=lambda ws: _clip_t(random_images(1), ["   "]),
         cli=lambda ws: ["score", "clip_t", "--candidates", str(ws / "gen"), "--condition", "  "]),
    Case("condition-not-text", "a condition that is not a string", InputError, "expected a string",
         api=lambda ws: _clip_t(random_images(1), [3])),
    Case("lengths-mismatch", "mismatched list lengths", InputError, "mismatched input lengths",
         api=lambda ws: _psnr(random_images(2), random_images(3))),
    Case("condition-count", "a condition count that matches neither 1 nor the candidates", InputError, "got 2 texts for 3",
         cli=lambda ws: ["score", "clip_t", "--candidates", str(ws / "gen"), "--condition", "a", "--condition", "b"]),
    # ---- attributes (raclip)
    Case("attributes-empty", "an empty attribute list", InputError, "attribute",
         api=lambda ws: _raclip(attributes=[])),
    Case("attributes-duplicate", "duplicate attributes", InputError, "duplicate",
         api=lambda ws: _raclip(attributes=["smiling", "male", "smiling"])),
    # ---- names and options
    Case("metric-unknown", "an unknown metric name", ValueError, "did you mean 'psnr'",
         api=lambda ws: gm.create_metric("psnrr"), cli=lambda ws: ["info", "psnrr"]),
    Case("option-unknown", "an unknown option", ValueError, "unknown option 'max_dbb'",
         api=lambda ws: gm.create_metric("psnr", max_dbb=3),
         cli=lambda ws: _score("psnr", ws, "gen", "ref", "--option", "max_dbb=3")),
    Case("option-bad-value", "an invalid option value", InputError, "batch_size",
         api=lambda ws: gm.create_metric("psnr", batch_size=-1),
         cli=lambda ws: _score("psnr", ws, "gen", "ref", "--batch-size", "0")),
    Case("compute-before-update", "compute() before any update()", InputError, "before any update",
         api=lambda ws: gm.create_metric("psnr").compute()),
    # ---- JSONL
    Case("jsonl-bad-json", "malformed JSON on a line", InputError, "bad_json.jsonl:2",
         api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(ws / "bad_json.jsonl")),
    Case("jsonl-missing-key", "a record without a required key", InputError, "missing key 'votes'",
         api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(ws / "missing_key.jsonl")),
    Case("jsonl-wrong-type", "a key of the wrong type", InputError, "should be list",
         api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(ws / "wrong_type.jsonl")),
    Case("jsonl-zero-votes", "votes summing to zero", InputError, "sums to zero",
         api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(ws / "zero_votes.jsonl")),
    # ---- weights and checkpoints
    Case("checkpoint-missing", "a checkpoint path that does not exist", WeightsUnavailableError, "not available",
         api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(ws / "none.safetensors")),
    Case("checkpoint-corrupt", "a corrupt safetensors checkpoint", WeightsUnavailableError, "corrupt",
         api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(ws / "ckpt_corrupt.safetensors")),
    Case("checkpoint-pickle", "a pickled object in a .pt checkpoint", WeightsUnavailableError, "never arbitrary pickles",
         api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(ws / "pickled.pt")),
    Case("weights-offline", "default weights unavailable offline", WeightsUnavailableError, "not available",
         api=lambda ws: gm.create_metric("dino").compute(random_images(1), random_images(1)),
         cli=lambda ws: _score("dino", ws, "gen", "ref"), exit_code=1),
    Case("weights-offline-clip", "default open_clip weights unavailable offline (set-level metric)",
         WeightsUnavailableError, "not available",
         api=lambda ws: gm.create_metric("clip_i").compute(random_images(1), random_images(1)),
         cli=lambda ws: _score("sad", ws, "gen", "ref", "--attributes", "celeba20"), exit_code=1),
    Case("vlm-missing-path", "a VLM checkpoint folder that does not exist", WeightsUnavailableError, "not available",
         api=lambda ws: __import__("genmetrics.backbones.hf", fromlist=["x"]).load_vlm(str(ws / "no_model"))),
]
