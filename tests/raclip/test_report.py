"""raclip.report input checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from genmetrics.errors import InputError


def test_score_images_names_an_empty_image_set():
    from genmetrics.raclip.report import score_images

    with pytest.raises(InputError, match="^generated images: none to score"):
        score_images(SimpleNamespace(model=None), [], ["smiling"], role="generated")
