"""Counting Pillow's opens and decodes (genmetrics.testing.pil_counts): each open and each real decode is counted
once per file, in this process and in forked worker processes, and Pillow is restored when the block ends,
also after an error."""

from __future__ import annotations

import multiprocessing

import pytest
from PIL import Image, ImageFile

from genmetrics.testing.pil_counts import PILCounts, count_pil


def _decode(path):
    with Image.open(path) as im:
        im.load()


def _files(tmp_path, n=3):
    paths = []
    for i in range(n):
        p = tmp_path / f"{i}.png"
        Image.new("RGB", (4, 4), (i, 0, 0)).save(p)
        paths.append(p)
    return paths


def test_opens_and_decodes_are_counted_here_and_in_forked_workers(tmp_path):
    a, b, c = _files(tmp_path)
    with count_pil() as counts:
        _decode(a)
        with Image.open(b):  # opened, never decoded
            pass
        ctx = multiprocessing.get_context("fork")
        workers = [ctx.Process(target=_decode, args=(c,)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert all(w.exitcode == 0 for w in workers)
    assert counts.per_file([a]) == (1, 1, 1, 1)
    assert counts.per_file([b]) == (1, 1, 0, 0)
    assert counts.per_file([c]) == (2, 2, 2, 2)  # both workers' events reached the shared buffer
    assert counts.per_file([a, b, c]) == (1, 2, 0, 2)
    assert counts.per_file([tmp_path / "." / "0.png"]) == (1, 1, 1, 1)  # paths compared resolved


def test_pillow_is_restored_after_an_error(tmp_path):
    open0, load0 = Image.open, ImageFile.ImageFile.load
    with pytest.raises(RuntimeError, match="inside"), count_pil():
        assert Image.open is not open0
        raise RuntimeError("inside")
    assert Image.open is open0 and ImageFile.ImageFile.load is load0


def test_a_full_buffer_drops_events_but_never_fails(tmp_path):
    (a,) = _files(tmp_path, 1)
    with count_pil(max_events=1) as counts:  # room for one entry of 256 bytes
        for _ in range(5):
            _decode(a)
    assert sum(counts.opens.values()) + sum(counts.decodes.values()) <= 5
    assert counts.per_file([a])[1] >= 1


def test_per_file_is_min_and_max_over_the_files():
    c = PILCounts()
    c.opens.update({str(__import__("os").path.realpath("x")): 3})
    assert c.per_file(["x", "y"]) == (0, 3, 0, 0)
