import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lb_fakes  # noqa: E402
from lb_helpers import make_set, toml_config  # noqa: E402

from genmetrics.data.output.rows import read_results  # noqa: E402
from genmetrics.leaderboard import run_leaderboard  # noqa: E402

PSNR_SSIM = '[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "ssim"\n'


@pytest.fixture
def board(small_set, tmp_path):
    """A psnr + ssim leaderboard of the small set (200 bootstrap draws) and its result rows."""
    cfg = toml_config(small_set, PSNR_SSIM, extra='[run]\nn_boot = 200\ntitle = "Look <b>"\n')
    res = run_leaderboard(cfg, tmp_path / "out")
    return res, read_results(res.results)


@pytest.fixture
def small_set(tmp_path):
    return make_set(tmp_path / "set")


@pytest.fixture(autouse=True)
def _fake_metrics():
    """The _lb* test metrics, registered for each test of this folder only."""
    lb_fakes.register()
    for k in lb_fakes.CALLS:
        lb_fakes.CALLS[k] = None if k in ("cache_dir", "path") else 0
    yield
    lb_fakes.unregister()
