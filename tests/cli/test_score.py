"""genmetrics score: hostile output folders (links, full or read-only disks), extreme image shapes and file names
that are not UTF-8 give one error line or a correct score, and nothing is written outside ``--out``."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from tests.reliability.hostile import Cases, Ctx, _images, _plant_link, _png, _read_only, _tmpfs, _umount

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


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


test_hostile = HOSTILE.test()


def test_an_option_given_twice_is_refused_before_scoring():
    """`--option KEY=...` twice, or with the flag of the same option: one value was dropped without a word (red
    before: exit 0 with the last value). Now exit 2 with one line naming both spellings."""
    import pytest

    from genmetrics.cli.score import _metric_options
    from genmetrics.core.registry import get_card
    from genmetrics.errors import InputError

    card = get_card("psnr")
    args = dict(attributes=None, weights=None, heads=None, adapter=None, batch_size=None, device=None)
    assert _metric_options("psnr", card, ("batch_size=16",), **args) == {"batch_size": 16}
    with pytest.raises(InputError, match=r"--option batch_size=16 and --batch-size both set batch_size"):
        _metric_options("psnr", card, ("batch_size=16",), **{**args, "batch_size": 8})
    with pytest.raises(InputError, match=r"--option device='cpu' and --device both set device"):
        _metric_options("psnr", card, ("device=cpu",), **{**args, "device": "cpu"})
    with pytest.raises(InputError, match=r"--option max_db: given twice"):
        _metric_options("psnr", card, ("max_db=20", "max_db=60"), **args)
    raclip = get_card("raclip")
    with pytest.raises(InputError, match=rf"--option {raclip.condition_option}=.* and --attributes"):
        _metric_options(
            "raclip", raclip, (f"{raclip.condition_option}=a,b",), **{**args, "attributes": "c,d"}
        )


def test_a_broken_link_among_the_candidates_is_named_or_skipped_never_dropped(tmp_path, capsys):
    """`score psnr` on a folder holding a dangling link scored the other images and said nothing of it (n one
    short, the link never named). Now the default stops naming it and --on-error skip reports it; the scores
    of the rest are the same for any --workers and --batch-size."""
    from genmetrics.cli.main import main

    refs, gen = _images(tmp_path / "r", n=5, seed=1), _images(tmp_path / "g", n=5, seed=2)
    names = sorted(p.name for p in gen.iterdir())
    (gen / names[1]).unlink()
    (gen / names[1]).symlink_to(tmp_path / "moved.png")
    args = ["score", "psnr", "-r", str(refs), "-c", str(gen)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert names[1] in err and "broken symbolic link" in err and "--on-error skip" in err
    got = []
    for workers, batch in (("0", "1"), ("2", "1"), ("3", "7")):
        out = tmp_path / f"s{workers}_{batch}.json"
        argv = [
            *args,
            "--on-error",
            "skip",
            "--workers",
            workers,
            "--batch-size",
            batch,
            "--json",
            "--out",
            str(out),
        ]
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert f"skipped {gen / names[1]}" in err
        got.append(json.loads(out.read_text()))
    assert len({json.dumps(g["per_sample"]) for g in got}) == 1  # bitwise the same scores and ids
    assert got[0]["per_sample"]["ids"] == [n.rsplit(".", 1)[0] for n in names if n != names[1]]
    assert got[0]["n"] == len(names) - 1


def test_a_candidate_replaced_by_another_size_during_the_run_is_named_or_skipped(
    tmp_path, capsys, monkeypatch
):
    """A candidate rewritten with another size after the header check (a generator still writing the folder)
    stopped `score ssim` with 'candidates[0]: size ... differs', naming neither the file nor the CLI fix, and
    --on-error skip did not skip it. Now the decoded pair is checked: named, or skipped and reported, with
    the same scores for the rest as a run without that file, for any --workers / --batch-size."""
    from genmetrics.cli import score as score_mod
    from genmetrics.cli.main import main

    refs, gen = _images(tmp_path / "r", n=5, seed=1), _images(tmp_path / "g", n=5, seed=2)
    victim = sorted(gen.iterdir())[2]
    checked = score_mod._drop_bad_files

    def check_then_replace(*a, **k):
        out = checked(*a, **k)
        Image.new("RGB", (8, 12)).save(victim)  # after the check, before the decode
        return out

    monkeypatch.setattr(score_mod, "_drop_bad_files", check_then_replace)
    args = ["score", "ssim", "-r", str(refs), "-c", str(gen)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(victim) in err and "--option resize=to_first" in err and "candidates[0]" not in err
    got = []
    for workers, batch in (("0", "1"), ("2", "7")):
        out = tmp_path / f"s{workers}_{batch}.json"
        argv = [*args, "--on-error", "skip", "--workers", workers, "--batch-size", batch, "--out", str(out)]
        assert main(argv) == 0
        assert f"skipped {victim}: size (12, 8) differs" in capsys.readouterr().err  # named once
        got.append(json.loads(out.read_text()))
    monkeypatch.setattr(score_mod, "_drop_bad_files", checked)
    victim.unlink()
    assert main([*args, "--out", str(tmp_path / "without.json")]) == 0
    without = json.loads((tmp_path / "without.json").read_text())
    assert got[0] == got[1] == without  # bitwise: the skip is the run without the file
