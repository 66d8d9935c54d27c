import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

#: the tiny Qwen3.5 of these tests: 2 text layers (one Gated-DeltaNet, one full attention)
TINY_TEXT = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}


def tiny_backbone(seed=0):
    from genmetrics.testing import tiny_qwen35

    return tiny_qwen35(seed, text_config=dict(TINY_TEXT))


def tiny_provider(kind, weights, **options):
    """Backbone provider for the MIE tests: every VLM is the 2-layer tiny Qwen3.5 (seed 0)."""
    if kind != "vlm":
        return None
    from genmetrics.testing import tiny_qwen35_processor

    return tiny_backbone(0), tiny_qwen35_processor()


@pytest.fixture(scope="session")
def proc():
    from genmetrics.testing import tiny_qwen35_processor

    return tiny_qwen35_processor()


@pytest.fixture(scope="session")
def make_model(proc):
    from genmetrics.mie.model import MIEModel

    def make(tuning="lora_layer", unfreeze_layers=1, seed=0, **kw):
        return MIEModel(
            tiny_backbone(seed),
            proc,
            tuning=tuning,
            unfreeze_layers=unfreeze_layers,
            backbone_name="tiny/qwen3.5",
            **kw,
        ).eval()

    return make


@pytest.fixture()
def provider():
    from genmetrics.backbones.provider import use_provider

    with use_provider(tiny_provider):
        yield tiny_provider


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


@pytest.fixture(scope="session")
def samples():
    """(references, prompt, candidate) with 2 and 4 references (the parity and export tests)."""
    from genmetrics.testing import random_images

    im = random_images(12, 64, seed=11)
    return [
        ([im[0], im[1]], "a dog and a cat on a sofa", im[2]),
        ([im[3], im[4], im[5], im[6]], "four friends holding umbrellas", im[7]),
        ([im[8], im[9]], "the cat sits left of the dog", im[10]),
        ([im[0], im[5], im[9], im[11]], "Ein Hund, eine Katze und zwei Kinder", im[1]),
    ]
