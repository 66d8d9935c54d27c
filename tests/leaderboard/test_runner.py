"""The runner: results rows, resume, streaming, set-level metrics, input plumbing, summary and reports."""

from __future__ import annotations

import csv
import io
import json
import os
import re

import lb_fakes
import numpy as np
import pytest
import torch
from lb_helpers import toml_config, write_images
from PIL import Image

from genmetrics.data.output import hashes as results_module
from genmetrics.data.output.hashes import HashCache
from genmetrics.data.output.rows import read_results
from genmetrics.errors import InputError
from genmetrics.functional.bootstrap import bootstrap_ci, paired_bootstrap
from genmetrics.leaderboard import SET_ID, run_leaderboard
from genmetrics.leaderboard import runner as runner_module
from genmetrics.leaderboard.runner import HASHES
from tests.cli.test_offline_hub import dead_hub  # noqa: F401 - a fixture
from tests.reliability.hostile import Cases, _plant_link

SPY_SET = '[[metrics]]\nname = "_lb_spy"\n\n[[metrics]]\nname = "_lb_set"\n'
GENS = ["mid", "bad", "good"]


def _keys(rows):
    return [(r["generator"], r["metric"], r["id"]) for r in rows]


def test_rows_summary_and_ranking(small_set, tmp_path):
    cfg = toml_config(small_set, SPY_SET, extra="[run]\nn_boot = 300\nseed = 7\n")
    res = run_leaderboard(cfg, tmp_path / "out", plots=False)
    rows = read_results(res.results)
    keys = _keys(rows)
    assert len(keys) == len(set(keys)) == 3 * 6 + 3
    # canonical order: metric, generator (config order), id
    assert keys[:6] == [("mid", "_lb_spy", f"s{i:02d}") for i in range(6)]
    assert keys[-3:] == [(g, "_lb_set", SET_ID) for g in GENS]
    s = res.summary
    assert s["generators"] == ["good", "mid", "bad"]  # less noise is better
    assert [r["generator"] for r in s["ranking"]] == ["good", "mid", "bad"]
    assert s["rank_by"] == "_lb_spy"
    # the mean and CI are the bootstrap of exactly the rows written
    for g in GENS:
        vals = [r["score"] for r in rows if r["generator"] == g and r["metric"] == "_lb_spy"]
        est, lo, hi = bootstrap_ci(vals, n_boot=300, alpha=0.05, seed=7)
        e = s["columns"]["_lb_spy"]["generators"][g]
        assert (e["mean"], e["low"], e["high"], e["n"]) == (est, lo, hi, 6)
    # paired comparisons on shared ids, in ranking order
    pairs = s["columns"]["_lb_spy"]["paired"]
    assert [(p["a"], p["b"]) for p in pairs] == [("good", "mid"), ("good", "bad"), ("mid", "bad")]
    by = {(r["generator"], r["id"]): r["score"] for r in rows if r["metric"] == "_lb_spy"}
    ids = sorted(f"s{i:02d}" for i in range(6))
    want = paired_bootstrap(
        [by["good", i] for i in ids], [by["mid", i] for i in ids], n_boot=300, alpha=0.05, seed=7
    )
    assert {k: pairs[0][k] for k in want} == want
    # set-level: one row per generator, value per attribute, no CI, lower is better
    set_rows = [r for r in rows if r["metric"] == "_lb_set"]
    assert all(
        r["id"] == SET_ID and r["labels"] == ["red", "green", "blue"] and len(r["value"]) == 3
        for r in set_rows
    )
    for r in set_rows:
        assert r["score"] == pytest.approx(float(np.mean(np.abs(r["value"]))))
        assert r["n"] == 6 and r["n_real"] == 6
    e = s["columns"]["_lb_set"]
    assert e["level"] == "set" and e["higher_is_better"] is False and e["paired"] == []
    assert e["generators"]["good"]["low"] is None


def test_reports(small_set, tmp_path):
    cfg = toml_config(
        small_set,
        SPY_SET + '\n[[metrics]]\nname = "_lb_set"\nlabel = "set_map"\ngrid = true\n',
        extra='[run]\nn_boot = 200\ntitle = "Test board"\n',
    )
    res = run_leaderboard(cfg, tmp_path / "out")
    out = res.out
    md = (out / "leaderboard.md").read_text()
    assert md.startswith("# Test board\n")

    def cells(line: str) -> list[str]:  # a Markdown row's cells as shown (padding and escapes removed)
        return [c.strip().replace("\\", "") for c in line.strip().strip("|").split(" | ")]

    table = [cells(ln) for ln in md.splitlines() if re.match(r"\|\s*\d+ \|", ln)]
    assert [row[1] for row in table] == ["good", "mid", "bad"]
    header = next(cells(ln) for ln in md.splitlines() if ln.startswith("| rank"))
    assert header == ["rank", "generator", "images", "_lb_spy ↑", "_lb_set ↓ (set)", "set_map ↓ (set)"]
    assert "## Paired comparisons" in md and "### \\_lb_spy ↑" in md
    # csv: one row per generator, best first, mean/low/high/n per column, parsable numbers
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    assert [r["generator"] for r in rows] == ["good", "mid", "bad"]
    assert float(rows[0]["_lb_spy_low"]) <= float(rows[0]["_lb_spy"]) <= float(rows[0]["_lb_spy_high"])
    assert rows[0]["_lb_set_low"] == "" and rows[0]["_lb_spy_n"] == "6"
    paired = list(csv.DictReader(io.StringIO((out / "paired.csv").read_text())))
    assert len(paired) == 3 and {p["metric"] for p in paired} == {"_lb_spy"}
    # plots: bars per column, per-attribute bars and one heatmap per generator for the [4,3] map
    names = sorted(p.name for p in (out / "plots").iterdir())
    assert {"_lb_spy.png", "_lb_set.png", "_lb_set_per_attribute.png", "set_map.png"} <= set(names)
    assert {f"set_map_{g}_heatmap.png" for g in GENS} <= set(names)
    for n in names:
        assert (out / "plots" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # html is self-contained: every plot embedded, nothing fetched
    html = (out / "leaderboard.html").read_text()
    assert html.count("data:image/png;base64,") == len(names)
    assert not re.search(r"src=\"(?!data:)", html)
    # the only links: one gallery page per generator (self-contained too)
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert sorted(hrefs) == sorted(f"gallery/{g}.html" for g in GENS)
    for h in hrefs:
        assert not re.search(r"src=\"(?!data:)", (out / h).read_text())
    s = json.loads((out / "summary.json").read_text())
    assert s["generators"] == ["good", "mid", "bad"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["seed"] == 0 and m["versions"]["torch"]
    assert m["metrics"]["set_map"]["identity"]["options"] == {"grid": True}
    assert set(m["inputs"]) == {"generators[0]", "generators[1]", "generators[2]", "data.references"}
    assert m["config_sha256"] and m["command"]


def test_no_plots(small_set, tmp_path):
    res = run_leaderboard(toml_config(small_set, SPY_SET), tmp_path / "out", plots=False)
    assert not (res.out / "plots").exists()
    assert "## Plots" not in (res.out / "leaderboard.md").read_text()


def test_streams_in_chunks_with_flat_state(small_set, tmp_path):
    cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_spy"\n')
    run_leaderboard(cfg, tmp_path / "out", batch_size=4, plots=False)
    assert lb_fakes.CALLS["created"] == 2  # once to check the options, once to score
    assert lb_fakes.CALLS["updates"] == 3 * 2  # 6 images per generator in chunks of 4
    assert lb_fakes.CALLS["max_batch"] == 4
    assert lb_fakes.CALLS["max_pending"] == 0  # the state is reset after every chunk


def test_results_do_not_depend_on_batch_size(small_set, tmp_path):
    cfg = toml_config(small_set, SPY_SET)
    a = run_leaderboard(cfg, tmp_path / "a", batch_size=1, plots=False)
    b = run_leaderboard(cfg, tmp_path / "b", batch_size=5, plots=False)
    assert a.results.read_bytes() == b.results.read_bytes()
    assert (a.out / "leaderboard.csv").read_bytes() == (b.out / "leaderboard.csv").read_bytes()


def test_resume_after_torn_last_line(small_set, tmp_path):
    cfg = toml_config(small_set, SPY_SET)
    full = run_leaderboard(cfg, tmp_path / "full", plots=False)
    want = full.results.read_bytes()
    out = tmp_path / "partial"
    run_leaderboard(cfg, out, plots=False)
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    # keep 8 rows and half of the ninth, as a kill in the middle of a write leaves it
    (out / "results.jsonl").write_bytes(b"".join(lines[:8]) + lines[8][: len(lines[8]) // 2])
    lb_fakes.CALLS["updates"] = 0
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert res.results.read_bytes() == want
    assert res.scored == len(lines) - 8
    for f in ("summary.json", "leaderboard.md", "leaderboard.csv", "paired.csv"):
        assert (out / f).read_bytes() == (full.out / f).read_bytes(), f
    m = json.loads((out / "manifest.json").read_text())
    assert m["resumed"] is True and len(m["runs"]) == 2
    # resuming a finished run scores nothing and changes nothing
    lb_fakes.CALLS["updates"] = 0
    again = run_leaderboard(cfg, out, resume=True, plots=False)
    assert again.scored == 0 and lb_fakes.CALLS["updates"] == 0
    assert again.results.read_bytes() == want


def test_resume_keeps_leftover_shards_without_duplicates(small_set, tmp_path):
    """Rows of a killed multi-process run (shard files) count as done and are merged exactly once."""
    cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_spy"\n')
    full = run_leaderboard(cfg, tmp_path / "full", plots=False)
    rows = full.results.read_bytes().splitlines(keepends=True)
    out = tmp_path / "o"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "rank-00000.jsonl").write_bytes(b"".join(rows[0:10:2]))
    (out / "shards" / "rank-00001.jsonl").write_bytes(b"".join(rows[1:10:2]) + rows[10][:7])
    (out / "results.jsonl").write_bytes(b"".join(rows[3:5]))  # overlaps the shards
    (out / "manifest.json").write_bytes((full.out / "manifest.json").read_bytes())  # the killed run wrote one
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert res.scored == len(rows) - 10
    assert res.results.read_bytes() == full.results.read_bytes()
    assert not (out / "shards").exists()


def test_fresh_run_replaces_old_results(small_set, tmp_path):
    cfg = toml_config(small_set, SPY_SET)
    out = tmp_path / "out"
    first = run_leaderboard(cfg, out, plots=False).results.read_bytes()
    (out / "results.jsonl").write_text('{"generator":"x","metric":"y","id":"z","score":1}\n')
    assert run_leaderboard(cfg, out, plots=False).results.read_bytes() == first


def test_resume_refuses_changed_options_or_inputs(small_set, tmp_path):
    cfg = toml_config(small_set, SPY_SET)
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    changed = toml_config(
        small_set, SPY_SET.replace('"_lb_spy"\n', '"_lb_spy"\nmax_db = 50\n', 1), name="changed.toml"
    )
    with pytest.raises(
        InputError, match=r"changed\.toml:\d+: metrics\[0\]: metric '_lb_spy' is configured differently"
    ):
        run_leaderboard(changed, out, resume=True)
    # batch size and device do not change results: resuming with others is fine
    run_leaderboard(cfg, out, resume=True, batch_size=2, device="cpu", plots=False)
    write_images(small_set / "gen" / "good", ["s99"], seed=5)
    write_images(small_set / "refs", ["s99"], seed=6)
    with pytest.raises(InputError, match=r"generators\[2\]: the image files changed"):
        run_leaderboard(cfg, out, resume=True)


def test_prompts_aspects_reference_lists_and_vectors(small_set, tmp_path):
    lines = [
        json.dumps({"id": f"s{i:02d}", "prompt": "p" * (i + 1), "references": ["refs/s00.png"] * (1 + i % 3)})
        for i in range(6)
    ]
    (small_set / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    metrics = (
        '[[metrics]]\nname = "_lb_prompt"\n\n[[metrics]]\nname = "_lb_aspect"\naspects = ["overall", "shape"]\n\n'
        '[[metrics]]\nname = "_lb_refsets"\n\n[[metrics]]\nname = "_lb_vector"\n'
    )
    cfg = toml_config(small_set, metrics, generators=["good", "bad"], extra='prompts = "prompts.jsonl"\n')
    res = run_leaderboard(cfg, tmp_path / "out", plots=False)
    rows = read_results(res.results)
    by = {(r["generator"], r["metric"], r["id"]): r for r in rows}
    for i in range(6):
        sid = f"s{i:02d}"
        assert by["good", "_lb_prompt", sid]["score"] // 1000 == i + 1  # its own prompt arrived
        assert 1 + i % 3 <= by["good", "_lb_refsets", sid]["score"] < 2 + i % 3  # its own reference list
        assert by["good", "_lb_aspect[overall]", sid]["aspect"] == "overall"
        assert 7 <= by["good", "_lb_aspect[overall]", sid]["score"] < 8  # len("overall") + |diff| < 1
        assert 5 <= by["good", "_lb_aspect[shape]", sid]["score"] < 6
        v = by["bad", "_lb_vector", sid]
        assert len(v["scores"]) == 3 and v["score"] == pytest.approx(float(np.mean(v["scores"])))
    s = res.summary
    assert list(s["columns"]) == [
        "_lb_prompt",
        "_lb_aspect[overall]",
        "_lb_aspect[shape]",
        "_lb_refsets",
        "_lb_vector",
    ]
    assert s["columns"]["_lb_vector"]["higher_is_better"] is None
    assert "_lb_vector" in (res.out / "leaderboard.md").read_text()


def test_python_objects_as_options_and_rank_by(small_set, tmp_path):
    class Marker:
        pass

    cfg = toml_config(small_set, SPY_SET, extra='[run]\nrank_by = "_lb_set"\n')
    with pytest.raises(InputError, match="metric_kwargs names"):
        run_leaderboard(cfg, tmp_path / "x", metric_kwargs={"nope": {}})
    res = run_leaderboard(cfg, tmp_path / "out", metric_kwargs={"_lb_spy": {"max_db": 80.0}}, plots=False)
    assert res.summary["rank_by"] == "_lb_set" and res.summary["higher_is_better"] is False
    assert res.summary["generators"][0] == "good"
    m = json.loads((res.out / "manifest.json").read_text())
    assert m["metrics"]["_lb_spy"]["identity"]["options"] == {"max_db": 80.0}
    from genmetrics.leaderboard.manifest import describe_option

    assert describe_option({"backbone": Marker(), "x": [1, "a"]}) == {"backbone": "<Marker>", "x": [1, "a"]}


def test_set_value_scores():

    from genmetrics.leaderboard.runner import set_value_score

    assert set_value_score(torch.tensor(0.5)) == (0.5, None)
    assert set_value_score(torch.tensor([1.0, -3.0])) == (2.0, [1.0, -3.0])
    score, full = set_value_score({"mean": torch.tensor(0.25), "per_attribute": torch.tensor([0.2, 0.3])})
    assert score == 0.25 and full == {"mean": 0.25, "per_attribute": pytest.approx([0.2, 0.3])}
    with pytest.raises(TypeError):
        set_value_score("x")


def test_real_set_reference_and_conditional_condition(small_set, tmp_path):
    """A per-sample metric whose reference is the real set as a whole (hcs) gets it once, and keeps it
    across chunks and generators; a condition needed only without an option (raclip's attributes=) is
    not filled when the option is set."""

    from genmetrics.data.io.images import to_tensor

    metrics = (
        '[[metrics]]\nname = "_lb_center"\n\n[[metrics]]\nname = "_lb_attr"\nattributes = ["ab", "abcd"]\n'
    )
    cfg = toml_config(small_set, metrics, generators=["good", "bad"])
    res = run_leaderboard(cfg, tmp_path / "out", batch_size=4, plots=False)
    assert lb_fakes.CALLS["updates"] == 2  # 6 real images in chunks of 4, once for both generators
    refs = sorted((small_set / "refs").glob("*.png"))
    centre = float(torch.stack([to_tensor(str(p)).double().mean() for p in refs]).mean())
    rows = read_results(res.results)
    for r in rows:
        img = to_tensor(str(small_set / "gen" / r["generator"] / f"{r['id']}.png")).double().mean()
        if r["metric"] == "_lb_center":
            assert r["score"] == pytest.approx(abs(float(img) - centre), abs=1e-12)
        else:
            assert r["scores"] == pytest.approx([float(img) + 2, float(img) + 4])
    assert len(rows) == 2 * 2 * 6
    # without attributes the condition is needed: prompts
    cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_attr"\n', name="c2.toml")
    with pytest.raises(InputError, match="'_lb_attr' needs a prompt per image"):
        run_leaderboard(cfg, tmp_path / "out2")


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-link-leaderboard-lock-dangling", "link", "leaderboard --out whose lock file dangles outside", cli=True
)
def _(ctx):
    import yaml

    from genmetrics.data.results import LOCK
    from genmetrics.testing import toy_leaderboard

    cfg = ctx.inp / "board.yaml"
    cfg.write_text(yaml.safe_dump(toy_leaderboard(ctx.inp)))
    _plant_link(ctx.out / LOCK, ctx.outside_dir / "lock")
    ctx.freeze()
    ctx.cli(["leaderboard", str(cfg), "--out", str(ctx.out)], 2, "symbolic link")
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


test_hostile = HOSTILE.test()


# ------------------------------------------------------------------------------ content hashes across --resume
# The content hashes that tell a resumed leaderboard run what changed persist in the run folder
# (``.genmetrics.hashes.json``, keyed by path, size, mtime, ctime and inode), so ``--resume`` does not read
# unchanged files again, and still reads (and rescores) a file replaced by one of the same size, also when its
# modification time was set back.
def _bmp_set(root, n=3):
    """BMP images: the byte size depends only on the dimensions, so a replacement keeps name and size."""
    rng = np.random.default_rng(0)
    for sub in ("refs", "gen/a"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / sub / f"s{i}.bmp")
    cfg = root / "config.toml"
    cfg.write_text(
        '[data]\nreferences = "refs"\n\n[[generators]]\nname = "a"\nimages = "gen/a"\n\n'
        '[[metrics]]\nname = "psnr"\n',
        encoding="utf-8",
    )
    return cfg


@pytest.fixture
def reads(monkeypatch):
    """The files whose bytes were hashed (every hash read goes through ``_sha256_file``)."""
    seen: list[str] = []
    real = results_module._sha256_file

    def counting(path):
        seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(results_module, "_sha256_file", counting)
    return seen


def test_resume_reads_no_unchanged_file_and_rehashes_a_replaced_one(tmp_path, reads):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    assert sorted(reads) == sorted(["s0.bmp", "s1.bmp", "s2.bmp"] * 2)  # each file once, in the first run
    assert (out / HASHES).is_file()

    reads.clear()
    res = run_leaderboard(cfg, out, resume=True, plots=False)  # a new run: only the cache file can help it
    assert reads == [] and res.scored == 0

    target = tmp_path / "set" / "gen" / "a" / "s1.bmp"
    st = target.stat()
    Image.fromarray(np.full((16, 16, 3), 9, np.uint8)).save(target)
    os.utime(
        target, ns=(st.st_atime_ns, st.st_mtime_ns)
    )  # same name, size and mtime: only ctime/inode differ
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert reads == ["s1.bmp"] and res.scored == 1
    fresh = run_leaderboard(cfg, tmp_path / "fresh", plots=False)
    assert res.results.read_bytes() == fresh.results.read_bytes()


@pytest.mark.parametrize("damage", ["torn", "not-json", "wrong-shape", "forged-stamp"])
def test_a_damaged_cache_file_only_costs_a_rehash(tmp_path, reads, damage):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    cache = tmp_path / "hashes.json"
    c = HashCache(cache)
    right = c(f)
    c.save()
    data = json.loads(cache.read_text())
    if damage == "torn":
        cache.write_text(cache.read_text()[:20])
    elif damage == "not-json":
        cache.write_text("[1, 2")
    elif damage == "wrong-shape":
        cache.write_text(json.dumps({"version": 1, "files": {str(f): "0123456789abcdef"}}))
    else:  # an entry for another state of the file (other size) is not used
        entry = data["files"][str(f)]
        cache.write_text(json.dumps({"version": 1, "files": {str(f): [entry[0] + 1, *entry[1:4], "0" * 16]}}))
    reads.clear()
    assert HashCache(cache)(f) == right and reads == ["a.bin"]


def test_the_cache_answers_the_same_as_hashing(tmp_path, reads):
    """Parity: a cached answer equals a fresh sha256 of the bytes (second computation with hashlib)."""
    import hashlib

    f = tmp_path / "img.bin"
    f.write_bytes(os.urandom(3000))
    c = HashCache(tmp_path / "h.json")
    first = c(f)
    c.save()
    again = HashCache(tmp_path / "h.json")(f)
    assert first == again == hashlib.sha256(f.read_bytes()).hexdigest()[:16] and reads == ["img.bin"]


def test_a_resume_needs_the_weights_of_unfinished_metrics_only(
    small_set,
    tmp_path,
    monkeypatch,
    capsys,
    dead_hub,  # noqa: F811 - the fixture imported above
):
    """A run scored clip_i where its weights were; --resume on a machine where they are not (empty caches, the
    hub unreachable) that adds psnr scores psnr and keeps clip_i's rows, and fails before scoring, naming the
    weights, only while clip_i has rows left. Red before the fix: the weights pre-check of the plan (and of
    the command line) refused every resume that named clip_i, finished or not."""
    from genmetrics.backbones import hub
    from genmetrics.backbones.provider import use_provider
    from genmetrics.cli.main import main
    from genmetrics.testing import tiny_backbones

    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    clip = '[[metrics]]\nname = "clip_i"\n'
    extra = "[run]\nn_boot = 20\ncache = false\n"
    out = tmp_path / "out"
    with use_provider(tiny_backbones):  # stands in for the real weights of the first machine
        run_leaderboard(toml_config(small_set, clip, extra=extra), out, plots=False, workers=0)
    manifest = json.loads((out / "manifest.json").read_text())
    for m in manifest["metrics"].values():  # as a run on real weights records it
        m["identity"]["backbone_provider"] = None
    (out / "manifest.json").write_text(json.dumps(manifest))
    finished = read_results(out / "results.jsonl")
    both = toml_config(small_set, clip + '\n[[metrics]]\nname = "psnr"\n', extra=extra, name="both.toml")
    args = ["leaderboard", str(both), "--out", str(out), "--resume", "--no-plots", "--workers", "0"]
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err
    rows = read_results(out / "results.jsonl")
    assert [r for r in rows if r["metric"] == "clip_i"] == finished
    assert len([r for r in rows if r["metric"] == "psnr"]) == len(finished)
    # a clip_i row and a psnr row missing: clip_i's weights are needed and cannot be had; the run stops
    # before it scores anything, the rows are kept
    kept = rows[1:-1]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    hub.forget()
    built = []
    monkeypatch.setattr(runner_module._Run, "_build", lambda self, mp, **kw: built.append(mp) or 1 / 0)
    capsys.readouterr()
    assert main(args) == 1
    assert built == []  # stopped before any metric was built or any image decoded
    err = capsys.readouterr().err
    assert "weights 'ViT-B-32-quickgelu/openai' are not available" in err and "metrics[0]" in err, err
    assert read_results(out / "results.jsonl") == kept
    # --resume into a folder that holds no run yet: the same error, and nothing is created
    hub.forget()
    fresh = [*args[:3], str(tmp_path / "fresh"), *args[4:]]
    assert main(fresh) == 1 and built == [] and not (tmp_path / "fresh").exists()
    hub.forget()


def test_an_output_folder_inside_an_image_folder_with_recursive_is_refused(small_set, tmp_path):
    """With data.recursive = true, --out inside a generator's folder had the run's plots read as images by the
    next run ('1 image(s) have no reference ... psnr.png'). Red before: the first run went ahead. Now it stops
    before anything is written, naming the folder's config key; without recursive the same --out is fine."""
    metrics = '[[metrics]]\nname = "psnr"\n'
    cfg = toml_config(small_set, metrics, extra="recursive = true\n[run]\nn_boot = 20\n")
    for out, key in (
        (small_set / "gen" / "mid" / "out", "generators[0].images"),
        (small_set / "refs", "data.references"),
    ):
        with pytest.raises(InputError, match=rf"{re.escape(key)}: the output folder --out .* is inside") as e:
            run_leaderboard(cfg, out, plots=False, workers=0)
        assert "outside the image folders" in str(e.value)
    assert not (small_set / "gen" / "mid" / "out").exists()
    flat = toml_config(small_set, metrics, extra="[run]\nn_boot = 20\n", name="flat.toml")
    res = run_leaderboard(flat, small_set / "gen" / "mid" / "out", plots=False, workers=0)
    assert res.summary["generators"] == ["good", "mid", "bad"]


def test_a_report_that_cannot_be_written_says_the_rows_are_kept_and_to_resume(small_set, tmp_path):
    """A `gallery` link planted in the output folder is refused when the reports are written, after every row
    is scored. The error named only the link, so a user reran without --resume and scored everything again;
    it now says the rows are kept and that --resume writes the reports (red before), which it does, scoring
    nothing, and the link's target stays empty."""
    cfg = toml_config(small_set, '[[metrics]]\nname = "psnr"\n', extra="[run]\nn_boot = 20\n")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "gallery").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link") as e:
        run_leaderboard(cfg, out, workers=0)
    assert f"kept in {str(out / 'results.jsonl')!r}" in str(e.value) and "with --resume" in str(e.value)
    rows = read_results(out / "results.jsonl")
    assert len(rows) == 3 * 6 and not any(elsewhere.iterdir())
    (out / "gallery").unlink()
    again = run_leaderboard(cfg, out, workers=0, resume=True)
    assert again.scored == 0 and read_results(again.results) == rows and (out / "leaderboard.md").is_file()
