"""``bootstrap_ci`` of the set metrics synchronises across processes as ``compute()`` does: it follows
torchmetrics' public ``sync_on_compute`` (it read the private ``_to_sync`` before, which holds the same value
outside ``forward``).

Two gloo processes, each updating half of the real and of the generated set: with ``sync_on_compute=True``
(the default) every rank's interval equals the one-process interval of all rows (in the gathered order: rank
0's rows, then rank 1's); with ``sync_on_compute=False`` each rank's equals the one-process interval of its
own rows.
"""

from __future__ import annotations

import pytest
import torch

import genmetrics as gm
from tests.recipes import metric_recipe

#: the rows reach the bootstrap through tiny-CLIP forwards of batches of another composition (3 vs 6
#: images): float32 GEMMs may round differently (~1e-7 relative per feature). The set-level interval is
#: found by inverting a bootstrap test (functional/bootstrap.py): its end points come from a search over a
#: resampled quantile, piecewise constant in the rows, so such a change can move an end point by one search
#: step (measured 9e-5 relative once in ~4 runs). 1e-3 bounds that and still tells the gathered interval from
#: a rank's own (they differ by far more: asserted below)
RTOL = 1e-3


def _sets() -> tuple[torch.Tensor, torch.Tensor]:
    from genmetrics.testing import random_images

    real, gen = random_images(6, 32, seed=21), random_images(6, 32, seed=22)
    return real, (gen.int() // 2).to(gen.dtype)  # a darker generated set: a divergence away from 0


def _interval(real: torch.Tensor, gen: torch.Tensor, **options) -> torch.Tensor:
    metric = gm.create_metric("sad", keep_scores=True, **metric_recipe("sad")["kwargs"], **options)
    metric.update(reference=real, candidates=gen)
    return torch.tensor(metric.bootstrap_ci(n_boot=50, seed=0), dtype=torch.float64)


def _worker(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    torch.set_num_threads(1)
    real, gen = _sets()
    mine = (real[rank::world_size], gen[rank::world_size])
    return {str(sync): _interval(*mine, sync_on_compute=sync) for sync in (True, False)}


@pytest.mark.distributed
def test_bootstrap_ci_follows_sync_on_compute():
    from genmetrics.testing import spawn_gloo

    results = spawn_gloo(_worker, 2)
    real, gen = _sets()
    gathered = _interval(torch.cat([real[0::2], real[1::2]]), torch.cat([gen[0::2], gen[1::2]]))
    for rank, out in enumerate(results):
        torch.testing.assert_close(out["True"], gathered, rtol=RTOL, atol=0)
        local = _interval(real[rank::2], gen[rank::2])
        torch.testing.assert_close(out["False"], local, rtol=RTOL, atol=0)
        assert not torch.allclose(local, gathered, rtol=RTOL, atol=0)  # the check tells them apart
