"""The example plugin package (examples/plugin, docs/plugins.md): registered in-process it scores as an
explicit second computation says and passes the contract tester; pip-installed (offline, into a folder of
the test's own) it works through ``genmetrics list``, ``score``, ``leaderboard`` and the contract tests,
torchmetrics' own harness included when that harness is available."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.core.registry import card_facts, get_card, metric_class, unregister_metric
from tests.contract import tester as T

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "plugin"
#: pixels reach the metric as float32 in [0, 1] (genmetrics' image loading): each within half an ulp of
#: 1.0, so |a - b| and its mean are within one float32 epsilon of the exact value
TOL = float(torch.finfo(torch.float32).eps)


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    """The explicit second computation: mean absolute difference of 0..255 pixels, scaled to [0, 1]."""
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean() / 255.0)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    for mod in [m for m in sys.modules if m.split(".")[0] == "genmetrics_mae"]:
        monkeypatch.delitem(sys.modules, mod)
    importlib.import_module("genmetrics_mae")  # registers its card, as the entry point does
    yield "mae"
    unregister_metric("mae")


def test_registered_in_process_it_scores_and_passes_the_contract_tester(registered):
    assert "mae" in gm.list_metrics() and gm.metric_info("mae")["higher_is_better"] is False
    cls = metric_class("mae")
    assert {k: getattr(cls, k) for k in card_facts(get_card("mae"))} == card_facts(get_card("mae"))
    g = torch.Generator().manual_seed(3)
    ref = torch.randint(0, 256, (4, 3, 8, 8), generator=g, dtype=torch.uint8)
    cand = torch.randint(0, 256, (4, 3, 8, 8), generator=g, dtype=torch.uint8)
    m = gm.create_metric("mae", batch_size=3)
    m.update(reference=ref, candidates=cand, ids=["a", "b", "c", "d"])
    want = [_mae(r.numpy(), c.numpy()) for r, c in zip(ref, cand)]
    assert m.per_sample()["scores"].tolist() == pytest.approx(want, abs=TOL)
    assert float(m.compute()) == pytest.approx(np.mean(want), abs=TOL)
    assert float(m(preds=cand, target=ref)) == pytest.approx(np.mean(want), abs=TOL)  # torchmetrics' keywords
    with pytest.raises(gm.InputError, match="mae: got 3 candidates and 4 references"):
        m.update(reference=ref, candidates=cand[:3])
    T.class_test("mae")  # the contract tester, on the plugin's own recipes (genmetrics_mae.recipes)


def _images(root: Path) -> None:
    rng = np.random.default_rng(0)
    for folder in ("refs", "gen/a", "gen/b"):
        (root / folder).mkdir(parents=True)
    for i in range(3):
        ref = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
        Image.fromarray(ref).save(root / "refs" / f"s{i}.png")
        for k, gen in enumerate(("a", "b")):
            noisy = np.clip(
                ref.astype(int) + rng.integers(-20 * (k + 1), 20 * (k + 1) + 1, ref.shape), 0, 255
            )
            Image.fromarray(noisy.astype(np.uint8)).save(root / "gen" / gen / f"s{i}.png")


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


@pytest.mark.slow
def test_pip_installed_plugin_works_in_list_score_leaderboard_and_the_contract_tests(tmp_path):
    src, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*pip, "--target", str(target), str(src)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "genmetrics_mae" / "metric.py").is_file()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)]), "GENMETRICS_PROGRESS": "0"}
    _images(tmp_path / "data")
    data = tmp_path / "data"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "genmetrics", *args],
            env=env,
            cwd=data,
            capture_output=True,
            text=True,
            timeout=300,
        )

    proc = cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "mae" in [m["name"] for m in json.loads(proc.stdout)]
    proc = cli("score", "mae", "-r", "refs", "-c", "gen/a", "--json")
    assert proc.returncode == 0, proc.stderr
    per = json.loads(proc.stdout)["per_sample"]
    want = {
        f"s{i}": _mae(_pixels(data / f"gen/a/s{i}.png"), _pixels(data / f"refs/s{i}.png")) for i in range(3)
    }
    assert dict(zip(per["ids"], per["scores"])) == pytest.approx(want, abs=TOL)
    (data / "board.toml").write_text(
        '[data]\nreferences = "refs"\n\n[[generators]]\nname = "a"\nimages = "gen/a"\n\n'
        '[[generators]]\nname = "b"\nimages = "gen/b"\n\n[[metrics]]\nname = "mae"\n'
    )
    proc = cli("leaderboard", "board.toml", "--out", "board")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (data / "board" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for r in rows:
        expected = _mae(
            _pixels(data / "gen" / r["generator"] / f"{r['id']}.png"), _pixels(data / f"refs/{r['id']}.png")
        )
        assert r["score"] == pytest.approx(expected, abs=TOL)
    # the direction reaches the report from the card
    summary = json.loads((data / "board" / "summary.json").read_text())
    assert summary["higher_is_better"] is False
    # the contract tests and torchmetrics' own harness (MetricTester; skipped unless
    # GENMETRICS_TORCHMETRICS_TESTS points at its tests/ folder) over the installed plugin
    tests = ["tests/contract/test_every_metric.py", "tests/contract/test_torchmetrics_harness.py"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not distributed",
            "-k",
            "mae",
            *tests,
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
