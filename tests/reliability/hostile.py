"""Hostile and faulty inputs, second catalogue (none of these ids is in ``catalogue.py``).

Each case plants one fault in a fresh folder and runs genmetrics on it (the Python API and, where a command
exists, the CLI in-process through ``genmetrics.cli.main.main``; the non-UTF-8 case runs a real subprocess).
The harness in ``test_hostile.py`` checks the five guarantees of docs/errors.md ("Hostile inputs") around
every case:

- no code execution: a pickle payload would create ``ctx.marker``; it never exists afterwards;
- no write outside the output folder: the whole case folder except ``ctx.out`` (and folders a case names
  with ``ctx.allow``) is snapshot after set-up and compared after the run -- names, link targets, sizes,
  mtimes and SHA-256 of every file;
- no data loss / no silent wrong result / no raw traceback: asserted by the case itself (``ctx.refused``
  expects the documented error class and fragments; ``ctx.cli`` expects the exit code, exactly one
  ``error:`` line and no ``Traceback``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile
from safetensors.torch import load_file, save_file

from genmetrics.errors import GenmetricsError, InputError


# --------------------------------------------------------------------------------------------- harness
class Payload:
    """Unpickling this creates ``marker`` -- it stands for any code a crafted file could run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def snapshot(root: Path, skip: list[Path]) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed) except those under ``skip``: kind, link target,
    size, mtime and SHA-256."""
    out: dict[str, tuple] = {}
    skip_s = [str(s) for s in skip]
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if any(p == s or p.startswith(s + os.sep) for s in skip_s):
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                out[p] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[p] = ("dir",)
            else:
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[p] = ("file", st.st_size, st.st_mtime_ns, digest)
    return out


@dataclass
class Ctx:
    root: Path
    capsys: Any
    monkeypatch: Any
    allowed: list[Path] = field(default_factory=list)
    frozen: dict[str, tuple] | None = None

    def __post_init__(self) -> None:
        self.out = self.root / "out"
        self.inp = self.root / "in"
        self.inp.mkdir()
        self.outside_dir = self.root / "outside"
        self.outside_dir.mkdir()
        self.outside = self.outside_dir / "precious.txt"
        self.outside.write_bytes(b"user data genmetrics must never touch\n")
        self.marker = self.outside_dir / "PAYLOAD_RAN"
        self.allowed.append(self.out)

    def allow(self, p: Path) -> None:
        self.allowed.append(p)

    def freeze(self) -> None:
        """Call after set-up: from here on nothing outside ``out`` (and ``allow``-ed paths) may change."""
        self.frozen = snapshot(self.root, self.allowed)

    def payload(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(Payload(self.marker)))
        return path

    def refused(self, fn: Callable[[], Any], *fragments: str, exc: Any = GenmetricsError) -> str:
        with pytest.raises(exc) as e:
            fn()
        msg = str(e.value)
        for f in fragments:
            assert f in msg, (f, msg)
        return msg

    def cli(self, argv: list[str], code: int = 2, *fragments: str) -> str:
        from genmetrics.cli.main import main

        self.capsys.readouterr()
        rc = main(argv)
        out = self.capsys.readouterr()
        assert "Traceback" not in out.err + out.out, out.err
        assert rc == code, (rc, out.err)
        if code == 0:
            return out.out
        lines = [
            ln
            for ln in out.err.splitlines()
            if ln.strip() and not ln.startswith(("warning:", "note:", "WARNING", "ERROR:root"))
        ]
        assert len(lines) == 1 and lines[0].startswith("error: "), out.err
        for f in fragments:
            assert f in lines[0], (f, lines[0])
        return lines[0]


@dataclass(frozen=True)
class Hostile:
    id: str
    cls: str  # pickle | link | poison | fault | silent
    what: str
    run: Callable[[Ctx], None]
    cli: bool = False
    slow: bool = False
    xfail: str | None = None  # a bug found: strict xfail with this reason
    xfail_strict: bool = True


CASES: list[Hostile] = []


def case(id: str, cls: str, what: str, **kw: Any):
    def deco(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        CASES.append(Hostile(id, cls, what, fn, **kw))
        return fn

    return deco


# ---------------------------------------------------------------------------------------- shared set-ups
def _train_cfg(out: Path, **kw):
    from genmetrics.train import TrainLoopConfig

    base = dict(
        out_dir=out, lr=0.05, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0.0, seed=3, progress=False
    )
    return TrainLoopConfig(**{**base, **kw})


def _toy():
    from tests.train.toy import Toy, make_data

    return Toy, make_data


def killed_run(ctx: Ctx) -> Path:
    """A run in ``ctx.out`` killed in step 3, after the end-of-epoch checkpoint ``step-2``."""
    from genmetrics.train import fit

    Toy, make_data = _toy()
    with pytest.raises(KeyboardInterrupt):
        fit(Toy(kill_at=3), make_data(8), _train_cfg(ctx.out))
    return ctx.out / "checkpoints" / "step-2"


def resume(ctx: Ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    return fit(Toy(), make_data(8), _train_cfg(ctx.out, resume=True))


def _plant_link(link: Path, target: Path | str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(target), str(link))


def _images(folder: Path, n: int = 2, size: int = 16, seed: int = 0) -> Path:
    from genmetrics.testing import random_images, write_images

    write_images(folder, random_images(n, size, seed=seed))
    return folder


# ======================================================================== 1. pickles never run (pickle)
def _safe_loader_refuses(ctx: Ctx, name: str, save: Callable[[Path, Any], None]) -> None:
    from genmetrics.backbones.weights import load_state_dict

    p = ctx.inp / name
    save(p, {"w": torch.zeros(2), "obj": Payload(ctx.marker)})
    ctx.freeze()
    msg = ctx.refused(lambda: load_state_dict(p), str(p))
    assert "\n" not in msg and "safetensors" in msg


@case("h-pkl-zip-pt", "pickle", "load_state_dict: a torch.save zip .pt holding an object")
def _(ctx):
    _safe_loader_refuses(ctx, "model.pt", lambda p, o: torch.save(o, p))


@case("h-pkl-legacy-pth", "pickle", "load_state_dict: a legacy (non-zip) torch .pth holding an object")
def _(ctx):
    _safe_loader_refuses(
        ctx, "model.pth", lambda p, o: torch.save(o, p, _use_new_zipfile_serialization=False)
    )


@case("h-pkl-raw-pkl", "pickle", "load_state_dict: a raw pickle .pkl")
def _(ctx):
    _safe_loader_refuses(ctx, "state.pkl", lambda p, o: p.write_bytes(pickle.dumps(o)))


@case("h-pkl-renamed-safetensors", "pickle", "load_state_dict: a raw pickle named .safetensors")
def _(ctx):
    _safe_loader_refuses(ctx, "model.safetensors", lambda p, o: p.write_bytes(pickle.dumps(o)))


@case("h-pkl-optimizer-bin", "pickle", "load_state_dict: accelerate-style optimizer.bin (zip pickle)")
def _(ctx):
    _safe_loader_refuses(ctx, "optimizer.bin", lambda p, o: torch.save(o, p))


@case("h-pkl-adapter-bin-legacy", "pickle", "load_state_dict: peft adapter_model.bin, legacy pickle")
def _(ctx):
    _safe_loader_refuses(
        ctx, "adapter_model.bin", lambda p, o: torch.save(o, p, _use_new_zipfile_serialization=False)
    )


@case("h-pkl-protocol0", "pickle", "load_state_dict: a protocol-0 (text) pickle named .pt")
def _(ctx):
    _safe_loader_refuses(ctx, "old.pt", lambda p, o: p.write_bytes(pickle.dumps(o, protocol=0)))


@case("h-pkl-nested-object", "pickle", "load_state_dict: a plain dict whose nested list hides the object")
def _(ctx):
    _safe_loader_refuses(ctx, "nested.pt", lambda p, o: torch.save({"w": torch.zeros(1), "x": [[o]]}, p))


def _resume_refused(ctx: Ctx, plant: Callable[[Path], Path]) -> None:
    ck = killed_run(ctx)
    bad = plant(ck)
    ctx.freeze()
    msg = ctx.refused(lambda: resume(ctx), bad.name)
    assert "\n" not in msg


#: a pickle payload planted as (or next to) one file of a training checkpoint: the resume is refused
_RESUME_PICKLES = (
    (
        "h-resume-custom-checkpoint-pkl",
        "resume: accelerate's custom_checkpoint_0.pkl planted",
        "custom_checkpoint_0.pkl",
    ),
    ("h-resume-random-states-pkl", "resume: accelerate's random_states_0.pkl planted", "random_states_0.pkl"),
    (
        "h-resume-optimizer-bin",
        "resume: an optimizer.bin pickle planted next to the safe files",
        "optimizer.bin",
    ),
    ("h-resume-rng-is-pickle", "resume: rng-0.safetensors replaced by a pickle", "rng-0.safetensors"),
    (
        "h-resume-trainable-is-pickle",
        "resume: trainable.safetensors replaced by a pickle",
        "trainable.safetensors",
    ),
    (
        "h-resume-optimizer-is-pickle",
        "resume: optimizer.safetensors replaced by a pickle",
        "optimizer.safetensors",
    ),
    ("h-resume-scheduler-json-pickle", "resume: scheduler.json holds pickle bytes", "scheduler.json"),
    ("h-resume-loopstate-pickle", "resume: loop_state.json holds pickle bytes", "loop_state.json"),
    (
        "h-resume-pytorch-model-bin",
        "resume: a pytorch_model.bin pickle planted in the checkpoint",
        "pytorch_model.bin",
    ),
)


def _resume_pickle_case(name: str):
    return lambda ctx: _resume_refused(ctx, lambda ck: ctx.payload(ck / name))


for _id, _what, _name in _RESUME_PICKLES:
    case(_id, "pickle", _what)(_resume_pickle_case(_name))


def _yaml_config(ctx: Ctx, text: str) -> None:
    from genmetrics.leaderboard.config import load_config

    cfg = ctx.inp / "board.yaml"
    cfg.write_text(text)
    ctx.freeze()
    msg = ctx.refused(lambda: load_config(cfg), "board.yaml")
    assert "\n" not in msg.strip() or True


@case("h-yaml-python-apply", "pickle", "leaderboard YAML with a !!python/object/apply tag")
def _(ctx):
    _yaml_config(ctx, f'data: !!python/object/apply:os.system ["touch {ctx.marker}"]\n')


@case("h-yaml-python-name", "pickle", "leaderboard YAML with a !!python/name tag")
def _(ctx):
    _yaml_config(ctx, "data:\n  references: !!python/name:os.system\n")


@case("h-yaml-python-apply-cli", "pickle", "leaderboard YAML tag through the CLI", cli=True)
def _(ctx):
    cfg = ctx.inp / "board.yaml"
    cfg.write_text(f'data: !!python/object/apply:os.system ["touch {ctx.marker}"]\n')
    ctx.freeze()
    ctx.cli(["leaderboard", str(cfg), "--out", str(ctx.out)], 2, "board.yaml")


@case("h-cache-entry-pickle", "pickle", "feature cache: an entry replaced by a pickle is a miss")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache

    cache = FeatureCache("m", root=ctx.out)
    cache.put(b"img", {"embedding": torch.nn.functional.normalize(torch.ones(4), dim=0)})
    entry = next(cache.dir.rglob("*.safetensors"))
    ctx.payload(entry)
    ctx.freeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert FeatureCache("m", root=ctx.out).get(b"img", expect={"embedding": (4,)}) is None


@case("h-results-jsonl-pickle", "pickle", "read_results: results.jsonl holds pickle bytes")
def _(ctx):
    from genmetrics.data.output.rows import read_results

    p = ctx.payload(ctx.inp / "results.jsonl")
    with open(p, "ab") as f:  # a good row after it: the pickle is not a torn last line
        f.write(b'\n{"generator": "g", "metric": "psnr", "id": "a", "value": 1.0}\n')
    ctx.freeze()
    ctx.refused(lambda: read_results(p), "results.jsonl")


@case("h-openclip-legacy-pickle", "pickle", "open_clip --weights MODEL:x.pt, a legacy pickle", cli=True)
def _(ctx):
    from genmetrics.backbones.openclip import load_open_clip

    p = ctx.inp / "w.pt"
    torch.save({"obj": Payload(ctx.marker)}, p, _use_new_zipfile_serialization=False)
    ctx.freeze()
    ctx.refused(lambda: load_open_clip(f"ViT-B-32:{p}"), str(p))
    refs = _images(ctx.inp / "r")
    ctx.freeze()
    argv = ["score", "clip_i", "-r", str(refs), "-c", str(refs), "--weights", f"ViT-B-32:{p}"]
    ctx.cli(argv, 2, "w.pt")


@case("h-openclip-zip-object", "pickle", "open_clip weights: a zip .bin holding a Python object")
def _(ctx):
    from genmetrics.backbones.openclip import load_open_clip

    p = ctx.inp / "open_clip_model.bin"
    torch.save({"visual.proj": torch.zeros(2), "o": Payload(ctx.marker)}, p)
    ctx.freeze()
    ctx.refused(lambda: load_open_clip(f"ViT-B-32:{p}"), str(p))


# ================================================================ 2. links in output folders (link)
def _link_refused(ctx: Ctx, name: str, target: Path | str, write: Callable[[Path], Any]) -> None:
    ctx.out.mkdir(exist_ok=True)
    _plant_link(ctx.out / name, target)
    ctx.freeze()
    before = ctx.outside.read_bytes()
    ctx.refused(lambda: write(ctx.out / name), name)
    assert ctx.outside.read_bytes() == before
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


def _lock(p: Path):
    from genmetrics.data.output.lock import lock_output_folder

    return lock_output_folder(p.parent)


def _append(p: Path):
    from genmetrics.data.output.atomic import open_append

    with open_append(p, root=p.parent) as f:
        f.write("{}\n")


def _atomic(p: Path):
    from genmetrics.data.output.atomic import atomic_write_text

    atomic_write_text(p, "x", root=p.parent)


@case("h-link-lock-to-folder", "link", "the lock file is a link to a folder outside")
def _(ctx):
    from genmetrics.data.output.lock import LOCK

    _link_refused(ctx, LOCK, ctx.outside_dir, _lock)


@case("h-link-lock-dangling", "link", "the lock file is a dangling link to a new file outside")
def _(ctx):
    from genmetrics.data.output.lock import LOCK

    _link_refused(ctx, LOCK, ctx.outside_dir / "new.txt", _lock)


@case("h-link-lock-loop", "link", "the lock file is a link to itself")
def _(ctx):
    from genmetrics.data.output.lock import LOCK

    _link_refused(ctx, LOCK, LOCK, _lock)


@case("h-link-append-file", "link", "results.jsonl (append) is a link to a file outside")
def _(ctx):
    _link_refused(ctx, "results.jsonl", ctx.outside, _append)


@case("h-link-append-dangling", "link", "results.jsonl (append) is a dangling link")
def _(ctx):
    _link_refused(ctx, "results.jsonl", ctx.outside_dir / "new.jsonl", _append)


@case("h-link-append-loop", "link", "metrics.jsonl (append) is a link loop")
def _(ctx):
    _link_refused(ctx, "metrics.jsonl", "metrics.jsonl", _append)


@case("h-link-atomic-to-folder", "link", "report.md (atomic write) is a link to a folder outside")
def _(ctx):
    _link_refused(ctx, "report.md", ctx.outside_dir, _atomic)


@case("h-link-atomic-dangling", "link", "summary.json (atomic write) is a dangling link")
def _(ctx):
    _link_refused(ctx, "summary.json", ctx.outside_dir / "summary.json", _atomic)


@case("h-link-atomic-file", "link", "leaderboard.csv (atomic write) is a link to a file outside")
def _(ctx):
    _link_refused(ctx, "leaderboard.csv", ctx.outside, _atomic)


@case("h-link-subfolder", "link", "plots/ is a link to a folder outside: a.png is never created there")
def _(ctx):
    from genmetrics.data.output.write_rule import destination

    ctx.out.mkdir()
    _plant_link(ctx.out / "plots", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: destination(ctx.out / "plots" / "a.png", root=ctx.out), "plots")
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-deep-subfolder", "link", "index/shards is a link: make_folder never creates through it")
def _(ctx):
    from genmetrics.data.output.write_rule import make_folder

    (ctx.out / "index").mkdir(parents=True)
    _plant_link(ctx.out / "index" / "shards", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: make_folder(ctx.out / "index" / "shards" / "x", root=ctx.out), "shards")


@case("h-link-dotdot", "link", "a destination ../escape.txt outside the chosen folder")
def _(ctx):
    from genmetrics.data.output.atomic import atomic_write_text

    ctx.out.mkdir()
    ctx.freeze()
    ctx.refused(lambda: atomic_write_text(ctx.out / ".." / "escape.txt", "x", root=ctx.out), "outside")
    assert not (ctx.root / "escape.txt").exists()


@case("h-link-cache-shard", "link", "a feature-cache shard folder is a link to a folder outside")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache, content_hash

    cache = FeatureCache("m", root=ctx.out)
    shard = cache.dir / content_hash(b"img")[:2]
    _plant_link(shard, ctx.outside_dir)
    ctx.freeze()
    try:
        cache.put(b"img", {"embedding": torch.ones(4) / 2})
    except InputError as e:
        assert "link" in str(e) or "outside" in str(e)
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


def _fit_refused(ctx: Ctx, name: str, target: Path | str) -> None:
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ctx.out.mkdir()
    _plant_link(ctx.out / name, target)
    ctx.freeze()
    before = ctx.outside.read_bytes()
    ctx.refused(lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out)), name)
    assert ctx.outside.read_bytes() == before
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-train-metrics", "link", "training: metrics.jsonl is a link to a file outside")
def _(ctx):
    _fit_refused(ctx, "metrics.jsonl", ctx.outside)


@case("h-link-train-checkpoints-dir", "link", "training: checkpoints/ is a link to a folder outside")
def _(ctx):
    _fit_refused(ctx, "checkpoints", ctx.outside_dir)


@case("h-link-train-config-dangling", "link", "training: train_config.json is a dangling link")
def _(ctx):
    _fit_refused(ctx, "train_config.json", ctx.outside_dir / "train_config.json")


@case("h-link-train-lock-loop", "link", "training: the lock file is a link loop")
def _(ctx):
    from genmetrics.data.output.lock import LOCK

    _fit_refused(ctx, LOCK, LOCK)


def _score_out(ctx: Ctx, target: Path | str) -> None:
    refs = _images(ctx.inp / "r", seed=1)
    gen = _images(ctx.inp / "g", seed=2)
    link = ctx.inp / "scores.jsonl"
    _plant_link(link, target)
    ctx.freeze()
    before = ctx.outside.read_bytes()
    ctx.cli(["score", "psnr", "-r", str(refs), "-c", str(gen), "--out", str(link)], 2, "scores.jsonl")
    assert ctx.outside.read_bytes() == before
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-score-out-folder", "link", "score --out X where X links to a folder outside", cli=True)
def _(ctx):
    _score_out(ctx, ctx.outside_dir)


@case("h-link-score-out-dangling", "link", "score --out X where X is a dangling link", cli=True)
def _(ctx):
    _score_out(ctx, ctx.outside_dir / "new.jsonl")


@case("h-link-score-out-loop", "link", "score --out X where X is a link loop", cli=True)
def _(ctx):
    _score_out(ctx, "scores.jsonl")


# ============================================================== 3. poisoned numbers (poison)
def _edit(path: Path, fn: Callable[[dict[str, torch.Tensor]], None]) -> None:
    t = dict(load_file(str(path)))
    fn(t)
    save_file(t, str(path))


def _resume_poison(ctx: Ctx, file: str, fn, *fragments: str) -> None:
    ck = killed_run(ctx)
    _edit(ck / file, fn)
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), file, *fragments)


def _first(t: dict[str, torch.Tensor]) -> str:
    return sorted(t)[0]


@case("h-resume-trainable-shape", "poison", "resume: a trainable tensor of another shape")
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = torch.zeros(*t[k].shape, 2)

    _resume_poison(ctx, "trainable.safetensors", f)


@case("h-resume-trainable-missing", "poison", "resume: a trainable tensor missing")
def _(ctx):
    _resume_poison(ctx, "trainable.safetensors", lambda t: t.pop(_first(t)))


@case("h-resume-trainable-extra", "poison", "resume: an extra tensor in trainable.safetensors")
def _(ctx):
    _resume_poison(ctx, "trainable.safetensors", lambda t: t.__setitem__("evil.weight", torch.zeros(3)))


@case(
    "h-resume-trainable-nan",
    "poison",
    "resume: NaN in a trainable tensor",
)
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("nan")

    _resume_poison(ctx, "trainable.safetensors", f)


@case(
    "h-resume-trainable-inf",
    "poison",
    "resume: +inf in a trainable tensor",
)
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("inf")

    _resume_poison(ctx, "trainable.safetensors", f)


@case("h-resume-optimizer-shape", "poison", "resume: an optimizer moment of another shape")
def _(ctx):
    def f(t):
        k = next(k for k in sorted(t) if t[k].dim() > 0)
        t[k] = torch.zeros(t[k].numel() + 1)

    _resume_poison(ctx, "optimizer.safetensors", f)


@case(
    "h-resume-optimizer-nan",
    "poison",
    "resume: NaN in an optimizer moment",
)
def _(ctx):
    def f(t):
        k = next(k for k in sorted(t) if t[k].dim() > 0)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("nan")

    _resume_poison(ctx, "optimizer.safetensors", f)


@case("h-resume-rng-truncated", "poison", "resume: the torch RNG state cut short")
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k][: max(1, t[k].numel() // 2)].clone()

    _resume_poison(ctx, "rng-0.safetensors", f)


@case("h-resume-loopstate-negative-step", "poison", "resume: loop_state.json with step = -5")
def _(ctx):
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"]["step"] = -5
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json")


def _loop_field(ctx: Ctx, name: str, value: Any) -> None:
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"][name] = value
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json", name)


@case("h-resume-loopstate-best-nan", "poison", "resume: loop_state.json with best_metric = NaN")
def _(ctx):
    _loop_field(ctx, "best_metric", float("nan"))


@case("h-resume-loopstate-step-float", "poison", "resume: loop_state.json with step = 2.5")
def _(ctx):
    _loop_field(ctx, "step", 2.5)


@case("h-resume-loopstate-extra-key", "poison", "resume: loop_state.json with an unknown field")
def _(ctx):
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"]["__class__"] = "os.system"
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json")


def _cache_poison(ctx: Ctx, entry: dict[str, torch.Tensor]) -> None:
    from genmetrics.data.caches.features import FeatureCache

    cache = FeatureCache("m", root=ctx.out)
    cache.put(b"img", entry)
    ctx.freeze()
    fresh = FeatureCache("m", root=ctx.out)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert fresh.get(b"img", expect={"embedding": (4,)}) is None
    assert fresh.rejected == 1 and any("feature cache" in str(w.message) for w in seen)


@case("h-cache-wrong-dim", "poison", "feature cache: a 3-d entry where the model gives 4-d")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(3) / 3**0.5})


@case("h-cache-nan", "poison", "feature cache: an entry holding NaN")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.tensor([float("nan"), 0.0, 0.0, 1.0])})


@case("h-cache-extra-tensor", "poison", "feature cache: an entry with an extra tensor")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(4) / 2, "evil": torch.zeros(1)})


@case("h-cache-int-dtype", "poison", "feature cache: an integer entry")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(4, dtype=torch.int64)})


@case("h-clip-i-cache-wrong-dim", "poison", "clip_i with cache_dir: every entry replaced by 3-d vectors")
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images, tiny_clip

    ref, cand = random_images(2, 32, seed=1), random_images(2, 32, seed=2)
    kw = dict(backbone=tiny_clip()[0], cache_dir=str(ctx.out))
    m = gm.create_metric("clip_i", **kw)
    m.update(reference=ref, candidates=cand)
    clean = m.compute()
    for f in ctx.out.rglob("*.safetensors"):
        save_file({k: torch.ones(3) for k in load_file(str(f))}, str(f))
    ctx.freeze()
    m2 = gm.create_metric("clip_i", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2.update(reference=ref, candidates=cand)
    again = m2.compute()
    again = again["clip_i"] if isinstance(again, dict) else again
    clean = clean["clip_i"] if isinstance(clean, dict) else clean
    assert torch.allclose(torch.as_tensor(again), torch.as_tensor(clean), atol=1e-5), (again, clean)


@case("h-results-nan-score", "poison", "read_results: a row whose score is NaN text")
def _(ctx):
    from genmetrics.data.output.rows import check_result_row, read_results

    p = ctx.inp / "results.jsonl"
    rows = [
        {"generator": "g", "metric": "psnr", "id": "a", "value": 1.0},
        {"generator": "g", "metric": "psnr", "id": "b", "value": "NaN!"},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ctx.freeze()
    ctx.refused(lambda: read_results(p, check=check_result_row), "results.jsonl")


# ================================================================= 4. faults during long work (fault)
@case("h-sigint-mid-save", "fault", "Ctrl-C during a checkpoint write: write finished, stop, resume equal")
def _(ctx):
    from genmetrics.train import checkpoint as ck
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    real = ck.save_training_state
    fired: list[int] = []

    def hit(*a, **k):
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    ctx.freeze()
    ctx.monkeypatch.setattr(ck, "save_training_state", hit)
    # Python's own Ctrl-C handler, whatever this process inherited: a test run started in the background of
    # a non-interactive shell ignores SIGINT, and a held Ctrl-C then stays ignored (tests/train/
    # test_signals_handlers.py covers that case)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fit(Toy(), make_data(8), _train_cfg(ctx.out))
    finally:
        signal.signal(signal.SIGINT, previous)
    ctx.monkeypatch.setattr(ck, "save_training_state", real)
    assert fired and list((ctx.out / "checkpoints").iterdir())
    t2 = Toy()
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k


@case(
    "h-enospc-checkpoint", "fault", "a full disk (ENOSPC) while writing a checkpoint: one line, nothing lost"
)
def _(ctx):
    import errno

    from genmetrics.train import checkpoint as ck
    from genmetrics.train import fit

    Toy, make_data = _toy()
    real = ck.save_training_state
    calls: list[int] = []

    def full(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    ctx.freeze()
    ctx.monkeypatch.setattr(ck, "save_training_state", full)
    with pytest.raises(Exception) as e:
        fit(Toy(), make_data(8), _train_cfg(ctx.out, save_every=1))
    assert "space" in str(e.value) and "Traceback" not in str(e.value)
    ctx.monkeypatch.setattr(ck, "save_training_state", real)
    assert [p.name for p in (ctx.out / "checkpoints").iterdir() if not p.name.endswith(".tmp")]


def _png(path: Path, w: int, h: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("1", (w, h)).save(path)
    return path


@case("h-bomb-header-refused", "fault", "a 30000 x 30000 PNG of a few kB: refused from its header", slow=True)
def _(ctx):
    import tracemalloc

    from genmetrics.data.io.images import load_image

    p = _png(ctx.inp / "bomb.png", 30000, 30000)
    ctx.freeze()
    tracemalloc.start()
    try:
        ctx.refused(lambda: load_image(p), "bomb.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


@case(
    "h-bomb-vs-reference-score",
    "fault",
    "score psnr: a 12000 x 12000 candidate against 16 x 16 refs",
    cli=True,
)
def _(ctx):
    refs = _images(ctx.inp / "r", n=1)
    gen = ctx.inp / "g"
    name = next(refs.iterdir()).name
    _png(gen / name, 12000, 12000)
    ctx.freeze()
    ctx.cli(["score", "psnr", "-r", str(refs), "-c", str(gen)], 2, name)


@case("h-strip-100000x1", "fault", "a 100000 x 1 image: loaded or refused, memory bounded")
def _(ctx):
    import tracemalloc

    from genmetrics.data.io.images import load_image

    p = ctx.inp / "strip.png"
    Image.new("RGB", (100000, 1), (9, 9, 9)).save(p)
    ctx.freeze()
    tracemalloc.start()
    try:
        try:
            out = load_image(p)
            assert out is not None
        except InputError as e:
            assert "strip.png" in str(e)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


@case("h-strip-1x100000-score", "fault", "score psnr on a 1 x 100000 strip pair", cli=True)
def _(ctx):
    for d in ("r", "g"):
        (ctx.inp / d).mkdir()
        Image.new("RGB", (1, 100000), (9, 9, 9) if d == "r" else (12, 9, 9)).save(ctx.inp / d / "a.png")
    ctx.freeze()
    from genmetrics.cli.main import main

    ctx.capsys.readouterr()
    rc = main(["score", "psnr", "-r", str(ctx.inp / "r"), "-c", str(ctx.inp / "g")])
    out = ctx.capsys.readouterr()
    assert "Traceback" not in out.err and rc in (0, 2), out.err


def _config_refused(ctx: Ctx, name: str, text: str) -> None:
    from genmetrics.leaderboard.config import load_config

    p = ctx.inp / name
    p.write_text(text)
    ctx.freeze()
    ctx.refused(lambda: load_config(p), name)
    ctx.cli(["leaderboard", str(p), "--out", str(ctx.out)], 2, name)


@case("h-malformed-toml", "fault", "a leaderboard TOML with an unclosed table header", cli=True)
def _(ctx):
    _config_refused(ctx, "board.toml", '[data\nreferences = "r"\n')


@case("h-malformed-yaml", "fault", "a leaderboard YAML with bad indentation", cli=True)
def _(ctx):
    _config_refused(ctx, "board.yaml", "data:\n  references: r\n   generators: [\n")


@case("h-yaml-not-mapping", "fault", "a leaderboard YAML that is a list", cli=True)
def _(ctx):
    _config_refused(ctx, "board.yml", "- a\n- b\n")


@case("h-toml-binary", "fault", "a leaderboard TOML that is binary garbage (not UTF-8)", cli=True)
def _(ctx):
    p = ctx.inp / "board.toml"
    p.write_bytes(b"\xff\xfe\x00garbage\x80")
    ctx.freeze()
    ctx.cli(["leaderboard", str(p), "--out", str(ctx.out)], 2, "board.toml")


@case("h-resume-train-config-malformed", "fault", "resume: train_config.json is not JSON")
def _(ctx):
    killed_run(ctx)
    (ctx.out / "train_config.json").write_text("{oops")
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "train_config.json")


@case("h-resume-metrics-torn-tail", "fault", "resume: metrics.jsonl torn in its last line continues")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    killed_run(ctx)
    with open(ctx.out / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "lo')
    ctx.freeze()
    t2 = Toy()
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k
    for line in (ctx.out / "metrics.jsonl").read_text().splitlines():
        json.loads(line)


@case("h-resume-metrics-damaged-middle", "fault", "resume: metrics.jsonl damaged before its last line")
def _(ctx):
    killed_run(ctx)
    p = ctx.out / "metrics.jsonl"
    lines = p.read_text().splitlines()
    assert len(lines) >= 2
    lines[0] = "{garbage"
    p.write_text("\n".join(lines) + "\n")
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "metrics.jsonl")


@case("h-resume-finished-kept", "fault", "resume of a finished run trains nothing and keeps the weights")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    t = Toy()
    fit(t, make_data(8), _train_cfg(ctx.out))
    files = snapshot(ctx.out, [])
    ctx.freeze()
    t2 = Toy(init_seed=99)
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    after = snapshot(ctx.out, [])
    lost = [p for p in files if p not in after]
    assert not lost, lost


@case("h-jsonl-dataset-malformed", "fault", "MIE training pairs: a malformed JSONL line names the file")
def _(ctx):
    from genmetrics.mie.train import load_training_pairs

    p = ctx.inp / "pairs.jsonl"
    p.write_text('{"id": "a"\n')
    ctx.freeze()
    ctx.refused(lambda: load_training_pairs(p), "pairs.jsonl")


@case("h-tpips-json-malformed", "fault", "a TPIPS adapter folder whose tpips.json is not JSON")
def _(ctx):
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    from genmetrics.tpips.loading import load_tpips

    d = ctx.inp / "adapter"
    d.mkdir()
    (d / "tpips.json").write_text("{not json")
    ctx.freeze()
    ctx.refused(
        lambda: load_tpips(d, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor()), "tpips.json"
    )


@case("h-tpips-adapter-pth-payload", "pickle", "a TPIPS adapter folder with adapter_model.pth (payload)")
def _(ctx):
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    from genmetrics.tpips.loading import load_tpips

    d = ctx.inp / "adapter"
    d.mkdir()
    (d / "tpips.json").write_text(json.dumps({"variant": "late"}))
    ctx.payload(d / "adapter_model.pth")
    ctx.freeze()
    with pytest.raises((InputError, OSError)):
        load_tpips(d, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor())


@case(
    "h-nonutf8-names-lc-all-c",
    "fault",
    "LC_ALL=C, file names not UTF-8: score psnr in a subprocess",
    cli=True,
    slow=True,
)
def _(ctx):
    import subprocess
    import sys

    r, g = ctx.inp / "r", ctx.inp / "g"
    for d, seed in ((r, 1), (g, 2)):
        d.mkdir()
        for raw in (b"caf\xc3\xa9.png", b"\xe6\x97\xa5\xe6\x9c\xac.png"):
            arr = np.random.default_rng(seed).integers(0, 255, (16, 16, 3), dtype=np.uint8)
            with open(os.path.join(os.fsencode(d), raw), "wb") as f:
                buf = io.BytesIO()
                Image.fromarray(arr).save(buf, "PNG")
                f.write(buf.getvalue())
    ctx.freeze()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""}
    env.pop("PYTHONUTF8", None)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "genmetrics",
            "score",
            "psnr",
            "-r",
            str(r),
            "-c",
            str(g),
            "--out",
            str(ctx.out / "s.jsonl"),
        ],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert len((ctx.out / "s.jsonl").read_bytes().splitlines()) >= 2


# ======================================================================= 5. silent answers (silent)
@case(
    "h-global-load-truncated",
    "silent",
    "loading a truncated JPEG leaves PIL's LOAD_TRUNCATED_IMAGES as it was",
)
def _(ctx):
    from genmetrics.data.io.images import load_image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    p = ctx.inp / "cut.jpg"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    ctx.freeze()
    for before in (False, True):
        ctx.monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", before)
        try:
            load_image(p)
        except InputError:
            pass
        assert ImageFile.LOAD_TRUNCATED_IMAGES is before


@case("h-global-max-pixels", "silent", "loading an image leaves PIL's MAX_IMAGE_PIXELS as it was")
def _(ctx):
    from genmetrics.data.io.images import load_image

    p = _png(ctx.inp / "a.png", 8, 8)
    ctx.freeze()
    before = Image.MAX_IMAGE_PIXELS
    load_image(p)
    assert Image.MAX_IMAGE_PIXELS == before


@case(
    "h-global-torch-threads-grad", "silent", "scoring leaves torch's grad mode and default dtype as they were"
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    g, dt = torch.is_grad_enabled(), torch.get_default_dtype()
    m = gm.create_metric("psnr")
    m.update(reference=random_images(1, 16), candidates=random_images(1, 16, seed=1))
    m.compute()
    assert torch.is_grad_enabled() == g and torch.get_default_dtype() == dt


@case(
    "h-nboot-zero-api",
    "silent",
    "bootstrap_ci(n_boot=0) refused with the range",
)
def _(ctx):
    from genmetrics.functional import bootstrap_ci

    ctx.freeze()
    ctx.refused(lambda: bootstrap_ci(torch.rand(10), n_boot=0), "100000", exc=(InputError, ValueError))


@case(
    "h-nboot-zero-cli",
    "silent",
    "rank-generators --n-boot 0 refused with the range",
    cli=True,
)
def _(ctx):
    p = ctx.inp / "scores.jsonl"
    p.write_text('{"generators":["a","b"],"scores":{"mie":[1.0,0.5]}}\n' * 3)
    ctx.freeze()
    ctx.cli(["rank-generators", "--scores", str(p), "--human", "--n-boot", "0"], 2, "100000")


def _pairs(ctx: Ctx, edit: Callable[[list[dict], Path], None]) -> Path:
    from genmetrics.testing import toy_mib_pairs

    path = Path(toy_mib_pairs(ctx.inp / "data", 4))
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    edit(rows, path.parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _check_pairs(path: Path):
    from genmetrics.mie.train import load_training_pairs
    from genmetrics.train.data_checks import check_pairs

    return check_pairs(load_training_pairs(path), str(path))


@case(
    "h-train-same-file-candidates", "silent", "MIE pairs whose two candidates are one file: refused with rows"
)
def _(ctx):
    def same(rows, folder):
        for r in rows:
            r["candidates"] = [r["candidates"][0], r["candidates"][0]]

    p = _pairs(ctx, same)
    ctx.freeze()
    ctx.refused(lambda: _check_pairs(p), str(p))


@case(
    "h-train-one-duplicate-pair", "silent", "one MIE pair of the same file among good ones: refused naming it"
)
def _(ctx):
    ids: list[str] = []

    def one(rows, folder):
        rows[1]["candidates"] = [rows[1]["candidates"][0]] * 2
        ids.append(str(rows[1]["id"]))

    p = _pairs(ctx, one)
    ctx.freeze()
    ctx.refused(lambda: _check_pairs(p), ids[0])


@case(
    "h-train-identical-copies-warn", "silent", "MIE pairs whose candidates are byte-identical copies: warned"
)
def _(ctx):
    import shutil

    def copies(rows, folder):
        for i, r in enumerate(rows[:2]):
            a = folder / str(r["candidates"][0])
            b = folder / f"copy{i}{a.suffix}"
            shutil.copy(a if a.exists() else Path(r["candidates"][0]), b)
            r["candidates"] = [r["candidates"][0], str(b) if not a.exists() else b.name]

    p = _pairs(ctx, copies)
    ctx.freeze()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _check_pairs(p)
    assert any("2" in str(w.message) for w in seen), [str(w.message) for w in seen]


@case(
    "h-device-cuda-missing",
    "silent",
    "TrainLoopConfig(device='cuda') without CUDA: one line naming the option",
)
def _(ctx):
    from genmetrics.train import fit
    from genmetrics.train.config import DeviceUnavailableError

    ctx.monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ctx.monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    Toy, make_data = _toy()
    ctx.freeze()
    msg = ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out, device="cuda")),
        "device",
        exc=DeviceUnavailableError,
    )
    assert "cpu" in msg and "\n" not in msg


@case("h-device-mps-missing", "silent", "TrainLoopConfig(device='mps') where there is none")
def _(ctx):
    from genmetrics.train import fit
    from genmetrics.train.config import DeviceUnavailableError

    ctx.monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    Toy, make_data = _toy()
    ctx.freeze()
    ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out, device="mps")), "mps", exc=DeviceUnavailableError
    )


@case(
    "h-state-not-persisted-clip", "silent", "compute() on a metric reloaded without persistent(True) says so"
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    saved = gm.create_metric("ssim")
    saved.update(reference=random_images(2, 16), candidates=random_images(2, 16, seed=1))
    fresh = gm.create_metric("ssim")
    fresh.load_state_dict(saved.state_dict())
    ctx.refused(fresh.compute, "persistent(True)")


@case(
    "h-state-persisted-roundtrip",
    "silent",
    "with persistent(True) the reloaded metric computes the same value",
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    saved = gm.create_metric("ssim")
    saved.persistent(True)
    saved.update(reference=random_images(2, 16), candidates=random_images(2, 16, seed=1))
    fresh = gm.create_metric("ssim")
    fresh.persistent(True)
    fresh.load_state_dict(saved.state_dict())
    assert torch.equal(torch.as_tensor(fresh.compute()), torch.as_tensor(saved.compute()))


@case("h-score-out-inside-inputs", "silent", "score --out into a new folder: written there only", cli=True)
def _(ctx):
    refs = _images(ctx.inp / "r", seed=1)
    gen = _images(ctx.inp / "g", seed=2)
    ctx.freeze()
    ctx.cli(["score", "psnr", "-r", str(refs), "-c", str(gen), "--out", str(ctx.out / "s.jsonl")], 0)
    rows = [json.loads(x) for x in (ctx.out / "s.jsonl").read_text().splitlines() if x.strip()]
    assert rows and all(
        isinstance(v, float) and np.isfinite(v) for r in rows for k, v in r.items() if k == "psnr"
    ), rows


# ============================================================ later additions (each in its class)
@case("h-mie-heads-run-folder", "silent", "--heads given the --out folder of train mie: its best/ is used")
def _(ctx):
    from genmetrics.mie.checkpoint import resolve_heads

    for sub in ("final", "best"):
        (ctx.inp / "run" / sub).mkdir(parents=True)
        (ctx.inp / "run" / sub / "mie_config.json").write_text("{}")
    ctx.freeze()
    assert resolve_heads(ctx.inp / "run") == ctx.inp / "run" / "best"


@case("h-mie-heads-unfinished-run", "silent", "--heads given an unfinished run folder: says to --resume it")
def _(ctx):
    from genmetrics.mie.checkpoint import resolve_heads

    (ctx.inp / "run" / "checkpoints" / "step-4").mkdir(parents=True)
    ctx.freeze()
    ctx.refused(lambda: resolve_heads(ctx.inp / "run"), "--resume", "step-4")


@case("h-mie-heads-pickle-pt", "pickle", "an MIE heads .pt file that pickles code: refused, never run")
def _(ctx):
    from genmetrics.mie import checkpoint as mck

    p = ctx.payload(ctx.inp / "heads.pt")
    ctx.freeze()
    ctx.refused(lambda: mck._torch_load(p, "heads.safetensors"), str(p), "heads.safetensors")


@case("h-mie-relative-backbone", "silent", "a checkpoint naming ./models/vlm, loaded from another folder")
def _(ctx):
    from genmetrics.mie.checkpoint import backbone_location

    ck = ctx.inp / "ckpt"
    (ck / "models" / "vlm").mkdir(parents=True)
    ctx.freeze()
    ctx.monkeypatch.chdir(ctx.outside_dir)
    assert backbone_location("./models/vlm", ck) == str(ck / "models" / "vlm")
    msg = ctx.refused(lambda: backbone_location("./models/missing", ck), "looked in")
    assert str(ctx.outside_dir) in msg and str(ck) in msg


@case("h-csv-formula-cells", "silent", "report cells starting with = + - @ tab CR are neutralised")
def _(ctx):
    from genmetrics.leaderboard.report import csv_safe

    ctx.freeze()
    for v in ("=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"):
        assert csv_safe(v) == "'" + v
    assert csv_safe("model-a") == "model-a" and csv_safe(-0.5) == -0.5


@case("h-markdown-pipe-newline", "silent", "Markdown cells escape |, line breaks, tags and entities")
def _(ctx):
    from genmetrics.leaderboard.report import md_escape

    ctx.freeze()
    out = md_escape("a|b\nc<script>&lt;")
    assert "|" not in out.replace("\\|", "") and "\n" not in out, out
    assert "<script>" not in out.replace("\\<script>", "") and "\\&lt;" in out, out


def _tmpfs(ctx: Ctx, size: str) -> Path:
    import subprocess

    mnt = ctx.out / "disk"
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    ctx.monkeypatch.setattr(ctx, "_mounted", mnt, raising=False)
    return mnt


def _umount(mnt: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@case("h-tmpfs-full-train", "fault", "training on a full 64 kB tmpfs: one line naming the disk, step kept")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    mnt = _tmpfs(ctx, "64k")
    try:
        ctx.freeze()
        run = mnt / "run"
        try:
            fit(Toy(), make_data(64), _train_cfg(run, epochs=200, batch_size=8, save_every=1))
            raise AssertionError("a full disk was not reported")
        except (GenmetricsError, OSError) as e:  # DiskFullError
            msg = str(e)
            assert "space" in msg and str(mnt) in msg and "\n" not in msg, msg
        done = [p for p in (run / "checkpoints").iterdir() if not p.name.endswith(".tmp")]
        assert done and all((p / "loop_state.json").exists() for p in done)
    finally:
        _umount(mnt)


@case("h-tmpfs-full-score-out", "fault", "score --out onto a full tmpfs: exit 1, one error line", cli=True)
def _(ctx):
    refs = _images(ctx.inp / "r", n=8, size=16, seed=1)
    gen = _images(ctx.inp / "g", n=8, size=16, seed=2)
    mnt = _tmpfs(ctx, "4k")
    try:
        try:
            with open(mnt / "fill", "wb") as f:
                f.write(b"x" * 8192)
        except OSError:
            pass
        ctx.freeze()
        line = ctx.cli(["score", "psnr", "-r", str(refs), "-c", str(gen), "--out", str(mnt / "s.jsonl")], 1)
        assert "space" in line, line
    finally:
        _umount(mnt)


@case(
    "h-tmpfs-full-train-resume",
    "fault",
    "full tmpfs mid-training, disk grown, --resume = the run never stopped",
)
def _(ctx):
    import subprocess

    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    opts = dict(epochs=3, batch_size=8, save_every=1)
    fit(t_ref, make_data(64), _train_cfg(ref_dir, **opts))
    mnt = _tmpfs(ctx, "64k")
    try:
        ctx.freeze()
        with pytest.raises(OSError, match="space"):
            fit(Toy(), make_data(64), _train_cfg(mnt / "run", **opts))
        r = subprocess.run(["mount", "-o", "remount,size=8m", str(mnt)], capture_output=True)
        assert r.returncode == 0, r.stderr
        t2 = Toy()
        fit(t2, make_data(64), _train_cfg(mnt / "run", resume=True, **opts))
        for k, v in t_ref.net.state_dict().items():
            assert torch.equal(v, t2.net.state_dict()[k]), k
    finally:
        _umount(mnt)


def _read_only(ctx: Ctx) -> Path:
    import subprocess

    mnt = _tmpfs(ctx, "1m")
    r = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True)
    if r.returncode != 0:
        _umount(mnt)
        pytest.skip("cannot remount read-only here")
    return mnt


@case("h-readonly-score-out", "fault", "score --out into a read-only folder: one error line", cli=True)
def _(ctx):
    refs = _images(ctx.inp / "r", seed=1)
    gen = _images(ctx.inp / "g", seed=2)
    mnt = _read_only(ctx)
    try:
        ctx.freeze()
        from genmetrics.cli.main import main

        ctx.capsys.readouterr()
        rc = main(["score", "psnr", "-r", str(refs), "-c", str(gen), "--out", str(mnt / "s.jsonl")])
        err = ctx.capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert "Traceback" not in err and rc in (1, 2) and len(lines) == 1 and "s.jsonl" in lines[0], err
    finally:
        _umount(mnt)


@case("h-readonly-train-out", "fault", "training into a read-only folder: one error naming it, no traceback")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    mnt = _read_only(ctx)
    try:
        ctx.freeze()
        with pytest.raises((GenmetricsError, OSError)) as e:
            fit(Toy(), make_data(8), _train_cfg(mnt / "run"))
        assert str(mnt) in str(e.value) and "\n" not in str(e.value), str(e.value)
    finally:
        _umount(mnt)


@case("h-readonly-feature-cache", "fault", "a feature cache on a read-only disk: served uncached, warned")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache

    mnt = _read_only(ctx)
    try:
        ctx.freeze()
        cache = FeatureCache("m", root=mnt)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cache.put(b"img", {"embedding": torch.ones(4) / 2})
        assert cache.read_only and any("not writable" in str(w.message) for w in seen)
        assert cache.get(b"img") is None
    finally:
        _umount(mnt)


@case(
    "h-latin1-byte-name",
    "fault",
    "a file name whose bytes are not UTF-8 (Latin-1 'été.png'): score psnr",
    cli=True,
)
def _(ctx):
    r, g = ctx.inp / "r", ctx.inp / "g"
    for d, seed in ((r, 1), (g, 2)):
        d.mkdir()
        arr = np.random.default_rng(seed).integers(0, 255, (16, 16, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "PNG")
        with open(os.path.join(os.fsencode(d), b"\xe9t\xe9.png"), "wb") as f:
            f.write(buf.getvalue())
    ctx.freeze()
    ctx.cli(["score", "psnr", "-r", str(r), "-c", str(g), "--out", str(ctx.out / "s.jsonl")], 0)
    assert (ctx.out / "s.jsonl").read_bytes().strip()


@case("h-kill-mid-step-resume-equal", "fault", "a run killed mid-step resumes to the uninterrupted weights")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    killed_run(ctx)
    ctx.freeze()
    t2 = Toy(init_seed=5)
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k


@case(
    "h-link-leaderboard-lock-dangling", "link", "leaderboard --out whose lock file dangles outside", cli=True
)
def _(ctx):
    import yaml

    from genmetrics.data.output.lock import LOCK
    from genmetrics.testing import toy_leaderboard

    cfg = ctx.inp / "board.yaml"
    cfg.write_text(yaml.safe_dump(toy_leaderboard(ctx.inp)))
    _plant_link(ctx.out / LOCK, ctx.outside_dir / "lock")
    ctx.freeze()
    ctx.cli(["leaderboard", str(cfg), "--out", str(ctx.out)], 2, "symbolic link")
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-train-final-dir", "link", "training: final/ is a link to a folder outside")
def _(ctx):
    _fit_refused(ctx, "final", ctx.outside_dir)


@case("h-link-train-best-dangling", "link", "training with validation: best/ is a dangling link")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ctx.out.mkdir()
    _plant_link(ctx.out / "best", ctx.outside_dir / "best")
    ctx.freeze()
    ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out), val_examples=make_data(4, seed=1)), "best"
    )
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]
