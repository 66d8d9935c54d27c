"""A human-judgement record whose image path names a folder is told so (it read "does not exist", sending
the user to look for a missing file that is there); a missing file still reads "does not exist"."""

from __future__ import annotations

import json

import pytest

from genmetrics.errors import InputError
from genmetrics.testing import random_images, write_images
from genmetrics.tpips.evaluate import check_images_exist, load_human_data


@pytest.mark.parametrize("which", ["folder", "missing"])
def test_a_reference_that_is_not_a_file_is_named_for_what_it_is(tmp_path, which):
    a, b = write_images(tmp_path / "img", random_images(2, 32, seed=4))
    reference = tmp_path / "img" if which == "folder" else tmp_path / "gone.png"
    row = {"id": "p0", "reference": str(reference), "candidates": [str(a), str(b)], "aspect": "color"}
    (tmp_path / "d.jsonl").write_text(json.dumps({**row, "votes": [1, 2]}) + "\n")
    ds = load_human_data(tmp_path / "d.jsonl", kind="2afc")
    with pytest.raises(InputError) as e:
        check_images_exist(ds)
    said = "is a folder, not an image file" if which == "folder" else "does not exist"
    assert str(e.value).endswith(f"image file {str(reference)!r} {said}")
