"""One wiring from card to inputs: ``genmetrics score`` and the leaderboard feed every registered
metric the same inputs, because both call ``genmetrics.core.wiring``. The test records every
``update()`` call a metric receives (through the tiny backbone provider) on one data set, once from the CLI
and once from a leaderboard, and compares them sample by sample."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.backbones.provider import use_provider
from genmetrics.cli.main import main
from genmetrics.core.registry import alias_of, metric_class
from genmetrics.leaderboard import run_leaderboard
from genmetrics.testing import tiny_backbones

ATTRS = "smiling, a hat"


def _save(path: Path, seed: int, size: int = 32) -> None:
    g = torch.Generator().manual_seed(seed)
    Image.fromarray(torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8).numpy()).save(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("wiring")
    for d in ("refs", "real", "gen", "subjects"):
        (root / d).mkdir()
    for i in range(3):
        _save(root / "refs" / f"s{i}.png", i)
        _save(root / "real" / f"r{i}.png", 10 + i)
        _save(root / "gen" / f"s{i}.png", 20 + i)
        _save(root / "subjects" / f"p{i}.png", 40 + i)
    prompts = [f"prompt number {i}" for i in range(3)]
    subjects = [f"subjects/p{i}.png" for i in range(2)]  # the same list for every id: the CLI's --reference
    (root / "prompts.jsonl").write_text(
        "".join(
            json.dumps({"id": f"s{i}", "prompt": p, "references": subjects}) + "\n"
            for i, p in enumerate(prompts)
        )
    )
    (root / "prompts.txt").write_text("\n".join(prompts) + "\n")
    _heads(root / "heads")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _heads(folder: Path) -> None:
    """Untrained MIE heads for the provider's tiny Qwen3.5 (mie needs heads to be built at all)."""
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = MIEModel(
            tiny_qwen35(0),
            tiny_qwen35_processor(),
            tuning="layer_only",
            unfreeze_layers=1,
            backbone_name="Qwen/Qwen3.5-0.8B",
        )
    model.save_pretrained(folder)


#: per metric: the CLI flags and the [[metrics]] entry that ask for the same thing
def _setup(name: str, root: Path) -> tuple[list[str], str]:
    entry = f'[[metrics]]\nname = "{name}"\n'
    flags = ["-c", str(root / "gen")]
    card = gm.registry.get_card(name)
    if name == "tpips":  # an aspect per sample on the CLI, one aspect column in the config
        return [*flags, "-r", str(root / "refs"), "-t", "overall"], entry + 'aspects = ["overall"]\n'
    if card.condition_option and card.condition.value == "attributes":
        flags += ["--attributes", ATTRS]
        entry += f'attributes = "{ATTRS}"\n'
    if card.level.value == "set" or card.reference.value == "real_set":
        flags += ["-r", str(root / "real")]
    elif card.reference.value == "matched":
        flags += ["-r", str(root / "refs")]
    elif card.reference.value == "image_list":
        flags += ["-r", str(root / "subjects/p0.png"), "-r", str(root / "subjects/p1.png")]
    if card.condition.value == "prompt":
        flags += ["-t", f"@{root / 'prompts.txt'}"]
    if name == "ms_ssim":  # 32 px images: three scales and a 3 px window fit
        flags += ["--option", "kernel_size=3", "--option", "betas=[0.3, 0.3, 0.4]"]
        entry += "kernel_size = 3\nbetas = [0.3, 0.3, 0.4]\n"
    if "heads" in gm.registry.metric_options(name):
        flags += ["--heads", str(root / "heads")]
        entry += f'heads = "{root / "heads"}"\n'
    return flags, entry


def _config(root: Path, entry: str) -> Path:
    cfg = root / "board.toml"
    cfg.write_text(
        '[data]\nreferences = "refs"\nreal = "real"\nprompts = "prompts.jsonl"\n\n'
        '[[generators]]\nname = "gen"\nimages = "gen"\n\n' + entry
    )
    return cfg


def _files_by_pixels(root: Path) -> dict[bytes, str]:
    """Every image under ``root`` by its decoded pixels: the input pipeline feeds metrics decoded images, and
    this names the file each one came from."""
    from genmetrics.data.io.images import load_image
    from genmetrics.data.io.pipeline import rgb_uint8

    return {rgb_uint8(load_image(p), str(p)).numpy().tobytes(): str(p) for p in sorted(root.rglob("*.png"))}


def _flatten(calls: list[dict[str, Any]], root: Path) -> list[tuple]:
    """Every update call as per-sample facts (decoded images named by their file), independent of how the
    samples were chunked."""
    files = _files_by_pixels(root)

    def name(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return files.get(x.cpu().numpy().tobytes(), "an image that is no file")
        if isinstance(x, list):
            return [name(v) for v in x]
        return x

    calls = [{k: (name(v) if k in ("reference", "candidates") else v) for k, v in kw.items()} for kw in calls]
    out: list[tuple] = []
    for kw in calls:
        cands, ref, cond, ids = (kw.get(k) for k in ("candidates", "reference", "condition", "ids"))
        if cands is None:  # a chunk of the real set
            out += [("real", str(p)) for p in ref]
            continue
        for i, c in enumerate(cands):
            r = ref[i] if isinstance(ref, list) and len(ref) == len(cands) and ids is not None else ref
            if isinstance(r, list):
                r = tuple(str(x) for x in r)
            out.append(
                (
                    "sample",
                    ids[i] if ids is not None else None,
                    str(c),
                    str(r) if isinstance(r, (str, Path)) else r,
                    cond[i] if cond is not None else None,
                )
            )
    return sorted(out, key=repr)


@pytest.fixture
def spy(monkeypatch):
    """Record the keyword arguments of every update() of every registered metric class."""
    calls: list[dict[str, Any]] = []
    seen = set()
    for name in gm.list_metrics():
        klass = metric_class(alias_of(name) or name)
        if klass in seen:
            continue
        seen.add(klass)
        original = klass.update

        def update(self, reference=None, candidates=None, condition=None, *, ids=None, _orig=original):
            calls.append(
                {"reference": reference, "candidates": candidates, "condition": condition, "ids": ids}
            )
            return _orig(self, reference, candidates, condition, ids=ids)

        monkeypatch.setattr(klass, "update", update)
    return calls


METRICS = [n for n in gm.list_metrics() if not alias_of(n)] + ["clip_t"]


@pytest.mark.slow
@pytest.mark.parametrize("name", METRICS)
def test_score_and_leaderboard_feed_the_same_inputs(name, data, spy, capsys, tmp_path):
    flags, entry = _setup(name, data)
    with use_provider(tiny_backbones):
        rc = main(["score", name, *flags, "--json"])
        err = capsys.readouterr().err
        assert rc == 0, err
        from_cli = _flatten(spy, data)
        spy.clear()
        run_leaderboard(_config(data, entry), tmp_path / "board", plots=False)
        from_board = _flatten(spy, data)
    assert from_cli and from_cli == from_board
    # and the facts are the card's: a matched reference shares the candidate's stem, a prompt is its line
    for fact in from_cli:
        if fact[0] == "sample" and isinstance(fact[3], str) and "refs" in fact[3]:
            assert Path(fact[3]).stem == Path(fact[2]).stem
        if fact[0] == "sample" and fact[4] and fact[4].startswith("prompt number"):
            assert fact[4] == f"prompt number {Path(fact[2]).stem[1:]}"
