"""genmetrics.metric_base: scoring leaves torch's global state as it was."""

from __future__ import annotations

import torch

from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-global-torch-threads-grad", "silent", "scoring leaves torch's grad mode and default dtype as they were"
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    g, dt = torch.is_grad_enabled(), torch.get_default_dtype()
    m = gm.create_metric("psnr")
    m.update(reference=random_images(1, 16), candidates=random_images(1, 16, seed=1))
    m.compute()
    assert torch.is_grad_enabled() == g and torch.get_default_dtype() == dt


test_hostile = HOSTILE.test()
