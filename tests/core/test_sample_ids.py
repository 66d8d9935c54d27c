"""Sample ids (genmetrics.core.sample_ids): a stable 64-bit id per sample, duplicates within one update refused
naming both positions, the copies a distributed sampler pads in dropped (first occurrence kept, unnamed samples
always kept), and copies that disagree found."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from genmetrics.core.sample_ids import (
    COPY_TOLERANCE,
    UNNAMED_ID,
    collision_message,
    conflicting_ids,
    drop_duplicate_ids,
    hash_id,
    hash_ids,
    keep_index,
)
from genmetrics.errors import InputError


def test_drop_duplicate_ids_keeps_first_occurrence():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])
    ids = torch.tensor([7, 3, 7, 5])
    s, i = drop_duplicate_ids(scores, ids)
    assert s.tolist() == [1.0, 2.0, 4.0] and i.tolist() == [7, 3, 5]


def _keep_reference(ids: list[int]) -> list[int]:
    """The rule written as a loop: every unnamed position, and the first position of each named id."""
    seen, keep = set(), []
    for pos, i in enumerate(ids):
        if i < 0:
            keep.append(pos)
        elif i not in seen:
            seen.add(i)
            keep.append(pos)
    return keep


@pytest.mark.parametrize("seed", range(20))
def test_keep_index_equals_the_loop(seed):
    rng = random.Random(seed)
    ids = [rng.choice([UNNAMED_ID, *range(6)]) for _ in range(rng.randint(0, 30))]
    assert keep_index(torch.tensor(ids, dtype=torch.long)).tolist() == _keep_reference(ids)


def test_one_id_by_value_whatever_integer_type():
    assert hash_id(7) == hash_id(np.int64(7)) == hash_id(torch.tensor(7)) == hash_id(torch.tensor([7])) == 7
    assert hash_id("a.png") == hash_id(Path("a.png")) != hash_id("b.png")
    assert -(1 << 63) <= hash_id("x" * 1000) < (1 << 63)
    assert hash_id(b"\xff") == hash_id(b"\xff")  # bytes: by their text, stable


@pytest.mark.parametrize(
    "bad,says",
    [
        (None, "expected str or int sample ids, got NoneType None"),
        (1.0, "got float 1.0"),
        (True, "got bool True"),
        (torch.tensor([1, 2]), "shape (2,)"),
        (torch.tensor(1.5), "float32 tensor"),
        (1 << 63, "does not fit in 64 bits"),
    ],
    ids=["none", "float", "bool", "two-element", "float-tensor", "too-large"],
)
def test_an_id_that_cannot_be_one_is_named(bad, says):
    with pytest.raises(InputError, match="ids\\[2\\]: ") as info:
        hash_id(bad, name="ids[2]")
    assert says in str(info.value)


def test_hash_ids_named_ids_are_non_negative_and_integers_kept():
    hashed, texts = hash_ids(["a", 5, torch.tensor(9)], 3)
    assert hashed[1:] == [5, 9] and hashed[0] >= 0 and texts == ["a", "5", "9"]
    assert hash_ids(torch.tensor([4, 2]), 2) == ([4, 2], ["4", "2"])
    assert hash_ids(None, 3) == ([UNNAMED_ID] * 3, [""] * 3)


def test_hash_ids_refuses_repeats_counts_and_negative_integers():
    with pytest.raises(InputError, match=r"'b' appears twice in one update \(positions 1 and 2\)"):
        hash_ids(["a", "b", "b"], 3)
    with pytest.raises(InputError, match=r"'3' appears twice"):
        hash_ids([3, torch.tensor(3)], 2)  # 3 and tensor(3) are one id
    with pytest.raises(InputError, match="got 1 ids for 2 samples"):
        hash_ids(["a"], 2)
    with pytest.raises(InputError, match=r"ids\[0\]: integer ids must be >= 0, got -4"):
        hash_ids([-4], 1)


def test_conflicting_ids_finds_copies_that_disagree_beyond_the_tolerance():
    ids = torch.tensor([0, 1, 0, 1, 2, -1, -1])
    x = torch.tensor([5.0, 6.0, 5.0, 6.0, 1.0, 3.0, 4.0])
    assert conflicting_ids(ids, [x]).tolist() == []  # equal copies; unnamed samples never conflict
    near = x.clone()
    near[3] = 6.0 * (1 + COPY_TOLERANCE / 4)  # within float32 rounding of the last reductions
    assert conflicting_ids(ids, [near]).tolist() == []
    far = x.clone()
    far[2] = 5.5
    labels = torch.tensor([1, 2, 1, 3, 0, 0, 0])  # an integer row: exact
    assert conflicting_ids(ids, [far, labels]).tolist() == [0, 1]


def test_collision_message_names_the_metric_the_count_and_three_ids():
    line = collision_message("sad", "sync", ["id-a", "id-b", "id-c", "id-d"], 9)
    assert line.startswith("sad: sync: 9 sample id(s)") and "(first: id-a, id-b, id-c)" in line
    assert "id-d" not in line and "ids=[f'rank{rank}-{i}'" in line
