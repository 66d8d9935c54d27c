"""Links planted in output folders: every command that writes refuses to write through a symbolic
link, and the file the link points to stays byte-identical: leaderboard (lock file, results, plots
folder), ``score --out``, ``compare --out``, ``evaluate-human --out``, training (``--out``) and ``retrieve
index``. Each run goes through the CLI (exit 2, one ``error:`` line) or, for training, the API."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from genmetrics.backbones.provider import use_provider
from genmetrics.cli.main import main
from genmetrics.data.output.lock import LOCK
from genmetrics.errors import InputError
from genmetrics.testing import random_images, tiny_backbones, toy_leaderboard, toy_mib_pairs, write_images


@pytest.fixture
def outside(tmp_path) -> Path:
    f = tmp_path / "precious" / "do-not-touch.txt"
    f.parent.mkdir()
    f.write_bytes(b"user data that genmetrics must never overwrite\n")
    return f


def _plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=target.is_dir())


def _config(root: Path) -> Path:
    """The toy leaderboard (``genmetrics.testing.toy_leaderboard``) as a YAML config file."""
    cfg = root / "board.yaml"
    cfg.write_text(yaml.safe_dump(toy_leaderboard(root)))
    return cfg


def _refused(argv: list[str], capsys) -> str:
    rc = main(argv)
    err = [
        ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith(("note:", "warning:"))
    ]
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


@pytest.mark.parametrize("planted", [LOCK, "plots"])
def test_leaderboard(tmp_path, outside, capsys, planted):
    before = outside.read_bytes()
    cfg = _config(tmp_path)
    out = tmp_path / "out"
    target = outside if planted == LOCK else outside.parent
    _plant(out / planted, target)
    line = _refused(["leaderboard", str(cfg), "--out", str(out)], capsys)
    assert "symbolic link" in line and planted in line
    assert outside.read_bytes() == before and sorted(os.listdir(outside.parent)) == [outside.name]


def test_leaderboard_resume_through_a_linked_results_file(tmp_path, outside, capsys):
    """With --resume the finished rows are kept, so results.jsonl is read; a link there is refused before
    anything is appended to it."""
    before = outside.read_bytes()
    cfg = _config(tmp_path)
    out = tmp_path / "out"
    assert main(["leaderboard", str(cfg), "--out", str(out), "--no-plots"]) == 0
    (out / "results.jsonl").unlink()
    _plant(out / "results.jsonl", outside)
    line = _refused(["leaderboard", str(cfg), "--out", str(out), "--resume", "--no-plots"], capsys)
    assert "results.jsonl" in line
    assert outside.read_bytes() == before


def test_score_out(tmp_path, outside, capsys):
    before = outside.read_bytes()
    refs = write_images(tmp_path / "refs", random_images(2, 16, seed=1))
    gen = write_images(tmp_path / "gen", random_images(2, 16, seed=2))
    for name in ("scores.jsonl", "summary.json"):
        _plant(tmp_path / name, outside)
        argv = [
            "score",
            "psnr",
            "-r",
            str(refs[0].parent),
            "-c",
            str(gen[0].parent),
            "--out",
            str(tmp_path / name),
        ]
        line = _refused(argv, capsys)
        assert "symbolic link" in line and name in line
        assert outside.read_bytes() == before


@pytest.mark.parametrize("planted", [LOCK, "report.md"])
def test_compare_out(tmp_path, outside, capsys, planted):
    before = outside.read_bytes()
    write_images(tmp_path / "real", random_images(4, 32, seed=1))
    write_images(tmp_path / "gen", random_images(4, 32, seed=2))
    out = tmp_path / "cmp"
    _plant(out / planted, outside)
    argv = ["compare", "--real", str(tmp_path / "real"), "--generated", str(tmp_path / "gen")]
    argv += ["--attributes", "smiling, a hat", "--out", str(out), "--n-boot", "10"]
    with use_provider(tiny_backbones):
        line = _refused(argv, capsys)
    assert "symbolic link" in line
    assert outside.read_bytes() == before


@pytest.mark.parametrize("planted", [LOCK, "report.md"])
def test_evaluate_human_out(tmp_path, outside, capsys, planted):
    before = outside.read_bytes()
    pairs = toy_mib_pairs(tmp_path / "mib", 4)
    out = tmp_path / "eval"
    _plant(out / planted, outside)
    line = _refused(
        ["evaluate-human", "mie", "--data", str(pairs), "--metrics", "psnr", "--out", str(out)], capsys
    )
    assert "symbolic link" in line
    assert outside.read_bytes() == before


@pytest.mark.parametrize("planted", [LOCK, "metrics.jsonl"])
def test_train_out(tmp_path, outside, planted):
    from genmetrics.train import TrainLoopConfig, fit
    from tests.train.toy import Toy, make_data

    before = outside.read_bytes()
    out = tmp_path / "run"
    _plant(out / planted, outside)
    cfg = TrainLoopConfig(out_dir=out, lr=0.05, epochs=1, batch_size=4, warmup_ratio=0.0, progress=False)
    with pytest.raises(InputError, match="symbolic link"):
        fit(Toy(), make_data(8), cfg)
    assert outside.read_bytes() == before


@pytest.mark.parametrize("planted", [LOCK, f"faiss_color-{hashlib.sha1(b'color').hexdigest()[:8]}.index"])
def test_retrieve_index(tmp_path, outside, capsys, planted):
    pytest.importorskip("faiss", reason="genmetrics retrieve needs the [retrieval] extra (faiss)")
    before = outside.read_bytes()
    write_images(tmp_path / "gen", random_images(3, 32, seed=3))
    index = tmp_path / "index"
    _plant(index / planted, outside)
    argv = [
        "retrieve",
        "index",
        "--images",
        str(tmp_path / "gen"),
        "--index",
        str(index),
        "--aspect",
        "color",
    ]
    with use_provider(tiny_backbones):
        line = _refused(argv, capsys)
    assert "symbolic link" in line
    assert outside.read_bytes() == before
