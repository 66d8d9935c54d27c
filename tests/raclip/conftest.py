import pytest


@pytest.fixture(scope="module")
def clip():
    from genmetrics.testing import tiny_clip

    return tiny_clip()


@pytest.fixture(scope="module")
def pixels(clip):
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.testing import random_images

    return clip_image_batch(random_images(3, 32, seed=5), clip[0])
