"""Environment faults: a non-UTF-8 locale (``LC_ALL=C``) with non-ASCII file names, and a
config that asks for a device this machine does not have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from genmetrics.cli.main import main
from genmetrics.testing import random_images, toy_leaderboard, write_images

REPO = Path(__file__).resolve().parents[2]


def _c_locale_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONUTF8", "PYTHONIOENC"))
    }
    return {**env, "LC_ALL": "C", "PYTHONPATH": str(REPO), "GENMETRICS_PROGRESS": "0"}


def _images(tmp_path: Path, names: list[str]) -> tuple[Path, Path]:
    refs, gen = tmp_path / "références", tmp_path / "générateur 猫"
    for folder, seed in ((refs, 1), (gen, 2)):
        for p, n in zip(write_images(folder, random_images(len(names), 16, seed=seed)), names):
            p.rename(folder / f"{n}.png")
    return refs, gen


def _score(refs: Path, gen: Path, out: Path) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "genmetrics",
        "score",
        "psnr",
        "-r",
        str(refs),
        "-c",
        str(gen),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env=_c_locale_env(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_non_ascii_file_names_under_lc_all_c(tmp_path):
    """Accented and CJK file, folder and generator names, scored by ``score`` and ``leaderboard`` in a
    subprocess whose locale is plain C (Python's UTF-8 mode; nothing relies on the locale's encoding)."""
    names = ["été", "猫の絵", "naïve"]
    refs, gen = _images(tmp_path, names)
    rows = _score(refs, gen, tmp_path / "sortie é.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(names)
    cfg = tmp_path / "board.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data": {"references": str(refs)},
                "generators": [{"name": "modèle 猫", "images": str(gen)}],
                "metrics": [{"name": "psnr"}],
                "run": {"n_boot": 50},
            },
            allow_unicode=True,
        ),
        encoding="utf-8",
    )
    board = tmp_path / "classement"
    cmd = [sys.executable, "-m", "genmetrics", "leaderboard", str(cfg), "--out", str(board), "--no-plots"]
    proc = subprocess.run(cmd, env=_c_locale_env(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert "modèle 猫" in (board / "leaderboard.md").read_text(encoding="utf-8")
    assert json.loads((board / "summary.json").read_text(encoding="utf-8"))["generators"] == ["modèle 猫"]


@pytest.mark.slow
def test_a_file_name_that_is_not_utf8_under_lc_all_c(tmp_path):
    latin1 = os.fsdecode(b"caf\xe9")  # Latin-1 bytes on disk
    refs, gen = _images(tmp_path, [latin1, "plain"])
    rows = _score(refs, gen, tmp_path / "out.jsonl")
    assert sorted(r["id"] for r in rows) == sorted([latin1, "plain"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_the_machine_lacks_is_named_with_the_config_key(tmp_path, capsys):
    cfg_dict = toy_leaderboard(tmp_path)
    cfg_dict["run"]["device"] = "cuda"
    cfg = tmp_path / "board.yaml"
    cfg.write_text(yaml.safe_dump(cfg_dict))
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert "board.yaml:" in err[0] and "run.device = 'cuda'" in err[0] and "(it has: cpu" in err[0]
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--device", "cuda:3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("error: --device = 'cuda:3'"), err
    assert not (tmp_path / "out").exists()  # refused before anything was written
