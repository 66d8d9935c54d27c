"""Inputs are wired from the typed fields of metric cards alone: the leaderboard planner and
``genmetrics score`` never read a card's prose nor name a metric; a plugin metric registered through the
``genmetrics.metrics`` entry point works in both with no other code; ``clip_t`` is an alias of ``clipscore``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.cli.main import main
from genmetrics.core import registry
from genmetrics.core.registry import ConditionKind, MetricCard, ReferenceKind, get_card
from genmetrics.leaderboard import build_plan, load_config

REPO = Path(__file__).resolve().parents[2]
#: prose built to fool a planner that reads descriptions (the old one looked for "optional", "real",
#: "without NAME=" and "aspect")
MISLEADING = "optional; real images or an aspect, only when the metric is built without attributes="


def _save(path: Path, seed: int, size: int = 16) -> None:
    g = torch.Generator().manual_seed(seed)
    Image.fromarray(torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8).numpy()).save(path)


@pytest.fixture
def data(tmp_path):
    for d in ("refs", "real", "gen/a", "gen/b", "subjects"):
        (tmp_path / d).mkdir(parents=True)
    for i in range(3):
        _save(tmp_path / "refs" / f"s{i}.png", i)
        _save(tmp_path / "real" / f"r{i}.png", 10 + i)
        _save(tmp_path / "gen/a" / f"s{i}.png", 20 + i)
        _save(tmp_path / "gen/b" / f"s{i}.png", 30 + i)
        _save(tmp_path / "subjects" / f"p{i}.png", 40 + i)
    lines = [
        {"id": f"s{i}", "prompt": "x" * (i + 1), "references": [f"subjects/p{i}.png", "subjects/p0.png"]}
        for i in range(3)
    ]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


#: (config entry, the inputs the planner must fill) for every kind of wiring among the built-in cards
ENTRIES = [
    ('name = "psnr"', ("reference",)),  # MATCHED
    ('name = "clip_t"', ("prompt",)),  # alias; PROMPT
    ('name = "clipscore"\nlabel = "cs_attr"\nattributes = ["a", "b"]', ()),  # PROMPT replaced by an option
    ('name = "raclip"', ("prompt",)),
    ('name = "hcs"\nattributes = ["a", "b"]', ("real",)),  # REAL_SET at sample level
    ('name = "mie"', ("reference_sets", "prompt")),  # IMAGE_LIST + PROMPT
    ('name = "tpips"\naspects = ["overall", "color"]', ("reference", "aspects")),  # MATCHED + ASPECTS
    ('name = "sad"\nattributes = ["a", "b"]', ("real",)),  # set level
]


def _config(root: Path) -> Path:
    metrics = "".join(f"[[metrics]]\n{e}\n\n" for e, _ in ENTRIES)
    cfg = root / "board.toml"
    cfg.write_text(
        textwrap.dedent("""\
        [data]
        references = "refs"
        real = "real"
        prompts = "prompts.jsonl"

        [[generators]]
        name = "a"
        images = "gen/a"

        [[generators]]
        name = "b"
        images = "gen/b"

        """)
        + metrics
    )
    return cfg


def _wiring(plan) -> list:
    out = []
    for mp in plan.metrics:
        samples = {g: [(s.id, s.reference, s.condition) for s in ss] for g, ss in mp.samples.items()}
        out.append((mp.spec.label, mp.uses, samples, mp.real, [c.name for c in mp.columns]))
    return out


@pytest.fixture
def reworded():
    """Every built-in card with its input descriptions replaced by misleading prose; restored after."""
    registry._load_all()
    saved = dict(registry._CARDS)

    def apply() -> None:
        for card in saved.values():
            inputs = {role: MISLEADING for role in card.inputs}
            registry.register_metric(dataclasses.replace(card, inputs=inputs), overwrite=True)

    yield apply
    for card in saved.values():
        registry.register_metric(card, overwrite=True)


def test_planner_wires_every_kind_from_typed_fields(data):
    plan = build_plan(load_config(_config(data)), check_construct=False)
    assert [mp.uses for mp in plan.metrics] == [uses for _, uses in ENTRIES]
    by = {mp.spec.label: mp for mp in plan.metrics}
    a = {s.id: s for s in by["psnr"].samples["a"]}
    assert a["s1"].reference == data / "refs" / "s1.png" and a["s1"].condition is None
    assert [s.condition for s in by["clip_t"].samples["b"]] == ["x", "xx", "xxx"]
    assert by["mie"].samples["a"][2].reference == [data / "subjects/p2.png", data / "subjects/p0.png"]
    assert sorted(p.name for p in by["hcs"].real) == ["r0.png", "r1.png", "r2.png"]
    assert by["hcs"].samples["a"][0].reference is None  # the real set is fed once, not per sample


def test_rewording_card_descriptions_changes_nothing(data, reworded, capsys):
    cfg = _config(data)
    before = _wiring(build_plan(load_config(cfg), check_construct=False))
    rc, out_before, err = _score(["psnr", "-r", str(data / "refs"), "-c", str(data / "gen/a")], capsys)
    assert rc == 0, err
    reworded()
    assert get_card("psnr").inputs["reference"] == MISLEADING
    assert _wiring(build_plan(load_config(cfg), check_construct=False)) == before
    assert _score(["psnr", "-r", str(data / "refs"), "-c", str(data / "gen/a")], capsys)[1] == out_before
    rc, _, err = _score(
        ["psnr", "-c", str(data / "gen/a")], capsys
    )  # still required, whatever the prose says
    assert rc == 2 and "--reference is required" in err


def _score(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["score", *args, "--json"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_card_typed_fields_are_checked():
    with pytest.raises(ValueError, match="reference='nothing' is not one of"):
        MetricCard(
            name="x",
            factory="m:X",
            family="f",
            summary="",
            inputs={"candidates": "c"},
            higher_is_better=True,
            range=None,
            reference="nothing",
        )
    with pytest.raises(ValueError, match="does not describe a 'reference' role"):
        MetricCard(
            name="x",
            factory="m:X",
            family="f",
            summary="",
            inputs={"candidates": "c"},
            higher_is_better=True,
            range=None,
            reference=ReferenceKind.MATCHED,
        )
    with pytest.raises(ValueError, match="condition_option"):
        MetricCard(
            name="x",
            factory="m:X",
            family="f",
            summary="",
            inputs={"candidates": "c"},
            higher_is_better=True,
            range=None,
            condition=ConditionKind.ATTRIBUTES,
        )
    card = MetricCard(
        name="x",
        factory="m:X",
        family="f",
        summary="",
        inputs={"reference": "r", "candidates": "c"},
        higher_is_better=True,
        range=None,
        reference="real_set",
        reference_need="optional",
    )
    assert card.reference is ReferenceKind.REAL_SET and not card.feeds("reference")
    assert card.to_dict()["reference"] == "real_set"


def test_score_feeds_a_real_set_reference_as_a_set(data, capsys):
    """hcs's reference is the real set (REAL_SET): fed whole, never matched by stem (the real files here share
    no stem with the candidates), and equal to the API's update(reference=...), update(candidates=...).

    The two are equal *by construction*, so the comparison is exact: the API side is fed exactly the chunks
    the CLI feeds (``--batch-size 2``: the real set in chunks of 2, then the candidates in chunks of 2). With
    other chunks the float32 image embeddings come from matrix products of another shape, which some CPUs
    (an Intel Xeon with AVX-512/AMX) sum in another order: 1.6e-6 apart on a score of ~50, i.e. within
    float32 rounding (1.19e-7 relative, times a few reductions) but not equal."""
    from genmetrics.backbones.provider import use_provider
    from genmetrics.testing import tiny_backbones

    real, gen = sorted((data / "real").iterdir()), sorted((data / "gen/a").iterdir())
    with use_provider(tiny_backbones):
        rc, out, err = _score(
            [
                "hcs",
                "-r",
                str(data / "real"),
                "-c",
                str(data / "gen/a"),
                "--attributes",
                "a,b c",
                "--batch-size",
                "2",
            ],
            capsys,
        )
        assert rc == 0, err
        m = gm.create_metric("hcs", attributes="a,b c", batch_size=2)
        for i in range(0, len(real), 2):
            m.update(reference=[str(p) for p in real[i : i + 2]])
        for i in range(0, len(gen), 2):
            m.update(candidates=[str(p) for p in gen[i : i + 2]], ids=[p.stem for p in gen[i : i + 2]])
    res = json.loads(out)
    assert res["value"] == m.compute().tolist()
    assert res["per_sample"]["ids"] == ["s0", "s1", "s2"]
    rc, _, err = _score(["hcs", "-c", str(data / "gen/a"), "--attributes", "a,b"], capsys)
    assert rc == 2 and "--reference is required (the real images, as a set)" in err
    rc, _, err = _score(["sad", "-r", str(data / "real"), "-c", str(data / "gen/a"), "-t", "a"], capsys)
    assert rc == 2 and "takes no --condition (give the attributes with --attributes)" in err


# ------------------------------------------------------------------------------ a plugin, by entry point
PLUGIN = '''
import torch

from genmetrics.data.io.images import as_image_list, to_tensor
from genmetrics.core.metric import SampleMetric, as_text_list
from genmetrics.core.registry import ConditionKind, MetricCard, ReferenceKind


class Gap(SampleMetric):
    """1000 * |mean(candidate) - mean(reference)| + len(prompt)."""

    name = "demo_gap"

    def prepare(self, reference, candidates, condition):
        return {"reference": as_image_list(reference, name="reference"),
                "candidates": as_image_list(candidates, name="candidates"),
                "condition": as_text_list(condition)}

    def score_batch(self, batch):
        mean = lambda xs: torch.stack([to_tensor(x).double().mean() for x in xs])
        lens = torch.tensor([float(len(t)) for t in batch["condition"]], dtype=torch.float64)
        return 1000 * (mean(batch["candidates"]) - mean(batch["reference"])).abs() + lens


CARD = MetricCard(name="demo_gap", factory="gm_demo_plugin:Gap", family="demo", summary="a plugin",
                  inputs={"reference": "images", "candidates": "images", "condition": "texts"},
                  higher_is_better=False, range=None, reference=ReferenceKind.MATCHED, condition=ConditionKind.PROMPT)
'''


@pytest.fixture
def plugin_env(tmp_path):
    site = tmp_path / "site"
    (site / "gm_demo_plugin").mkdir(parents=True)
    (site / "gm_demo_plugin" / "__init__.py").write_text(PLUGIN)
    dist = site / "gm_demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gm-demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[genmetrics.metrics]\ndemo_gap = gm_demo_plugin:CARD\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "GENMETRICS_PROGRESS": "0"}


def _expected_gap(cand: Path, ref: Path, prompt: str) -> float:
    mean = lambda p: np.asarray(Image.open(p).convert("RGB"), dtype=np.float64).mean() / 255.0  # noqa: E731
    return 1000 * abs(mean(cand) - mean(ref)) + len(prompt)


def _cli(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genmetrics", *args],
        env=env,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_entry_point_plugin_works_in_score_and_leaderboard(data, plugin_env):
    proc = _cli(plugin_env, "list", "--json", cwd=data)
    assert proc.returncode == 0, proc.stderr
    assert "demo_gap" in [m["name"] for m in json.loads(proc.stdout)]
    # score: the matched reference and the condition come from the card's typed fields
    proc = _cli(
        plugin_env, "score", "demo_gap", "-r", "refs", "-c", "gen/a", "-t", "abcd", "--json", cwd=data
    )
    assert proc.returncode == 0, proc.stderr
    per = json.loads(proc.stdout)["per_sample"]
    expected = {
        f"s{i}": _expected_gap(data / f"gen/a/s{i}.png", data / f"refs/s{i}.png", "abcd") for i in range(3)
    }
    assert dict(zip(per["ids"], per["scores"])) == pytest.approx(expected, abs=1e-4)  # float32 image means
    proc = _cli(plugin_env, "score", "demo_gap", "-c", "gen/a", "-t", "abcd", cwd=data)
    assert proc.returncode == 2 and "--reference is required" in proc.stderr
    # leaderboard: matched reference per stem and the prompt of each id from the prompts file
    cfg = data / "plugin.toml"
    cfg.write_text(
        '[data]\nreferences = "refs"\nprompts = "prompts.jsonl"\n\n[[generators]]\nname = "a"\n'
        'images = "gen/a"\n\n[[generators]]\nname = "b"\nimages = "gen/b"\n\n[[metrics]]\nname = "demo_gap"\n'
    )
    proc = _cli(plugin_env, "leaderboard", str(cfg), "--out", "board", cwd=data)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (data / "board" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for r in rows:
        i = int(r["id"][1:])
        want = _expected_gap(
            data / "gen" / r["generator"] / f"{r['id']}.png", data / "refs" / f"{r['id']}.png", "x" * (i + 1)
        )
        assert r["score"] == pytest.approx(want, abs=1e-4)


# ------------------------------------------------------------------------------ the clip_t alias
def test_clip_t_is_an_alias_of_clipscore_listed_as_such(capsys):
    from genmetrics.testing import random_images, tiny_clip

    assert registry.alias_of("clip_t") == "clipscore" and get_card("clip_t") is get_card("clipscore")
    model, tok = tiny_clip()
    imgs, texts = random_images(3, 32, seed=5), ["a red car", "a dog", "two people"]
    a = gm.create_metric("clip_t", backbone=model, tokenizer=tok)
    b = gm.create_metric("clipscore", backbone=model, tokenizer=tok)
    assert torch.equal(a(candidates=imgs, condition=texts), b(candidates=imgs, condition=texts))
    assert main(["list", "--json"]) == 0
    cards = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert cards["clip_t"]["alias_of"] == "clipscore" and cards["clipscore"]["alias_of"] is None
    assert main(["list", "clip*"]) == 0
    assert "alias of clipscore" in next(
        ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("clip_t")
    )
    with pytest.raises(ValueError, match="already registered"):
        registry.register_metric(dataclasses.replace(get_card("psnr"), name="psnr2", aliases=("clip_t",)))


def test_planner_and_score_name_no_metric_and_parse_no_prose():
    """The wiring code holds no metric name (string constant) and no regular expression over card text."""
    import ast

    names = set(gm.list_metrics())
    for rel in (
        "genmetrics/core/wiring.py",
        "genmetrics/leaderboard/plan.py",
        "genmetrics/cli/score.py",
    ):
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not consts & names, (rel, consts & names)
        imported = {
            a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names
        }
        assert "re" not in imported, rel
        reads_inputs = [
            n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "inputs"
        ]
        assert not reads_inputs, (rel, "reads card.inputs (prose) at lines", reads_inputs)
