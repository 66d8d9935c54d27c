"""The catalogue of bad inputs: each case says what is fed in, which error (or clean handling) is expected,
and the message fragment users will see. ``docs/errors.md`` lists the same ids.

``api(ws)`` runs the Python API on the workspace ``ws`` (a folder of prepared files, see ``make_workspace``);
``cli(ws)`` returns the argv of the equivalent command. ``error=None`` means the input is handled cleanly
by a documented rule (no error).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.errors import InputError, MissingDependencyError, WeightsUnavailableError
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
    env: dict[str, str] | None = None  # environment variables set while the CLI runs
    #: optional modules the case needs (an extra): absent, the case skips and says which extra installs it
    needs: tuple[str, ...] = ()


#: the extra that installs each optional module a case may need (pyproject.toml's optional-dependencies)
EXTRAS = {"faiss": "retrieval"}


def skip_without_needs(case: Case) -> None:
    """Skip ``case`` (pytest.importorskip) when a module it needs is not installed, naming the extra."""
    for module in case.needs:
        pytest.importorskip(module, reason=f"needs the [{EXTRAS[module]}] extra ({module} is not installed)")


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
        Image.fromarray(np.clip(arr.astype(int) + 9, 0, 255).astype(np.uint8)).save(
            root / "gen" / f"s{i}.png"
        )
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
    good = {
        "id": "a",
        "images": ["ref/s0.png", "ref/s1.png", "ref/s2.png"],
        "aspect": "color",
        "votes": [1, 2, 0],
    }
    (root / "bad_json.jsonl").write_text(json.dumps(good) + "\n{oops\n")
    (root / "missing_key.jsonl").write_text(
        json.dumps({k: v for k, v in good.items() if k != "votes"}) + "\n"
    )
    (root / "wrong_type.jsonl").write_text(json.dumps({**good, "votes": "1,2,0"}) + "\n")
    (root / "zero_votes.jsonl").write_text(json.dumps({**good, "votes": [0, 0, 0]}) + "\n")
    (root / "ckpt_corrupt.safetensors").write_bytes(b"\x00\x01garbage")

    # a pickled object: torch.load(weights_only=True) must refuse it
    torch.save({"w": torch.zeros(2), "obj": Payload()}, root / "pickled.pt")
    torch.save({"w": torch.zeros(2)}, root / "plain.pt")
    _deep_files(root)
    _stem_folders(root)
    _leaderboard_files(root)
    return root


def _deep_files(root: Path) -> None:
    """Files whose sample type decides the conversion."""
    Image.fromarray(np.full((24, 24), 1.01, np.float32)).save(root / "float_101.tif")
    Image.fromarray(np.full((24, 24), 0.5, np.float32)).save(root / "float_half.tif")
    Image.fromarray(np.full((24, 24), 200.0, np.float32)).save(root / "float_255.tif")
    Image.fromarray(np.full((24, 24), np.nan, np.float32)).save(root / "float_nan.tif")
    Image.fromarray(np.full((24, 24), 2**31 - 1, np.int32)).save(root / "int32_full.tif")
    Image.fromarray(np.full((24, 24), 2**30, np.int32)).save(root / "int32_half.tif")
    Image.fromarray(np.full((24, 24), -5, np.int32)).save(root / "int32_negative.tif")
    Image.fromarray(np.full((24, 24), 65535, np.uint16)).save(root / "deep16.tif")
    frames = [Image.new("RGB", (24, 24), (60 * i, 0, 0)) for i in range(3)]
    frames[0].save(root / "animated.gif", save_all=True, append_images=frames[1:])
    frames[0].save(root / "pages.tif", save_all=True, append_images=frames[1:])
    frames[0].save(root / "animated.webp", save_all=True, append_images=frames[1:])


def _stem_folders(root: Path) -> None:
    """Two files with one stem on either side, and references no candidate uses."""
    src = root / "ref"
    for d in ("dupstem", "refs_extra"):
        (root / d).mkdir()
        for f in src.iterdir():
            (root / d / f.name).write_bytes(f.read_bytes())
    Image.open(src / "s0.png").save(root / "dupstem" / "s0.jpg")
    Image.open(src / "s0.png").save(root / "refs_extra" / "s9.png")
    (root / "scores_text.jsonl").write_text('{"generators":["a","b"],"scores":{"mie":["nan",0.5]}}\n')
    (root / "scores_nan.jsonl").write_text(
        '{"generators":["a","b"],"scores":{"mie":[1.0,NaN]}}\n{"generators":["a","b"],"scores":{"mie":[1.0,0.5]}}\n'
        '{"generators":["b","a"],"scores":{"mie":[0.7,0.2]}}\n'
    )


LB = """[data]
references = "ref"

[run]
n_boot = 50

[[generators]]
name = "g"
images = "gen"

[[metrics]]
name = "psnr"
"""


def _leaderboard_files(root: Path) -> None:
    (root / "lb.toml").write_text(LB)
    (root / "lb_bom_crlf.toml").write_bytes(b"\xef\xbb\xbf" + LB.replace("\n", "\r\n").encode())
    (root / "lb_latin1.toml").write_bytes(LB.replace('"g"', '"g\xe9"').encode("latin-1"))
    (root / "lb_tilde.toml").write_text(LB.replace('images = "gen"', 'images = "~nosuchuser_gm/gen"'))
    (root / "lb_nboot.toml").write_text(LB.replace("n_boot = 50", "n_boot = 100000000"))
    (root / "lb_ci.toml").write_text(LB.replace("n_boot = 50", "ci = 1.0"))
    (root / "lb_maxdb.toml").write_text(LB + "max_db = -3\n")


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


@contextlib.contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _with_env(values: dict[str, str], fn: Callable[[], Any]) -> Any:
    with _env(**values):
        return fn()


def _pixels(ws: Path, name: str, expect: float, warns: str | None = None) -> None:
    """A documented conversion: the file reads as the uniform gray ``expect`` (0..255), within rounding."""
    import warnings

    from genmetrics.data.io.images import load_image

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        arr = np.asarray(load_image(ws / name), dtype=np.float64)
    assert abs(arr.mean() - expect) <= 1.0, (name, arr.mean(), expect)
    if warns is not None:
        assert any(warns in str(x.message) for x in w), [str(x.message) for x in w]


def _lb(ws: Path, config: str = "lb.toml", out: str = "lb_out", **kw: Any) -> Any:
    from genmetrics.leaderboard import run_leaderboard

    return run_leaderboard(ws / config, ws / out, plots=False, **kw)


def _damaged(ws: Path, tag: str, damage: Callable[[Path], None]) -> Path:
    """A finished leaderboard run in ``ws/resume_<tag>`` with ``damage`` applied to its folder."""
    out = ws / f"resume_{tag}"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    _lb(ws, out=out.name)
    damage(out)
    return out


def _add_row(row: str) -> Callable[[Path], None]:
    def damage(out: Path) -> None:
        with open(out / "results.jsonl", "a", encoding="utf-8") as f:
            f.write(row + "\n")

    return damage


def _resume_api(ws: Path, tag: str, damage: Callable[[Path], None], config: str = "lb.toml") -> Any:
    out = _damaged(ws, tag + "_api", damage)
    return _lb(ws, config=config, out=out.name, resume=True)


def _resume_cli(ws: Path, tag: str, damage: Callable[[Path], None], config: str = "lb.toml") -> list[str]:
    out = _damaged(ws, tag + "_cli", damage)
    return ["leaderboard", str(ws / config), "--out", str(out), "--resume", "--no-plots"]


def _swap_same_size(out: Path) -> None:
    """Replace gen/s1.png by other pixels of the same byte size is not possible with PNG; change content and
    keep the name (the size check of the old resume would pass whenever sizes happen to agree)."""
    p = out.parent / "gen" / "s1.png"
    arr = np.asarray(Image.open(p)).copy()
    arr[0, 0] ^= 0xFF
    Image.fromarray(arr).save(p)


def _rescored(ws: Path) -> None:
    out = _damaged(ws, "swap", lambda o: None)
    before = {r["id"]: r["score"] for r in _read(out)}
    _swap_same_size(out)
    res = _lb(ws, out=out.name, resume=True)
    assert res.scored == 1, res.scored
    after = {r["id"]: r["score"] for r in _read(out)}
    assert after["s1"] != before["s1"] and after["s0"] == before["s0"]


def _read(out: Path) -> list[dict]:
    from genmetrics.data.output.rows import read_results

    return read_results(out / "results.jsonl")


def _locked(ws: Path, cli: bool = False) -> Any:
    from genmetrics.data.output.lock import OutputLock

    out = ws / ("locked_cli" if cli else "locked_api")
    out.mkdir(exist_ok=True)
    _LOCKS.append(OutputLock(out))  # held until the test process ends: stands for a run in progress
    if cli:
        return ["leaderboard", str(ws / "lb.toml"), "--out", str(out), "--no-plots"]
    return _lb(ws, out=out.name)


_LOCKS: list[Any] = []


def _rank(sa: list[float], sb: list[float], **kw: Any) -> Any:
    from genmetrics.mie.ranking import rank_generators

    return rank_generators(["a", "b", "a"], ["b", "a", "b"], sa, sb, **{"n_boot": 20, **kw})


def _rank_skip() -> None:
    import warnings

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        r = _rank([1.0, float("nan"), 0.3], [0.5, 0.2, 0.9], on_error="skip")
    assert r["skipped_pairs"] == [1] and r["n_pairs"] == 2


def _boot(**kw: Any) -> Any:
    from genmetrics.functional.bootstrap import bootstrap_ci

    return bootstrap_ci([1.0, 2.0, 3.0], **kw)


def _clip_spec(spec: str) -> Any:
    from genmetrics.backbones.openclip import parse_clip_weights

    return parse_clip_weights(spec)


def _abs_path_kept() -> None:
    w = _clip_spec("ViT-B-32:/models/clip/ckpt.safetensors")
    assert w.pretrained == "/models/clip/ckpt.safetensors", w


def _resolve(path: str) -> Any:
    from genmetrics.backbones.hf import _resolve as resolve

    return resolve(path, marker="adapter_config.json", local_files_only=True, revision=None)


def _check_row(row: dict, fragment: str) -> None:
    from genmetrics.data.output.rows import check_result_row

    why = check_result_row(row)
    assert why is not None and fragment in why, why


def _readonly_cache(ws: Path) -> None:
    import warnings

    from genmetrics.data.caches.features import FeatureCache

    (ws / "not_a_folder").write_text("x")
    cache = FeatureCache("m", root=ws / "not_a_folder")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cache.put(b"img", {"f": torch.zeros(2)})
        cache.put(b"img2", {"f": torch.zeros(2)})
    assert cache.read_only and len(w) == 1 and "cache_dir=None" in str(w[0].message)


X = torch.rand(2, 3, 16, 16)
CASES: list[Case] = [
    # ---- tensors
    Case(
        "tensor-rank",
        "a tensor of rank 5",
        InputError,
        "expected a tensor [B,3,H,W]",
        api=lambda ws: _psnr(X, torch.rand(2, 3, 16, 16, 1)),
    ),
    Case(
        "tensor-channels",
        "4 channels (RGBA tensor)",
        InputError,
        "expected 3 channels",
        api=lambda ws: _psnr(X, torch.rand(2, 4, 16, 16)),
    ),
    Case(
        "tensor-channels-last",
        "channels-last [H,W,3] tensors",
        InputError,
        "channels-last",
        api=lambda ws: _psnr(X, torch.rand(2, 16, 16, 3)),
    ),
    Case(
        "tensor-dtype",
        "an int32 tensor",
        InputError,
        "unsupported dtype",
        api=lambda ws: _psnr(X, torch.zeros(2, 3, 16, 16, dtype=torch.int32)),
    ),
    Case(
        "tensor-uint16",
        "a uint16 tensor",
        InputError,
        "65535",
        api=lambda ws: _psnr(X, torch.zeros(2, 3, 16, 16, dtype=torch.uint16)),
    ),
    Case(
        "tensor-nan",
        "NaN values",
        InputError,
        "NaN",
        api=lambda ws: _psnr(X, torch.full((2, 3, 16, 16), float("nan"))),
    ),
    Case(
        "tensor-inf",
        "infinite values",
        InputError,
        "infinite",
        api=lambda ws: _psnr(X, torch.full((2, 3, 16, 16), float("inf"))),
    ),
    Case(
        "tensor-range-signed",
        "floats in [-1,1]",
        InputError,
        "(x + 1) / 2",
        api=lambda ws: _psnr(X, X * 2 - 1),
    ),
    Case(
        "tensor-range-255",
        "floats in 0..255 without data_range",
        InputError,
        "data_range=255",
        api=lambda ws: _psnr(X, X * 255),
    ),
    Case(
        "numpy-array",
        "a numpy array",
        InputError,
        "numpy arrays are not accepted",
        api=lambda ws: _psnr([np.zeros((16, 16, 3), np.uint8)], [np.zeros((16, 16, 3), np.uint8)]),
    ),
    Case("empty-batch", "an empty list of images", InputError, "empty", api=lambda ws: _psnr([], [])),
    # ---- files
    Case(
        "file-grayscale",
        "a grayscale file (converted: channel replicated)",
        None,
        "",
        api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "gray.png")),
        cli=lambda ws: _one_file(ws, "gray.png"),
    ),
    Case(
        "file-palette",
        "a palette file (converted to RGB)",
        None,
        "",
        api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "palette.png")),
        cli=lambda ws: _one_file(ws, "palette.png"),
    ),
    Case(
        "file-cmyk",
        "a CMYK JPEG (converted to RGB)",
        None,
        "",
        api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "cmyk.jpg")),
        cli=lambda ws: _one_file(ws, "cmyk.jpg"),
    ),
    Case(
        "file-rgba",
        "an RGBA file (alpha composited on white)",
        None,
        "",
        api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "rgba.png")),
        cli=lambda ws: _one_file(ws, "rgba.png"),
    ),
    Case(
        "file-16bit",
        "a 16-bit PNG (scaled by 1/257 to 8 bits)",
        None,
        "",
        api=lambda ws: _ok_or_raise(lambda: _file_vs_ref(ws, "deep16.png")),
        cli=lambda ws: _one_file(ws, "deep16.png"),
    ),
    Case(
        "file-corrupt",
        "a corrupt PNG",
        InputError,
        "corrupt.png",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "corrupt.png"]),
        cli=lambda ws: [
            "score",
            "psnr",
            "--reference",
            str(ws / "ref" / "s0.png"),
            "--candidates",
            str(ws / "corrupt.png"),
        ],
    ),
    Case(
        "file-truncated",
        "a truncated JPEG",
        InputError,
        "truncated.jpg",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "truncated.jpg"]),
        cli=lambda ws: [
            "score",
            "psnr",
            "--reference",
            str(ws / "ref" / "s0.png"),
            "--candidates",
            str(ws / "truncated.jpg"),
        ],
    ),
    Case(
        "file-text-as-jpg",
        "a text file named .jpg",
        InputError,
        "not an image",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "text.jpg"]),
        cli=lambda ws: [
            "score",
            "psnr",
            "--reference",
            str(ws / "ref" / "s0.png"),
            "--candidates",
            str(ws / "text.jpg"),
        ],
    ),
    Case(
        "file-zero-size",
        "a 0-byte image file",
        InputError,
        "empty (0 bytes)",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "zero.png"]),
        cli=lambda ws: [
            "score",
            "psnr",
            "--reference",
            str(ws / "ref" / "s0.png"),
            "--candidates",
            str(ws / "zero.png"),
        ],
    ),
    Case(
        "file-bomb",
        "a decompression bomb (272M pixels)",
        InputError,
        "decompression-bomb",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "bomb.png"]),
        cli=lambda ws: [
            "score",
            "psnr",
            "--reference",
            str(ws / "ref" / "s0.png"),
            "--candidates",
            str(ws / "bomb.png"),
        ],
    ),
    Case(
        "path-missing",
        "a path that does not exist",
        InputError,
        "does not exist",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "nope.png"]),
        cli=lambda ws: _score("psnr", ws, "nope"),
    ),
    Case(
        "folder-empty",
        "an empty folder",
        InputError,
        "contains no images",
        cli=lambda ws: _score("psnr", ws, "empty"),
    ),
    Case(
        "folder-mixed-sizes",
        "a folder of mixed sizes against same-size references (pixel metric)",
        InputError,
        "differs from its reference",
        api=lambda ws: _psnr(sorted((ws / "ref").iterdir()), sorted((ws / "mixed").iterdir())),
        cli=lambda ws: _score("psnr", ws, "mixed"),
    ),
    Case(
        "folder-mixed-sizes-resized",
        "mixed sizes with a resizing metric (clip_i: the model's resize policy)",
        None,
        "",
        api=lambda ws: _ok_or_raise(
            lambda: _clip_i(sorted((ws / "ref").iterdir()), sorted((ws / "mixed").iterdir()))
        ),
    ),
    Case(
        "folder-bad-file-stop",
        "a bad file among good ones (default --on-error stop)",
        InputError,
        "s9.png",
        cli=lambda ws: _score("psnr", ws, "bad_in_good", "bad_in_good"),
    ),
    Case(
        "folder-bad-file-skip",
        "a bad file among good ones with --on-error skip: reported, the rest scored",
        None,
        "n=3",
        cli=lambda ws: _score("psnr", ws, "bad_in_good", "bad_in_good", "--on-error", "skip"),
        exit_code=0,
    ),
    # ---- text
    Case(
        "condition-empty",
        "an empty condition",
        InputError,
        "empty or whitespace",
        api=lambda ws: _clip_t(random_images(1), [""]),
    ),
    Case(
        "condition-whitespace",
        "a whitespace-only condition",
        InputError,
        "empty or whitespace",
        api=lambda ws: _clip_t(random_images(1), ["   "]),
        cli=lambda ws: ["score", "clip_t", "--candidates", str(ws / "gen"), "--condition", "  "],
    ),
    Case(
        "condition-not-text",
        "a condition that is not a string",
        InputError,
        "expected a string",
        api=lambda ws: _clip_t(random_images(1), [3]),
    ),
    Case(
        "lengths-mismatch",
        "mismatched list lengths",
        InputError,
        "mismatched input lengths",
        api=lambda ws: _psnr(random_images(2), random_images(3)),
    ),
    Case(
        "condition-count",
        "a condition count that matches neither 1 nor the candidates",
        InputError,
        "got 2 texts for 3",
        cli=lambda ws: [
            "score",
            "clip_t",
            "--candidates",
            str(ws / "gen"),
            "--condition",
            "a",
            "--condition",
            "b",
        ],
    ),
    # ---- attributes (raclip)
    Case(
        "attributes-empty",
        "an empty attribute list",
        InputError,
        "attribute",
        api=lambda ws: _raclip(attributes=[]),
    ),
    Case(
        "attributes-duplicate",
        "duplicate attributes",
        InputError,
        "duplicate",
        api=lambda ws: _raclip(attributes=["smiling", "male", "smiling"]),
    ),
    # ---- names and options
    Case(
        "metric-unknown",
        "an unknown metric name",
        ValueError,
        "did you mean 'psnr'",
        api=lambda ws: gm.create_metric("psnrr"),
        cli=lambda ws: ["info", "psnrr"],
    ),
    Case(
        "option-unknown",
        "an unknown option",
        ValueError,
        "unknown option 'max_dbb'",
        api=lambda ws: gm.create_metric("psnr", max_dbb=3),
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--option", "max_dbb=3"),
    ),
    Case(
        "option-bad-value",
        "an invalid option value",
        InputError,
        "batch_size",
        api=lambda ws: gm.create_metric("psnr", batch_size=-1),
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--batch-size", "0"),
    ),
    Case(
        "compute-before-update",
        "compute() before any update()",
        InputError,
        "before any update",
        api=lambda ws: gm.create_metric("psnr").compute(),
    ),
    # ---- JSONL
    Case(
        "jsonl-bad-json",
        "malformed JSON on a line",
        InputError,
        "bad_json.jsonl:2",
        api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(
            ws / "bad_json.jsonl"
        ),
    ),
    Case(
        "jsonl-missing-key",
        "a record without a required key",
        InputError,
        "missing key 'votes'",
        api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(
            ws / "missing_key.jsonl"
        ),
    ),
    Case(
        "jsonl-wrong-type",
        "a key of the wrong type",
        InputError,
        "should be list",
        api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(
            ws / "wrong_type.jsonl"
        ),
    ),
    Case(
        "jsonl-zero-votes",
        "votes summing to zero",
        InputError,
        "sums to zero",
        api=lambda ws: __import__("genmetrics.data.jsonl", fromlist=["x"]).load_odd_one_out(
            ws / "zero_votes.jsonl"
        ),
    ),
    # ---- weights and checkpoints
    Case(
        "checkpoint-missing",
        "a checkpoint path that does not exist",
        WeightsUnavailableError,
        "not available",
        api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(
            ws / "none.safetensors"
        ),
    ),
    Case(
        "checkpoint-corrupt",
        "a corrupt safetensors checkpoint",
        InputError,
        "corrupt",
        api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(
            ws / "ckpt_corrupt.safetensors"
        ),
    ),
    Case(
        "checkpoint-pickle",
        "a pickled object in a .pt checkpoint",
        InputError,
        "never arbitrary pickles",
        api=lambda ws: __import__("genmetrics.backbones.weights", fromlist=["x"]).load_state_dict(
            ws / "pickled.pt"
        ),
    ),
    Case(
        "weights-offline",
        "default weights unavailable offline",
        WeightsUnavailableError,
        "not available",
        api=lambda ws: gm.create_metric("dino").compute(random_images(1), random_images(1)),
        cli=lambda ws: _score("dino", ws, "gen", "ref"),
        exit_code=1,
    ),
    Case(
        "weights-offline-clip",
        "default open_clip weights unavailable offline (set-level metric)",
        WeightsUnavailableError,
        "not available",
        api=lambda ws: gm.create_metric("clip_i").compute(random_images(1), random_images(1)),
        cli=lambda ws: _score("sad", ws, "gen", "ref", "--attributes", "celeba20"),
        exit_code=1,
    ),
    Case(
        "vlm-missing-path",
        "a VLM checkpoint folder that does not exist",
        WeightsUnavailableError,
        "not available",
        api=lambda ws: __import__("genmetrics.backbones.hf", fromlist=["x"]).load_vlm(str(ws / "no_model")),
    ),
    # ================= class 3: options and environment, checked at creation, named
    Case(
        "option-max-db-nan",
        "psnr max_db = nan",
        InputError,
        "option max_db",
        api=lambda ws: gm.create_metric("psnr", max_db=float("nan")),
    ),
    Case(
        "option-max-db-negative",
        "psnr max_db = -3",
        InputError,
        "option max_db",
        api=lambda ws: gm.create_metric("psnr", max_db=-3),
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--option", "max_db=-3"),
    ),
    Case(
        "option-parse-named",
        "an option value that is not a number (--option max_db=()",
        InputError,
        "option max_db: expected a finite number",
        api=lambda ws: gm.create_metric("psnr", max_db="("),
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--option", "max_db=("),
    ),
    Case(
        "option-max-db-bool",
        "psnr max_db = true",
        InputError,
        "option max_db",
        api=lambda ws: gm.create_metric("psnr", max_db=True),
    ),
    Case(
        "option-sigma-zero",
        "ssim sigma = 0",
        InputError,
        "option sigma",
        api=lambda ws: gm.create_metric("ssim", sigma=0),
    ),
    Case(
        "option-kernel-fraction",
        "ssim kernel_size = 7.5",
        InputError,
        "option kernel_size: expected an integer",
        api=lambda ws: gm.create_metric("ssim", kernel_size=7.5),
    ),
    Case(
        "option-betas-empty",
        "ms_ssim betas = []",
        InputError,
        "option betas",
        api=lambda ws: gm.create_metric("ms_ssim", betas=[]),
    ),
    Case(
        "option-betas-negative",
        "ms_ssim betas with a negative weight",
        InputError,
        "option betas[1]",
        api=lambda ws: gm.create_metric("ms_ssim", betas=[0.5, -1.0]),
    ),
    Case(
        "option-in-config-named",
        "a bad metric option in a leaderboard config (max_db = -3)",
        InputError,
        "lb_maxdb.toml",
        api=lambda ws: _lb(ws, config="lb_maxdb.toml"),
        cli=lambda ws: ["leaderboard", str(ws / "lb_maxdb.toml"), "--out", str(ws / "o_maxdb")],
    ),
    Case(
        "bootstrap-n-boot-zero",
        "bootstrap with n_boot = 0 (a zero-width interval)",
        ValueError,  # functional/ is pure math
        "option n_boot",
        api=lambda ws: _boot(n_boot=0),
    ),
    Case(
        "bootstrap-n-boot-huge",
        "bootstrap with n_boot = 1e8 (gigabytes of indices)",
        ValueError,  # functional/ is pure math
        "option n_boot: expected an integer in [1, 100000]",
        api=lambda ws: _boot(n_boot=10**8),
    ),
    Case(
        "bootstrap-alpha",
        "bootstrap with alpha = 1.5",
        ValueError,  # functional/ is pure math
        "option alpha",
        api=lambda ws: _boot(alpha=1.5),
    ),
    Case(
        "config-n-boot-huge",
        "run.n_boot = 1e8 in a leaderboard config",
        InputError,
        "run.n_boot",
        api=lambda ws: _lb(ws, config="lb_nboot.toml"),
        cli=lambda ws: ["leaderboard", str(ws / "lb_nboot.toml"), "--out", str(ws / "o_nboot")],
    ),
    Case("config-ci-one", "run.ci = 1.0", InputError, "run.ci", api=lambda ws: _lb(ws, config="lb_ci.toml")),
    Case(
        "template-two-slots",
        "a positive_template with two {} slots",
        InputError,
        "exactly 1 '{}'",
        api=lambda ws: _raclip(positive_template="a photo of {} {}"),
    ),
    Case(
        "template-named-field",
        "a template with a named field {attr}",
        InputError,
        "no other field",
        api=lambda ws: _raclip(positive_template="a photo of {attr}"),
    ),
    Case(
        "template-no-slot",
        "a template without a slot",
        InputError,
        "0 field(s)",
        api=lambda ws: _raclip(positive_template="a photo"),
    ),
    Case(
        "rank-n-boot-negative",
        "rank_generators n_boot = -1",
        InputError,
        "option n_boot",
        api=lambda ws: _rank([1.0, 0.0, 0.3], [0.0, 1.0, 0.2], n_boot=-1),
    ),
    Case(
        "rank-prior-nan",
        "rank_generators prior = nan",
        InputError,
        "option prior",
        api=lambda ws: _rank([1.0, 0.0, 0.3], [0.0, 1.0, 0.2], prior=float("nan")),
    ),
    Case(
        "device-gpu",
        "--device gpu (not a torch device)",
        InputError,
        "unknown device 'gpu'",
        api=lambda ws: gm.create_metric("psnr", device="gpu"),
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--device", "gpu"),
    ),
    Case(
        "env-max-pixels-text",
        "GENMETRICS_MAX_PIXELS=abc",
        InputError,
        "environment variable GENMETRICS_MAX_PIXELS",
        api=lambda ws: _with_env(
            {"GENMETRICS_MAX_PIXELS": "abc"}, lambda: _psnr([ws / "ref" / "s0.png"], [ws / "gen" / "s0.png"])
        ),
        cli=lambda ws: _score("psnr", ws, "gen", "ref"),
        env={"GENMETRICS_MAX_PIXELS": "abc"},
    ),
    Case(
        "env-max-pixels-zero",
        "GENMETRICS_MAX_PIXELS=0",
        InputError,
        "GENMETRICS_MAX_PIXELS",
        api=lambda ws: _with_env(
            {"GENMETRICS_MAX_PIXELS": "0"}, lambda: _psnr([ws / "ref" / "s0.png"], [ws / "gen" / "s0.png"])
        ),
    ),
    Case(
        "env-max-pixels-small",
        "GENMETRICS_MAX_PIXELS below the image size",
        InputError,
        "100 pixels (set GENMETRICS_MAX_PIXELS",
        api=lambda ws: _with_env(
            {"GENMETRICS_MAX_PIXELS": "100"}, lambda: _psnr([ws / "ref" / "s0.png"], [ws / "gen" / "s0.png"])
        ),
    ),
    Case(
        "env-offline-bad",
        "GENMETRICS_OFFLINE=maybe",
        InputError,
        "environment variable GENMETRICS_OFFLINE",
        api=lambda ws: _with_env(
            {"GENMETRICS_OFFLINE": "maybe"},
            __import__("genmetrics.backbones.weights", fromlist=["x"]).offline,
        ),
        cli=lambda ws: ["list"],
        env={"GENMETRICS_OFFLINE": "maybe"},
    ),
    Case(
        "env-progress-bad",
        "GENMETRICS_PROGRESS=maybe (expects 1/yes/true/on or 0/no/false/off)",
        InputError,
        "GENMETRICS_PROGRESS",
        cli=lambda ws: ["list"],
        env={"GENMETRICS_PROGRESS": "maybe"},
    ),
    Case(
        "env-home-unknown-user",
        "GENMETRICS_HOME=~nosuchuser_gm/cache",
        InputError,
        "names no user",
        api=lambda ws: _with_env(
            {"GENMETRICS_HOME": "~nosuchuser_gm/cache"},
            __import__("genmetrics.backbones.weights", fromlist=["x"]).genmetrics_home,
        ),
        cli=lambda ws: ["list"],
        env={"GENMETRICS_HOME": "~nosuchuser_gm/cache"},
    ),
    Case(
        "env-provider-bad",
        "GENMETRICS_BACKBONE_PROVIDER without module:function",
        InputError,
        "GENMETRICS_BACKBONE_PROVIDER",
        api=lambda ws: _with_env(
            {"GENMETRICS_BACKBONE_PROVIDER": "nomodule"},
            __import__("genmetrics.backbones.provider", fromlist=["x"]).current_provider,
        ),
    ),
    Case(
        "home-read-only-download",
        "GENMETRICS_HOME that cannot be written when weights must be downloaded",
        WeightsUnavailableError,
        "GENMETRICS_HOME is read-only?",
        api=lambda ws: _with_env(
            {"GENMETRICS_HOME": str(ws / "plain.pt" / "home")},
            lambda: __import__("genmetrics.backbones.hf", fromlist=["x"])._resolve(
                "org/model", marker="config.json", local_files_only=False, revision=None
            ),
        ),
    ),
    Case(
        "cache-read-only",
        "a feature cache folder that cannot be written: warned once, scoring goes on",
        None,
        "",
        api=_readonly_cache,
    ),
    # ================= class 4: paths
    Case(
        "weights-absolute-path",
        "MODEL:/absolute/ckpt keeps its leading '/'",
        None,
        "",
        api=lambda ws: _abs_path_kept(),
    ),
    Case(
        "weights-bare-checkpoint",
        "--weights /path/ckpt.pt without the open_clip architecture",
        InputError,
        "needs its architecture",
        api=lambda ws: _clip_spec(str(ws / "plain.pt")),
    ),
    Case(
        "weights-unknown-user",
        "an adapter path ~nosuchuser/x",
        InputError,
        "names no user",
        api=lambda ws: _resolve("~nosuchuser_gm/adapter"),
    ),
    Case(
        "adapter-relative-missing",
        "a relative adapter folder that does not exist (looked up locally, then hub)",
        WeightsUnavailableError,
        "(local folder: none)",
        api=lambda ws: _resolve("runs/adapter"),
    ),
    Case(
        "adapter-is-file",
        "an adapter path that is a file",
        WeightsUnavailableError,
        "folder",
        api=lambda ws: _resolve(str(ws / "plain.pt")),
    ),
    Case(
        "config-bom-crlf",
        "a TOML config saved with a byte-order mark and CRLF line ends",
        None,
        "",
        api=lambda ws: _lb(ws, config="lb_bom_crlf.toml", out="o_bom"),
        cli=lambda ws: [
            "leaderboard",
            str(ws / "lb_bom_crlf.toml"),
            "--out",
            str(ws / "o_bom_cli"),
            "--no-plots",
        ],
        exit_code=0,
    ),
    Case(
        "config-not-utf8",
        "a config saved as Latin-1",
        InputError,
        "not UTF-8",
        api=lambda ws: _lb(ws, config="lb_latin1.toml"),
    ),
    Case(
        "config-unknown-user",
        "images = '~nosuchuser/gen' in a config",
        InputError,
        "generators[0].images",
        api=lambda ws: _lb(ws, config="lb_tilde.toml"),
    ),
    Case(
        "candidates-share-stem",
        "candidates s0.png and s0.jpg (a stray copy)",
        InputError,
        "--candidates: two images share the stem 's0'",
        cli=lambda ws: _score("psnr", ws, "dupstem", "ref"),
    ),
    Case(
        "references-share-stem",
        "references s0.png and s0.jpg",
        InputError,
        "--reference: two images share the stem",
        cli=lambda ws: _score("psnr", ws, "gen", "dupstem"),
    ),
    Case(
        "references-unused",
        "references without a candidate: scored, and the unused ones named",
        None,
        "1 reference image(s) have no candidate",
        cli=lambda ws: _score("psnr", ws, "gen", "refs_extra"),
        exit_code=0,
    ),
    Case(
        "stems-shared-rule",
        "match_by_stem refuses a shared stem on the candidate side as on the reference side",
        InputError,
        "candidates: two images share the stem",
        api=lambda ws: __import__("genmetrics.data.io.images", fromlist=["x"]).match_by_stem(
            sorted((ws / "ref").iterdir()), sorted((ws / "dupstem").iterdir())
        ),
    ),
    # ================= class 1: resume
    Case(
        "resume-manifest-missing",
        "--resume when manifest.json was deleted",
        InputError,
        "manifest.json is missing",
        api=lambda ws: _resume_api(ws, "nomanifest", lambda o: (o / "manifest.json").unlink()),
        cli=lambda ws: _resume_cli(ws, "nomanifest", lambda o: (o / "manifest.json").unlink()),
    ),
    Case(
        "resume-manifest-torn",
        "--resume with a torn manifest.json",
        InputError,
        "cannot be read",
        api=lambda ws: _resume_api(ws, "torn", lambda o: (o / "manifest.json").write_text('{"metrics": {')),
        cli=lambda ws: _resume_cli(ws, "torn", lambda o: (o / "manifest.json").write_text('{"metrics": {')),
    ),
    Case(
        "resume-manifest-foreign",
        "--resume with a manifest.json that is not a run manifest",
        InputError,
        "not a run manifest",
        api=lambda ws: _resume_api(ws, "foreign", lambda o: (o / "manifest.json").write_text("[]")),
    ),
    Case(
        "resume-row-list",
        "a results row that is a JSON list",
        InputError,
        "results.jsonl:4: not a result row",
        api=lambda ws: _resume_api(ws, "list", _add_row("[1, 2]")),
        cli=lambda ws: _resume_cli(ws, "list", _add_row("[1, 2]")),
    ),
    Case(
        "resume-row-empty",
        "an empty JSON object as a results row",
        InputError,
        "results.jsonl:4",
        api=lambda ws: _resume_api(ws, "empty", _add_row("{}")),
    ),
    Case(
        "resume-row-string-score",
        "a results row whose score is a string",
        InputError,
        "'score' should be a finite number",
        api=lambda ws: _resume_api(
            ws, "strscore", _add_row('{"generator":"g","metric":"psnr","id":"s0","score":"31"}')
        ),
    ),
    Case(
        "resume-row-unknown-generator",
        "a results row of a generator not in the config",
        InputError,
        "generator 'other' is not in the config",
        api=lambda ws: _resume_api(
            ws, "gen", _add_row('{"generator":"other","metric":"psnr","id":"s0","score":1}')
        ),
    ),
    Case(
        "resume-row-unknown-metric",
        "a results row of a metric not in the config",
        InputError,
        "metric column 'ssim' is not in the config",
        api=lambda ws: _resume_api(
            ws, "met", _add_row('{"generator":"g","metric":"ssim","id":"s0","score":1}')
        ),
    ),
    Case(
        "resume-row-corrupt-middle",
        "an unparsable line that is not the last one",
        InputError,
        "corrupt results line",
        api=lambda ws: _resume_api(
            ws,
            "corrupt",
            lambda o: (o / "results.jsonl").write_text("{oops\n" + (o / "results.jsonl").read_text()),
        ),
    ),
    Case(
        "resume-options-changed",
        "--resume with a metric option changed since",
        InputError,
        "configured differently",
        api=lambda ws: _resume_api(
            ws,
            "opts",
            lambda o: (ws / "lb_opts.toml").write_text(LB + "max_db = 50\n"),
            config="lb_opts.toml",
        ),
    ),
    Case(
        "resume-content-changed",
        "--resume after an image was rewritten under the same name: that row is rescored",
        None,
        "",
        api=_rescored,
    ),
    # ================= class 5: non-finite scores
    Case(
        "rank-nan-score",
        "a NaN score among the pairs to rank",
        InputError,
        "not finite",
        api=lambda ws: _rank([1.0, float("nan"), 0.3], [0.5, 0.2, 0.9]),
        cli=lambda ws: ["rank-generators", "--scores", str(ws / "scores_nan.jsonl"), "--n-boot", "20"],
    ),
    Case(
        "rank-inf-score",
        "an infinite score",
        InputError,
        "not finite",
        api=lambda ws: _rank([1.0, float("inf"), 0.3], [0.5, 0.2, 0.9]),
    ),
    Case(
        "rank-nan-skip",
        "a NaN score with on_error='skip': left out and reported",
        None,
        "left out",
        api=lambda ws: _rank_skip(),
        cli=lambda ws: [
            "rank-generators",
            "--scores",
            str(ws / "scores_nan.jsonl"),
            "--n-boot",
            "20",
            "--on-error",
            "skip",
        ],
        exit_code=0,
    ),
    Case(
        "rank-outcome-nan",
        "a NaN outcome",
        InputError,
        "outcome",
        api=lambda ws: __import__("genmetrics.mie.ranking", fromlist=["x"]).rank_generators(
            ["a", "b"], ["b", "a"], outcome=[1.0, float("nan")]
        ),
    ),
    Case(
        "result-row-nan",
        "a results row with a NaN score is not a result row",
        None,
        "",
        api=lambda ws: _check_row(
            {"generator": "g", "metric": "m", "id": "s", "score": float("nan")}, "finite"
        ),
    ),
    # ================= class 6: one writer per folder
    Case(
        "out-locked",
        "a second leaderboard run on a folder another run is writing",
        InputError,
        "is in use by another run",
        api=lambda ws: _locked(ws),
        cli=lambda ws: _locked(ws, cli=True),
    ),
    # ================= class 8: conversions decided by the declared sample type
    Case(
        "file-float-tiff-101",
        "a 32-bit float TIFF whose maximum is 1.01 (read as 0..1, clipped: white)",
        None,
        "",
        api=lambda ws: _pixels(ws, "float_101.tif", 255.0),
        cli=lambda ws: _one_file(ws, "float_101.tif"),
    ),
    Case(
        "file-float-tiff-half",
        "a 32-bit float TIFF of 0.5 (read as 0..1: mid gray)",
        None,
        "",
        api=lambda ws: _pixels(ws, "float_half.tif", 127.5),
    ),
    Case(
        "file-float-tiff-255",
        "a 32-bit float TIFF with values up to 200 (not 0..1)",
        InputError,
        "float images are read as 0..1",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "float_255.tif"]),
        cli=lambda ws: _one_file(ws, "float_255.tif"),
    ),
    Case(
        "file-float-tiff-nan",
        "a float TIFF holding NaN",
        InputError,
        "NaN",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "float_nan.tif"]),
    ),
    Case(
        "file-int32-full",
        "a full-range 32-bit integer TIFF (2**31-1 is white, no saturation below)",
        None,
        "",
        api=lambda ws: _pixels(ws, "int32_full.tif", 255.0),
        cli=lambda ws: _one_file(ws, "int32_full.tif"),
    ),
    Case(
        "file-int32-half",
        "a 32-bit integer TIFF at 2**30 (mid gray, not saturated)",
        None,
        "",
        api=lambda ws: _pixels(ws, "int32_half.tif", 127.5),
    ),
    Case(
        "file-int32-negative",
        "a 32-bit integer TIFF with negative values",
        InputError,
        "negative values",
        api=lambda ws: _psnr([ws / "ref" / "s0.png"], [ws / "int32_negative.tif"]),
    ),
    Case(
        "file-16bit-tiff",
        "a 16-bit TIFF at 65535 (white)",
        None,
        "",
        api=lambda ws: _pixels(ws, "deep16.tif", 255.0),
    ),
    Case(
        "file-animated-gif",
        "an animated GIF: the first frame, and a warning naming the dropped frames",
        None,
        "the other 2 are dropped",
        api=lambda ws: _pixels(ws, "animated.gif", 0.0, warns="3 frames"),
        cli=lambda ws: _one_file(ws, "animated.gif"),
        exit_code=0,
    ),
    Case(
        "file-multipage-tiff",
        "a multi-page TIFF: the first page, and a warning",
        None,
        "3 pages",
        api=lambda ws: _pixels(ws, "pages.tif", 0.0, warns="3 pages"),
        cli=lambda ws: _one_file(ws, "pages.tif"),
        exit_code=0,
    ),
    Case(
        "file-animated-webp",
        "an animated WebP: the first frame, and a warning",
        None,
        "",
        api=lambda ws: _pixels(ws, "animated.webp", 0.0, warns="3 frames"),
    ),
]


# ================= class 7: training state (genmetrics.train, the loop behind `train tpips|mie`)
def _train(ws: Path, name: str, *, seed: int = 0, **cfg: Any) -> Any:
    """A tiny regression trained with the shared loop into ``ws/train/name``."""
    from genmetrics.train import TrainLoopConfig, TrainTask, fit

    class Regression(TrainTask):
        def __init__(self) -> None:
            torch.manual_seed(0)
            self.net = torch.nn.Linear(3, 1)

        def trainable_module(self) -> torch.nn.Module:
            return self.net

        def collate(self, examples: list) -> Any:
            return torch.stack([x for x, _ in examples]), torch.stack([y for _, y in examples])

        def loss(self, module: torch.nn.Module, batch: Any) -> Any:
            x, y = batch
            return ((module(x).squeeze(-1) - y) ** 2).mean(), {}

    xs = torch.randn(8, 3, generator=torch.Generator().manual_seed(seed))
    opts = {"lr": 0.05, "epochs": 2, "batch_size": 4, "warmup_ratio": 0.0, "progress": False, **cfg}
    return fit(Regression(), [(x, x.sum()) for x in xs], TrainLoopConfig(out_dir=ws / "train" / name, **opts))


def _train_twice(ws: Path, name: str, first: dict[str, Any], second: dict[str, Any]) -> Any:
    import shutil

    shutil.rmtree(ws / "train" / name, ignore_errors=True)
    _train(ws, name, **first)
    return _train(ws, name, **second)


def _unfinished_then(ws: Path, name: str, **second: Any) -> Any:
    """A run that stopped after its epoch-1 checkpoint (its finish marker removed), then ``second``."""
    import shutil

    shutil.rmtree(ws / "train" / name, ignore_errors=True)
    _train(ws, name)
    (ws / "train" / name / "train_result.json").unlink()
    for ck in (ws / "train" / name / "checkpoints").iterdir():
        if ck.name != "step-2":
            shutil.rmtree(ck)
    return _train(ws, name, **second)


def _without_faiss() -> Any:
    import sys

    from genmetrics.tpips.retrieval import _import_faiss

    saved = sys.modules.get("faiss")
    sys.modules["faiss"] = None  # type: ignore[assignment]
    try:
        return _import_faiss()
    finally:
        if saved is None:
            del sys.modules["faiss"]
        else:
            sys.modules["faiss"] = saved


CASES += [
    Case(
        "train-resume-lr-changed",
        "a training resume with another learning rate than the checkpoint's",
        InputError,
        "lr: 0.05 -> 0.1",
        api=lambda ws: _unfinished_then(ws, "lr", resume=True, lr=0.1),
    ),
    Case(
        "train-resume-data-changed",
        "a training resume on other data (same size)",
        InputError,
        "(the training examples changed)",
        api=lambda ws: _unfinished_then(ws, "data", resume=True, seed=1),
    ),
    Case(
        "train-resume-same",
        "a training resume with the same data and settings: continues from the checkpoint",
        None,
        "",
        api=lambda ws: _unfinished_then(ws, "same", resume=True),
    ),
    Case(
        "train-unfinished-no-resume",
        "training into a folder holding an unfinished run, without resume",
        InputError,
        "holds an unfinished run",
        api=lambda ws: _unfinished_then(ws, "unfinished"),
    ),
    Case(
        "train-finished-no-overwrite",
        "training into a folder holding a finished run, without overwrite",
        InputError,
        "holds a finished run",
        api=lambda ws: _train_twice(ws, "finished", {}, {}),
    ),
    Case(
        "train-finished-overwrite",
        "the same with overwrite=True (--overwrite): trained again",
        None,
        "",
        api=lambda ws: _train_twice(ws, "overwrite", {}, {"overwrite": True}),
    ),
    Case(
        "train-option-text",
        "a learning rate given as text",
        InputError,
        "option lr: expected a finite number",
        api=lambda ws: _train(ws, "text", lr="fast"),
    ),
    Case(
        "retrieval-no-faiss",
        "TPIPS retrieval without faiss installed",
        MissingDependencyError,
        "pip install 'genmetrics[retrieval]'",
        api=lambda ws: _without_faiss(),
    ),
]


# ================= new inputs of each class (a user's second try)
def _ids(ids: list[Any]) -> Any:
    m = gm.create_metric("psnr")
    m.update(reference=random_images(3, 24, seed=1), candidates=random_images(3, 24, seed=2), ids=ids)
    return m.per_sample()


def _failing_provider() -> Any:
    from genmetrics.backbones.provider import use_provider

    def provider(kind: str, weights: str, **options: Any) -> Any:
        raise TypeError("this provider is broken")

    with use_provider(provider):
        return gm.create_metric("clip_i").compute(random_images(2, 24, seed=1), random_images(2, 24, seed=2))


def _hash_cache(ws: Path, damage: str) -> Any:
    """A finished run whose ``.genmetrics.hashes.json`` is then damaged (torn) or unwritable (a folder):
    the resume only hashes again (and says so when it cannot keep the hashes); results are unchanged."""
    import shutil

    from genmetrics.leaderboard.runner import HASHES

    out = _damaged(ws, f"hashes_{damage}", lambda o: None)
    before = (out / "results.jsonl").read_bytes()
    cache = out / HASHES
    if damage == "torn":
        cache.write_text(cache.read_text()[:25])
    else:
        cache.unlink()
        cache.mkdir()
    res = _lb(ws, out=out.name, resume=True)
    assert res.scored == 0 and (out / "results.jsonl").read_bytes() == before
    if damage == "torn":
        shutil.rmtree(out)


def _unwritable_cache_cli(ws: Path) -> list[str]:
    from genmetrics.leaderboard.runner import HASHES

    out = _damaged(ws, "hashes_cli", lambda o: None)
    (out / HASHES).unlink()
    (out / HASHES).mkdir()
    return ["leaderboard", str(ws / "lb.toml"), "--out", str(out), "--resume", "--no-plots"]


def _broken_link(ws: Path) -> list[str]:
    link = ws / "broken_link.png"
    if not link.is_symlink():
        link.symlink_to(ws / "no_such_target.png")
    return ["score", "psnr", "--reference", str(ws / "ref" / "s0.png"), "--candidates", str(link)]


def _hidden_files(ws: Path) -> list[str]:
    folder = ws / "with_hidden"
    if not folder.exists():
        folder.mkdir()
        for f in (ws / "gen").iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        (folder / "._s0.png").write_bytes(b"macOS resource fork, not an image")
    return _score("psnr", ws, "with_hidden")


def _folder_with(ws: Path, name: str, plant) -> list[str]:
    folder = ws / name
    if not folder.exists():
        folder.mkdir()
        for f in (ws / "gen").iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        plant(folder)
    return _score("psnr", ws, name)


def _folder_broken_link(ws: Path) -> list[str]:
    return _folder_with(
        ws,
        "with_broken_link",
        lambda d: (d / "s0.png").unlink() or (d / "s0.png").symlink_to(ws / "gone.png"),
    )


def _folder_named_png(ws: Path) -> list[str]:
    return _folder_with(ws, "with_png_folder", lambda d: (d / "notes.png").mkdir())


def _compare_locked(ws: Path) -> list[str]:
    from genmetrics.data.output.lock import OutputLock

    out = ws / "compare_locked"
    out.mkdir(exist_ok=True)
    _LOCKS.append(OutputLock(out))  # held for the rest of the session: stands for a run in progress
    return [
        "compare",
        "--real",
        str(ws / "ref"),
        "--generated",
        str(ws / "gen"),
        "--attributes",
        "smiling, bangs",
        "--out",
        str(out),
        "--n-boot",
        "10",
    ]


def _index_locked(ws: Path) -> list[str]:
    from genmetrics.data.output.lock import OutputLock

    index = ws / "index_locked"
    index.mkdir(exist_ok=True)
    _LOCKS.append(OutputLock(index))  # held for the rest of the session: stands for a build in progress
    return ["retrieve", "index", "--images", str(ws / "gen"), "--index", str(index), "--aspect", "color"]


def _index_update_drops(ws: Path) -> None:
    import warnings

    from genmetrics.testing import tiny_backbones
    from genmetrics.tpips import AspectIndex, TPIPSModel

    backbone, processor = tiny_backbones("vlm", "Qwen/Qwen3-VL-Embedding-2B")
    model = TPIPSModel(backbone, processor, variant="late")
    AspectIndex.build(ws / "ref", ws / "reindexed", model, ["lighting"], progress=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        idx = AspectIndex.build(ws / "gen", ws / "reindexed", model, ["color"], progress=False)
    said = " ".join(str(w.message) for w in seen)
    assert "already exists; updating it drops" in said and "['lighting']" in said, said
    assert idx.build_report is not None and idx.build_report["dropped_aspects"] == ["lighting"]


def _exif_rotated(ws: Path) -> None:
    from genmetrics.data.io.images import load_image

    p = ws / "exif6.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display": stored 32 wide x 24 high, shown 24 wide x 32 high
    Image.new("RGB", (32, 24), (10, 200, 30)).save(p, exif=exif)
    assert load_image(p).size == (24, 32)


def _animated_png(ws: Path) -> None:
    frames = [Image.new("RGB", (24, 24), (60 * i, 0, 0)) for i in range(3)]
    frames[0].save(ws / "animated.png", save_all=True, append_images=frames[1:])
    _pixels(ws, "animated.png", 0.0, warns="3 frames")


CASES += [
    # class 2: ids that would only match by their text
    Case(
        "id-none",
        "an id that is None (it would become the text 'None')",
        InputError,
        "expected str or int sample ids, got NoneType",
        api=lambda ws: _ids(["a", None, "c"]),
    ),
    Case(
        "id-float",
        "float ids (1.0 would not match 1)",
        InputError,
        "expected str or int sample ids, got float",
        api=lambda ws: _ids([1.0, 2.0, 3.0]),
    ),
    # class 3: environment and plugins named
    Case(
        "env-home-is-file",
        "GENMETRICS_HOME pointing at a file",
        InputError,
        "environment variable GENMETRICS_HOME",
        api=lambda ws: _with_env(
            {"GENMETRICS_HOME": str(ws / "plain.pt")},
            lambda: __import__("genmetrics.core.options", fromlist=["env"]).env("GENMETRICS_HOME"),
        ),
    ),
    Case(
        "provider-raises",
        "a backbone provider that raises: named, no traceback",
        InputError,
        "backbone provider",
        api=lambda ws: _failing_provider(),
        cli=lambda ws: _score("clip_i", ws, "gen"),
        env={"GENMETRICS_BACKBONE_PROVIDER": "json:dumps"},
    ),
    # class 1: the persistent hash cache only saves reading
    Case(
        "resume-hash-cache-torn",
        "--resume with a torn .genmetrics.hashes.json: files are hashed again",
        None,
        "",
        api=lambda ws: _hash_cache(ws, "torn"),
    ),
    Case(
        "resume-hash-cache-unwritable",
        "--resume where the hash cache cannot be written: a warning, same results",
        None,
        "could not keep the input hashes",
        api=lambda ws: _hash_cache(ws, "folder"),
        cli=_unwritable_cache_cli,
        exit_code=0,
    ),
    # class 4: paths
    Case(
        "candidates-given-twice",
        "the same image through a folder and its own path",
        InputError,
        "is given twice",
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--candidates", str(ws / "gen" / "s0.png")),
    ),
    Case(
        "candidates-quoted-glob",
        "a quoted pattern 'gen/*.png' (not expanded by the shell)",
        InputError,
        "is not expanded here",
        cli=lambda ws: _score("psnr", ws, "gen/*.png"),
    ),
    Case(
        "candidates-broken-link",
        "a symbolic link whose target is gone",
        InputError,
        "broken symbolic link",
        cli=_broken_link,
    ),
    Case(
        "folder-hidden-files",
        "hidden files ('._s0.png') in an image folder: skipped with a warning",
        None,
        "1 hidden file(s) skipped",
        cli=_hidden_files,
        exit_code=0,
    ),
    Case(
        "folder-broken-link",
        "a symbolic link whose target is gone, inside a candidates folder: named (it was dropped without a word)",
        InputError,
        "broken symbolic link",
        cli=_folder_broken_link,
    ),
    Case(
        "folder-entry-named-like-image",
        "a folder named notes.png inside an image folder: skipped with a warning naming it",
        None,
        "not being files (first: notes.png)",
        cli=_folder_named_png,
        exit_code=0,
    ),
    # class 5/9: a score given as text
    Case(
        "rank-score-text",
        'rank-generators with a score written as the text "nan"',
        InputError,
        "should be two numbers",
        cli=lambda ws: [
            "rank-generators",
            "--scores",
            str(ws / "scores_text.jsonl"),
            "--metric",
            "mie",
            "--n-boot",
            "10",
        ],
    ),
    # class 6: every writer of an output folder takes its lock; score --out never overwrites an image
    Case(
        "compare-out-locked",
        "genmetrics compare on a folder another run is writing",
        InputError,
        "is in use by another run",
        cli=_compare_locked,
        env={"GENMETRICS_BACKBONE_PROVIDER": "genmetrics.testing:tiny_backbones"},
    ),
    Case(
        "index-locked",
        "genmetrics retrieve index into an index folder another build is writing",
        InputError,
        "choose another --index folder",
        cli=_index_locked,
        env={"GENMETRICS_BACKBONE_PROVIDER": "genmetrics.testing:tiny_backbones"},
    ),
    Case(
        "index-update-drops",
        "retrieve index into a folder holding an index of other images and aspects: "
        "a warning names what the update drops (images, aspects) and the build report counts it",
        None,
        "",
        api=_index_update_drops,
        needs=("faiss",),
    ),
    Case(
        "score-out-not-results",
        "genmetrics score --out result.png (an image name)",
        InputError,
        "expected a .jsonl file",
        cli=lambda ws: _score("psnr", ws, "gen", "ref", "--out", str(ws / "result.png")),
    ),
    # class 7: contradictory training flags
    Case(
        "train-resume-and-overwrite",
        "resume=True with overwrite=True (overwrite would delete what resume needs)",
        InputError,
        "contradict each other",
        api=lambda ws: _train(ws, "resume_overwrite", resume=True, overwrite=True),
    ),
    # class 8: rules by declared format
    Case(
        "file-exif-rotated",
        "a JPEG with EXIF orientation 6: shown upright (rotated), as a viewer shows it",
        None,
        "",
        api=_exif_rotated,
    ),
    Case(
        "file-animated-png",
        "an animated PNG (APNG): the first frame, and a warning naming the dropped frames",
        None,
        "",
        api=_animated_png,
    ),
]


def _retrieval_search(ws: Path, **kw: Any) -> Any:
    from genmetrics.testing import tiny_backbones
    from genmetrics.tpips import AspectIndex, TPIPSModel

    backbone, processor = tiny_backbones("vlm", "Qwen/Qwen3-VL-Embedding-2B")
    model = TPIPSModel(backbone, processor, variant="late")
    idx = AspectIndex.build(ws / "ref", ws / "retrieval_idx", model, ["lighting"])
    return idx.search(model, ws / "gen" / "s0.png", "lighting", k=2, **kw)


def _sheet(ws: Path, out: str) -> Any:
    from genmetrics.tpips.retrieval import Hit, contact_sheet

    hits = [
        Hit(rank=i + 1, index=i, path=str(ws / "ref" / f"s{i}.png"), score=1.0 - i / 10) for i in range(2)
    ]
    before = (ws / "ref" / "s1.png").read_bytes()
    try:
        return contact_sheet([(str(ws / "gen" / "s0.png"), "lighting")], hits, ws / out, thumb=32)
    finally:
        assert (ws / "ref" / "s1.png").read_bytes() == before  # an input image is never overwritten


CASES += [
    # class 5: a NaN option would reach the retrieval ranking
    Case(
        "retrieval-adjust-nan",
        "retrieval with adjust=nan (every score NaN, the order arbitrary)",
        InputError,
        "adjust: expected a finite number",
        api=lambda ws: _retrieval_search(ws, adjust=float("nan")),
        needs=("faiss",),
    ),
    # class 6: the contact sheet never overwrites what it shows
    Case(
        "retrieval-sheet-is-input",
        "--sheet naming one of the result images",
        InputError,
        "is one of the images it shows",
        api=lambda ws: _sheet(ws, "ref/s1.png"),
    ),
    Case(
        "retrieval-sheet-not-png",
        "--sheet sheet.txt (the sheet is a PNG)",
        InputError,
        "name it *.png",
        api=lambda ws: _sheet(ws, "sheet.txt"),
    ),
]


def _train_locked(ws: Path) -> Any:
    from genmetrics.data.output.lock import OutputLock

    out = ws / "train" / "locked"
    out.mkdir(parents=True, exist_ok=True)
    _LOCKS.append(OutputLock(out))  # another training run writing this folder
    return _train(ws, "locked")


CASES += [
    # class 6: training holds the output-folder lock too
    Case(
        "train-out-locked",
        "training into a folder another run is writing",
        InputError,
        "is in use by another run",
        api=_train_locked,
    ),
]
