"""genmetrics.core.metric_states: a metric reloaded without ``persistent(True)`` says so; with it, it computes the same value."""

from __future__ import annotations

import torch

from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-state-not-persisted-clip", "silent", "compute() on a metric reloaded without persistent(True) says so"
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    saved = gm.create_metric("ssim")
    saved.update(reference=random_images(2, 16), candidates=random_images(2, 16, seed=1))
    fresh = gm.create_metric("ssim")
    fresh.load_state_dict(saved.state_dict())
    ctx.refused(fresh.compute, "persistent(True)")


@case(
    "h-state-persisted-roundtrip",
    "silent",
    "with persistent(True) the reloaded metric computes the same value",
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    saved = gm.create_metric("ssim")
    saved.persistent(True)
    saved.update(reference=random_images(2, 16), candidates=random_images(2, 16, seed=1))
    fresh = gm.create_metric("ssim")
    fresh.persistent(True)
    fresh.load_state_dict(saved.state_dict())
    assert torch.equal(torch.as_tensor(fresh.compute()), torch.as_tensor(saved.compute()))


test_hostile = HOSTILE.test()
