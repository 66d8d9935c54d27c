"""genmetrics.leaderboard.notes: the notes before the numbers come from the summary alone, one sentence per
kind, in a fixed order (random backbones, small sets, incomplete cells), and none for a clean run."""

from __future__ import annotations

import pytest

from genmetrics.leaderboard.notes import BANNER, SMALL_SET, banner, notes, small_sets


def _set_column(n: int, n_real: int, mean: float | None = 0.1) -> dict:
    return {"level": "set", "generators": {"g": {"mean": mean, "n": n, "n_real": n_real}}}


def _sample_column(n: int, n_expected: int | None) -> dict:
    v = {"mean": 0.5, "n": n} if n_expected is None else {"mean": 0.5, "n": n, "n_expected": n_expected}
    return {"level": "sample", "generators": {"g": v}}


def test_a_clean_run_has_no_notes():
    summary = {"columns": {"psnr": _sample_column(8, 8), "sad": _set_column(SMALL_SET, SMALL_SET)}}
    assert notes(summary) == [] and notes({}) == []


@pytest.mark.parametrize(
    "n,n_real,small",
    [
        (SMALL_SET - 1, 500, True),
        (500, SMALL_SET - 1, True),
        (SMALL_SET, SMALL_SET, False),
        (5000, 200, False),
    ],
)
def test_small_sets_are_the_smaller_of_the_two_sets_below_the_bound(n, n_real, small):
    summary = {"columns": {"sad": _set_column(n, n_real), "pad": _set_column(500, 500)}}
    assert notes(summary) == ([small_sets("sad")] if small else [])


def test_a_set_column_without_a_value_gets_no_small_set_note():
    assert notes({"columns": {"sad": _set_column(3, 3, mean=None)}}) == []


def test_every_kind_in_order_each_naming_what_it_is_about():
    summary = {
        "backbone_provider": "my.pkg:tiny",
        "columns": {
            "psnr": _sample_column(7, 8),
            "sad": _set_column(10, 10),
            "pad": _set_column(10, 500),
            "ssim": _sample_column(8, None),
        },
    }
    got = notes(summary)
    assert got == [
        banner("my.pkg:tiny"),
        small_sets("sad, pad"),
        "Incomplete: psnr / g: 7 of 8 images scored",
    ]
    assert got[0].startswith(BANNER) and "my.pkg:tiny" in got[0]
    assert got[1].startswith(f"sad, pad: fewer than {SMALL_SET} images per set")
