"""Paths, resume and non-finite values on the leaderboard: resume identifies inputs by content and options by the
manifest, foreign rows are refused with file:line, non-finite scores are never written or ranked, and an
output folder has one writer at a time."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from lb_helpers import toml_config
from PIL import Image

from genmetrics.cli.main import main
from genmetrics.data.output.lock import OutputLock
from genmetrics.data.output.rows import read_results
from genmetrics.errors import InputError
from genmetrics.leaderboard import run_leaderboard

SPY = '[[metrics]]\nname = "_lb_spy"\n'


def _bmp_set(root, n=4, seed=0):
    """refs/ and gen/{a,b}/ as BMP files: a BMP's size depends only on its dimensions, so replacing one
    image by another keeps the name and the byte size (what a name+size check cannot see)."""
    rng = np.random.default_rng(seed)
    for sub in ("refs", "gen/a", "gen/b"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / sub / f"s{i}.bmp")
    return toml_config(root, SPY, generators=["a", "b"])


def test_resume_rescores_images_replaced_with_same_name_and_size(tmp_path, capsys):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    target = tmp_path / "set" / "gen" / "a" / "s1.bmp"
    size = target.stat().st_size
    Image.fromarray(np.full((16, 16, 3), 7, np.uint8)).save(target)
    assert target.stat().st_size == size
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert res.scored == 1  # exactly the changed row, nothing else
    assert "scored again" in capsys.readouterr().err
    fresh = run_leaderboard(cfg, tmp_path / "fresh", plots=False)
    assert res.results.read_bytes() == fresh.results.read_bytes()


def test_resume_rescores_a_changed_reference(tmp_path):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(tmp_path / "set" / "refs" / "s2.bmp")
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert res.scored == 2  # s2 of both generators
    assert (
        res.results.read_bytes() == run_leaderboard(cfg, tmp_path / "fresh", plots=False).results.read_bytes()
    )


@pytest.mark.parametrize("damage", ["missing", "torn", "not-a-manifest"])
def test_resume_refuses_without_a_readable_manifest(tmp_path, damage):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    m = out / "manifest.json"
    if damage == "missing":
        m.unlink()
    elif damage == "torn":
        m.write_text(m.read_text()[:40])
    else:
        m.write_text("[1, 2]")
    with pytest.raises(
        InputError, match="--resume: .*manifest.json.*options the finished rows were computed with"
    ):
        run_leaderboard(cfg, out, resume=True, plots=False)


def test_resume_with_an_empty_folder_and_no_manifest_starts(tmp_path):
    cfg = _bmp_set(tmp_path / "set")
    res = run_leaderboard(cfg, tmp_path / "new", resume=True, plots=False)
    assert res.scored == 8


FOREIGN = {
    "a list": "[1, 2]",
    "an empty object": "{}",
    "a string score": '{"generator":"a","metric":"_lb_spy","id":"s0","score":"12.5"}',
    "a boolean score": '{"generator":"a","metric":"_lb_spy","id":"s0","score":true}',
    "an unknown generator": '{"generator":"zz","metric":"_lb_spy","id":"s0","score":1.0}',
    "an unknown metric": '{"generator":"a","metric":"psnrr","id":"s0","score":1.0}',
    "an unknown id": '{"generator":"a","metric":"_lb_spy","id":"s99","score":1.0}',
    "a number id": '{"generator":"a","metric":"_lb_spy","id":0,"score":1.0}',
    "a null score of a per-image metric": '{"generator":"a","metric":"_lb_spy","id":"s0","score":null}',
}


@pytest.mark.parametrize("what", list(FOREIGN))
def test_resume_refuses_rows_that_are_not_result_rows_with_file_and_line(tmp_path, what):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    lines = (out / "results.jsonl").read_text().splitlines()
    lines.insert(2, FOREIGN[what])
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"results\.jsonl:3: not a result row of this run"):
        run_leaderboard(cfg, out, resume=True, plots=False)


def test_resume_refusal_is_one_cli_line(tmp_path, capsys):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    assert main(["leaderboard", str(cfg), "--out", str(out), "--no-plots"]) == 0
    with open(out / "results.jsonl", "a") as f:
        f.write('{"generator":"a","metric":"_lb_spy","id":"s0","score":"nan"}\n{"x":1}\n')
    capsys.readouterr()
    assert main(["leaderboard", str(cfg), "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "results.jsonl:9:" in err[0], err


NAN = '[[metrics]]\nname = "_lb_nan"\n'


def test_non_finite_scores_are_refused_naming_the_sample(tmp_path):
    cfg = _bmp_set(tmp_path / "set")
    cfg.write_text(cfg.read_text().replace(SPY, NAN))
    with pytest.raises(InputError, match=r"a/s1 for _lb_nan: the score is nan \(not finite\)"):
        run_leaderboard(cfg, tmp_path / "out", plots=False)


def test_non_finite_scores_with_skip_are_reported_and_never_ranked(tmp_path):
    cfg = _bmp_set(tmp_path / "set")
    cfg.write_text(cfg.read_text().replace(SPY, NAN))
    res = run_leaderboard(cfg, tmp_path / "out", plots=False, on_error="skip")
    rows = read_results(res.results)
    assert {(r["generator"], r["id"]) for r in rows} == {(g, f"s{i}") for g in "ab" for i in (0, 2, 3)}
    skipped = read_results(res.out / "skipped.jsonl")
    assert sorted((r["generator"], r["id"]) for r in skipped) == [("a", "s1"), ("b", "s1")]
    col = res.summary["columns"]["_lb_nan"]["generators"]["a"]
    assert col["n"] == 3 and np.isfinite(col["mean"])
    # the mean is over the three finite rows only (an explicit second computation)
    assert col["mean"] == pytest.approx(np.mean([r["score"] for r in rows if r["generator"] == "a"]))
    assert not re.search(r"(?<!\w)nan(?!\w)", (res.out / "leaderboard.md").read_text().lower())


def test_a_second_writer_on_the_same_folder_refuses(tmp_path, capsys):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    out.mkdir()
    lock = OutputLock(out)  # stands for a run in progress (another process in real life)
    try:
        with pytest.raises(InputError, match="is in use by another run"):
            run_leaderboard(cfg, out, plots=False)
        assert not (out / "results.jsonl").exists()  # refused before touching anything
        assert main(["leaderboard", str(cfg), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in use by another run (pid" in err[0], err
    finally:
        lock.release()
    assert run_leaderboard(cfg, out, plots=False).scored == 8  # released: the folder is usable again


def test_manifest_records_the_input_of_every_row(tmp_path):
    cfg = _bmp_set(tmp_path / "set")
    res = run_leaderboard(cfg, tmp_path / "out", plots=False)
    rows = read_results(res.results)
    assert all(isinstance(r["input"], str) and len(r["input"]) == 16 for r in rows)
    # same candidate bytes under two generators with different references would differ; here a and b
    # hold different images, so every row's input differs from its neighbour's
    assert len({r["input"] for r in rows}) == len(rows)
    assert json.loads((res.out / "manifest.json").read_text())["status"] == "complete"


def test_references_without_a_candidate_are_named(tmp_path, capsys):
    cfg = _bmp_set(tmp_path / "set")
    (tmp_path / "set" / "gen" / "b" / "s3.bmp").unlink()
    res = run_leaderboard(cfg, tmp_path / "out", plots=False)
    err = capsys.readouterr().err
    assert (
        "generator 'b': references" in err
        and "1 reference image(s) have no candidate" in err
        and "s3.bmp" in err
    )
    assert "generator 'a'" not in err  # a uses every reference
    assert res.scored == 7
