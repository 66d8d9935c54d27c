"""CLI list/info/score on weight-free baselines with real files, and error exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from PIL import Image

from genmetrics.cli.main import main


@pytest.fixture
def folders(tmp_path):
    g = torch.Generator().manual_seed(0)
    for d in ("ref", "gen"):
        (tmp_path / d).mkdir()
    for i in range(4):
        ref = torch.randint(0, 256, (16, 16, 3), generator=g, dtype=torch.uint8)
        noise = torch.randint(-20, 21, (16, 16, 3), generator=g)
        gen = (ref.int() + noise).clamp(0, 255).to(torch.uint8)
        Image.fromarray(ref.numpy()).save(tmp_path / "ref" / f"s{i}.png")
        Image.fromarray(gen.numpy()).save(tmp_path / "gen" / f"s{i}.png")
    return tmp_path


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_and_info(capsys):
    rc, out, _ = run(["list", "--json"], capsys)
    assert rc == 0
    names = [m["name"] for m in json.loads(out)]
    assert {"psnr", "ssim", "clip_i"} <= set(names)
    rc, out, _ = run(["info", "psnr", "--json"], capsys)
    assert rc == 0 and json.loads(out)["higher_is_better"] is True


def test_score_matches_python_api(folders, capsys, tmp_path):
    import genmetrics as gm

    out_file = tmp_path / "per.jsonl"
    rc, out, err = run(
        [
            "score",
            "psnr",
            "--reference",
            str(folders / "ref"),
            "--candidates",
            str(folders / "gen"),
            "--json",
            "--out",
            str(out_file),
            "--batch-size",
            "3",
        ],
        capsys,
    )
    assert rc == 0, err
    res = json.loads(out)
    refs = sorted((folders / "ref").iterdir())
    gens = sorted((folders / "gen").iterdir())
    expected = gm.create_metric("psnr").compute([str(p) for p in refs], [str(p) for p in gens])
    assert res["value"] == pytest.approx(float(expected), abs=1e-9)
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["s0", "s1", "s2", "s3"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["score", "psnrr", "--candidates", "x"], "did you mean 'psnr'"),
        (["score", "psnr", "--candidates", "/nope"], "does not exist"),
        (
            ["score", "psnr", "--option", "max_dbb=3", "--candidates", "{gen}", "--reference", "{ref}"],
            "unknown option",
        ),
        (["score", "psnr", "--candidates", "{gen}"], "--reference is required"),
        (["info", "nothing"], "unknown metric"),
        (["score", "psnr"], "Missing option"),
    ],
)
def test_errors_exit_2_with_one_line(folders, capsys, argv, fragment):
    argv = [a.format(gen=folders / "gen", ref=folders / "ref") for a in argv]
    rc, out, err = run(argv, capsys)
    assert rc == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], err
    assert "Traceback" not in err


def test_corrupt_file_named_before_scoring(folders, capsys):
    (folders / "gen" / "s1.png").write_bytes(b"garbage")
    rc, _, err = run(
        ["score", "psnr", "--reference", str(folders / "ref"), "--candidates", str(folders / "gen")], capsys
    )
    assert rc == 2 and "s1.png" in err


def test_console_script_entry(folders):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "genmetrics",
            "score",
            "ssim",
            "-r",
            str(folders / "ref"),
            "-c",
            str(folders / "gen"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ssim:")
    proc = subprocess.run(
        [sys.executable, "-m", "genmetrics", "--debug", "info", "zzz"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" in proc.stderr
