import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GENMETRICS_OFFLINE", "1")
os.environ.setdefault("GENMETRICS_PROGRESS", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # tiny models: more threads only add contention


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own GENMETRICS_HOME so caches never leak between tests or into ~/.cache."""
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path_factory.mktemp("gmhome")))
