import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lb_fakes  # noqa: E402
from lb_helpers import make_set  # noqa: E402


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
