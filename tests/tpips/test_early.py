"""genmetrics.tpips.early: the Appendix C.2 attention mask and positions, and the refusal of backbones
early fusion cannot run on."""

from __future__ import annotations

import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.tpips.early import early_inputs
from genmetrics.tpips.model import TPIPSModel

from .conftest import SIZE


def test_early_mask_and_positions(models, images):
    m = models["early"]
    fa = m.vision_features(m.load_images(images[:2]))
    fb = m.vision_features(m.load_images(images[2:4]))
    inp = early_inputs(m, fa, fb, ["lighting", "the pose of the cat in the middle of the picture"])
    N = fa[0].n_tokens
    gh, gw = fa[0].grid
    for b in range(2):
        r1, r2 = inp["register_index"][b].tolist()
        M = r1 - 2 * N
        mask = inp["mask"][b, 0]
        pos = inp["position_ids"][:, b]
        x1, x2 = slice(M, M + N), slice(M + N, r1)
        assert torch.equal(mask[:M, :M], torch.tril(torch.ones(M, M, dtype=torch.bool)))
        assert not mask[:M, M:].any()  # text never sees images or registers
        assert mask[M:r1, :r1].all() and not mask[M:r1, r1:].any()  # patches: text + both images only
        for r, own in ((r1, x1), (r2, x2)):
            row = torch.zeros(mask.shape[1], dtype=torch.bool)
            row[:M] = True
            row[own] = True
            row[r] = True
            assert torch.equal(mask[r], row)
        L = inp["lengths"][b]
        assert not mask[:, L:].any() or all(
            mask[p, p] and mask[:, p].sum() == 1 for p in range(L, mask.shape[0])
        )
        assert torch.equal(pos[0, :M], torch.arange(1, M + 1)) and not pos[1:, :M].any()
        grid = torch.stack(
            [
                torch.zeros(N, dtype=torch.long),
                torch.arange(gh).repeat_interleave(gw),
                torch.arange(gw).repeat(gh),
            ]
        )
        assert torch.equal(pos[:, x1], grid) and torch.equal(pos[:, x2], grid)
        assert pos[:, r1].tolist() == pos[:, r2].tolist() == [M + 1, 0, 0]
    assert (inp["input_ids"][inp["register_mask"]] == m.pad_id).all()


def test_qwen35_early_refused_late_works(processor, images):
    from genmetrics.testing import tiny_qwen35

    q35 = tiny_qwen35(seed=0)
    with pytest.raises(InputError, match="linear-attention"):
        TPIPSModel(q35, processor, "early", image_size=SIZE)
    late = TPIPSModel(q35, processor, "late", image_size=SIZE)
    s = late.similarity(images[:2], images[[0, 3]], ["lighting", "overall"])
    assert s[0] == 1.0 and torch.isfinite(s).all()
