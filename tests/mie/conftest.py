import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def proc():
    from genmetrics.testing import tiny_qwen35_processor

    return tiny_qwen35_processor()


@pytest.fixture(scope="session")
def make_model(proc):
    from genmetrics.mie.model import MIEModel, tiny_backbone

    def make(tuning="lora_layer", last_k=1, seed=0, **kw):
        kw.setdefault("instruction", "Judge the binding.")
        return MIEModel(tiny_backbone(seed), proc, tuning=tuning, last_k=last_k, backbone_name="tiny-qwen35", **kw).eval()

    return make


@pytest.fixture(scope="session")
def imgs():
    from genmetrics.testing import random_images

    return random_images(16, 64, seed=3)


@pytest.fixture(scope="session")
def pairs_file(tmp_path_factory):
    from _data import write_pairs

    return write_pairs(tmp_path_factory.mktemp("mib"), 8)


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """The tiny models are dominated by per-op overhead: one intra-op thread is faster, and far faster
    when the CPU is shared (two threads thrash at every barrier under oversubscription)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
