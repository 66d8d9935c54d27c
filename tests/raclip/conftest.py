import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread, and the CI machine is shared."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def clip():
    from genmetrics.testing import tiny_clip

    return tiny_clip()


@pytest.fixture(scope="module")
def pixels(clip):
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.testing import random_images

    return clip_image_batch(random_images(3, 32, seed=5), clip[0])
