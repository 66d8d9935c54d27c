"""An unreachable hub (a closed local port) answers in seconds: every metric that needs weights (taken from the
registry), ``compare``, ``leaderboard`` and ``weights download`` stop with one ``error:`` line (exit 1) naming
the weights, the command that fetches them and how to copy them; nothing is left in an output folder; the
Python API raises ``WeightsUnavailableError``. Nothing downloads: the port is closed, or served by a local
HTTP server that answers 503.

Red before the fix: huggingface_hub retried each request 5 times (1 + 2 + 4 + 8 + 8 s) for each file open_clip
tries, 50-80 s per command, with its retry notices on stderr.
"""

from __future__ import annotations

import importlib
import shlex
import socket
import time
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest

import genmetrics as gm
from genmetrics.backbones import hub
from genmetrics.cli.main import main
from genmetrics.cli.weights import metric_weights
from genmetrics.core.registry import alias_of, get_card, list_metrics
from genmetrics.errors import WeightsUnavailableError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "quickstart" / "data"
LIMIT_S = 5.0
WEIGHTS_METRICS = [n for n in list_metrics() if alias_of(n) is None and metric_weights(n)]


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: a connection is refused at once
    return port


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """What is timed is the command, not Python importing its modules (tens of seconds on a loaded machine)."""
    for module in ("genmetrics.raclip.cli", "genmetrics.leaderboard.cli", "genmetrics.leaderboard.runner"):
        importlib.import_module(module)
    for name in WEIGHTS_METRICS:
        importlib.import_module(get_card(name).factory.split(":")[0])


@pytest.fixture
def dead_hub(monkeypatch):
    """The hub at a closed local port, with downloads allowed (as on a machine without network)."""
    url = f"http://127.0.0.1:{_closed_port()}"
    for var in (
        "GENMETRICS_OFFLINE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "GENMETRICS_BACKBONE_PROVIDER",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf_constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    hub.forget()
    yield url
    hub.forget()


def _score_args(name: str) -> list[str]:
    """``genmetrics score NAME`` with the inputs its card asks for (quick-start images)."""
    card = get_card(name)
    args = ["score", name, "--candidates", str(DATA / "gen" / "blur")]
    if card.family == "mie":  # 2 reference images per candidate, trained heads from the hub
        refs = sorted((DATA / "refs").iterdir())[:2]
        return [
            *args,
            "--condition",
            "a photo",
            "--heads",
            "someorg/mie-heads",
            *(f"--reference={r}" for r in refs),
        ]
    if card.reference.value != "none":
        args += ["--reference", str(DATA / "refs")]
    if card.condition.value != "none":
        args += ["--attributes", "celeba-20"] if card.condition_option else ["--condition", "a photo"]
    return args


def _timed(argv: list[str], capsys) -> tuple[int, str, float]:
    capsys.readouterr()
    t0 = time.perf_counter()
    rc = main(argv)
    took = time.perf_counter() - t0
    return rc, capsys.readouterr().err, took


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err  # no library log line, no traceback
    return lines[0]


def _fetch_command(line: str) -> list[str]:
    """The `genmetrics weights download ...` command the line names."""
    start = line.index("`genmetrics weights download ")
    return shlex.split(line[start + 1 : line.index("`", start + 1)])


def test_the_registry_has_metrics_that_need_weights():
    assert {"clipscore", "dino", "tpips", "mie"} <= set(WEIGHTS_METRICS)


@pytest.mark.parametrize("name", WEIGHTS_METRICS)
def test_score_fails_in_seconds_with_one_line(name, dead_hub, capsys):
    rc, err, took = _timed(_score_args(name), capsys)
    line = _one_error_line(err)
    assert rc == 1 and took < LIMIT_S, (rc, took, line)
    assert dead_hub in line and "cannot be reached" in line
    if get_card(name).family != "mie":  # mie: the heads it was given are the weights named
        (weights,) = metric_weights(name)
        assert f"weights {weights!r}" in line
        cmd = _fetch_command(line)
        assert cmd[:3] == ["genmetrics", "weights", "download"] and cmd[3:] == [weights]
        assert "copy" in line and "GENMETRICS_HOME" in line
        assert "weights=/local" not in line or "(Python)" in line  # the CLI spelling is named for the CLI


def test_the_named_fetch_command_is_accepted_by_the_cli(dead_hub, capsys):
    """The command in the error, run as printed (its `list` form: nothing downloads), is understood."""
    main(_score_args("dino"))
    cmd = _fetch_command(_one_error_line(capsys.readouterr().err))
    rc = main(["weights", "list", *cmd[3:]])
    out = capsys.readouterr().out
    assert rc == 0 and "facebook/dinov2-base" in out


def test_python_api_raises_weights_unavailable(dead_hub):
    from genmetrics.testing import random_images

    metric = gm.create_metric("dino")
    t0 = time.perf_counter()
    with pytest.raises(WeightsUnavailableError, match="facebook/dinov2-base"):
        metric.update(reference=random_images(1, seed=0), candidates=random_images(1, seed=1))
    assert time.perf_counter() - t0 < LIMIT_S


@pytest.mark.parametrize("existed", [False, True])
def test_compare_leaves_no_lock_or_folder(existed, dead_hub, tmp_path, capsys):
    out = tmp_path / "cmp"
    if existed:
        out.mkdir()
    argv = ["compare", "--real", str(DATA / "refs"), "--generated", str(DATA / "gen" / "blur")]
    rc, err, took = _timed([*argv, "--attributes", "celeba-20", "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert rc == 1 and took < LIMIT_S and "ViT-B-32-quickgelu/openai" in line
    assert (sorted(out.iterdir()) == []) if existed else not out.exists()


def test_leaderboard_fails_in_seconds_and_scores_nothing(dead_hub, tmp_path, capsys):
    cfg = tmp_path / "board.toml"
    cfg.write_text(
        f'[data]\nreferences = "{DATA / "refs"}"\n[[generators]]\nname = "blur"\nimages = "{DATA / "gen" / "blur"}"\n'
        '[[metrics]]\nname = "dino"\n',
        encoding="utf-8",
    )
    out = tmp_path / "board"
    rc, err, took = _timed(["leaderboard", str(cfg), "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert rc == 1 and took < LIMIT_S and "facebook/dinov2-base" in line
    assert not (out / ".genmetrics.lock").exists()
    assert (
        not any(p.name == "results.jsonl" and p.stat().st_size for p in out.rglob("*"))
        if out.exists()
        else True
    )


def test_weights_download_fails_in_seconds_exit_1(dead_hub, capsys):
    rc, err, took = _timed(["weights", "download", "clipscore", "dino"], capsys)
    line = _one_error_line(err)
    assert rc == 1 and took < LIMIT_S and dead_hub in line
    assert "`genmetrics weights download clipscore dino`" in line and "GENMETRICS_HOME" in line
