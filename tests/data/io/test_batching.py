from __future__ import annotations

import pytest
import torch

from genmetrics.data.io.batching import (
    chunk_slices,
    fixed_batches,
    map_batches,
    padding_efficiency,
    token_budget_batches,
)


class FakeModel:
    """Raises CUDA OOM for batches larger than ``limit``; records every sample it scored."""

    def __init__(self, limit: int):
        self.limit, self.seen, self.calls = limit, [], 0

    def __call__(self, items):
        self.calls += 1
        if len(items) > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        self.seen.extend(items)
        return torch.tensor(items, dtype=torch.float64) * 2


@pytest.mark.parametrize("limit, bs", [(3, 16), (1, 8), (5, 5), (7, 64)])
def test_oom_backoff_scores_each_sample_once_in_order(limit, bs):
    items = list(range(23))
    model = FakeModel(limit)
    out = torch.cat(map_batches(lambda sl: model(items[sl]), len(items), bs))
    assert model.seen == items
    assert torch.equal(out, torch.tensor(items, dtype=torch.float64) * 2)


def test_oom_at_min_batch_is_raised():
    model = FakeModel(0)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        map_batches(lambda sl: model([1][sl]), 1, 4)


def test_other_errors_are_not_swallowed():
    def boom(sl):
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        map_batches(boom, 3, 2)


def test_token_budget_batches_cover_every_sample_once():
    costs = [100, 800, 300, 300, 200, 800, 500, 100, 700]
    batches = token_budget_batches(costs, budget=1600)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(costs)))
    assert all(len(b) * max(costs[i] for i in b) <= 1600 or len(b) == 1 for b in batches)
    fixed = [list(range(i, min(i + 3, len(costs)))) for i in range(0, len(costs), 3)]
    assert padding_efficiency(costs, batches) >= padding_efficiency(costs, fixed)
    assert token_budget_batches([5000], budget=100) == [[0]]


def test_iter_decoded_in_workers_keeps_order_and_reports_bad_files(tmp_path):
    from PIL import Image

    from genmetrics.data.io.batching import iter_decoded
    from genmetrics.data.io.images import to_tensor
    from genmetrics.errors import InputError

    paths = []
    for i in range(5):
        p = tmp_path / f"{i}.png"
        Image.new("RGB", (4, 4), (i, i, i)).save(p)
        paths.append(p)
    (tmp_path / "2.png").write_bytes(b"broken")
    got = [item for batch in iter_decoded(paths, to_tensor, batch_size=2, num_workers=2) for item in batch]
    assert [i for i, _ in got] == list(range(5))
    assert isinstance(got[2][1], InputError) and "2.png" in str(got[2][1])
    assert torch.allclose(got[4][1], torch.full((3, 4, 4), 4 / 255))


@pytest.mark.parametrize("n", [0, 1, 5, 16, 17])
@pytest.mark.parametrize("size", [1, 2, 4, 16, 64])
def test_chunk_slices_are_the_chunks_of_fixed_batches(n, size):
    """Every item once, in order, in chunks of ``size`` (the last smaller): the same chunks as fixed_batches."""
    items = list(range(n))
    slices = chunk_slices(n, size)
    assert [items[s] for s in slices] == list(fixed_batches(items, size))
    assert [i for s in slices for i in items[s]] == items
    assert all(s.stop - s.start == size for s in slices[:-1])
    assert all(0 <= s.start < s.stop <= n for s in slices)  # never past the end
