"""genmetrics.tpips.fusion: the contract every variant keeps (symmetry, identity maximal, a pair scored the
same alone or in a mixed batch, determinism) and the head-tensor check that names the file and the tensor."""

from __future__ import annotations

import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.tpips.fusion import check_head_tensors

VARIANTS = ["late", "mid", "early"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_symmetric_and_identity(models, images, variant):
    m = models[variant]
    a, b = images[:3], images[3:6]
    asp = ["lighting", "overall", "pose of the cat"]
    sab, sba = m.similarity(a, b, asp), m.similarity(b, a, asp)
    assert torch.allclose(sab, sba, atol=1e-5)
    same = m.similarity(a, a, asp)
    assert (same >= sab - 1e-6).all() and (same >= sba - 1e-6).all()  # identity is maximal
    if variant == "late":
        assert torch.equal(same, torch.ones(3))  # exactly 1
    elif variant == "early":
        assert torch.allclose(same, torch.ones(3), atol=1e-6)  # 1 up to fp32 attention summation order
        assert (sab < 1).all()
    else:
        assert torch.equal(same, torch.zeros(3))  # mid fusion: distance 0 is the maximum
        assert (sab < 0).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_pair_independent_of_batch(models, images, variant):
    m = models[variant]
    alone = m.similarity([images[0]], [images[1]], ["lighting"])
    batch = m.similarity(
        [images[2], images[0], images[4]],
        [images[3], images[1], images[0]],
        ["a much longer aspect: the exact pose of the cat and the dog on the sofa", "lighting", "overall"],
    )
    assert torch.allclose(alone[0], batch[1], atol=1e-5), (alone, batch)


@pytest.mark.parametrize("variant", VARIANTS)
def test_scoring_twice_gives_the_same_bits(models, images, variant):
    m = models[variant]
    a, b, asp = images[:3], images[3:6], ["color", "overall", "texture"]
    assert torch.equal(m.similarity(a, b, asp), m.similarity(a, b, asp))


EXPECTED = {"w": torch.zeros(2, 3), "b": torch.zeros(3), "steps": torch.zeros((), dtype=torch.long)}


def _state(**change):
    s = {"w": torch.ones(2, 3), "b": torch.ones(3), "steps": torch.tensor(4)}
    s.update(change)
    return {k: v for k, v in s.items() if v is not None}


def test_head_tensors_that_match_pass_and_the_placeholder_is_ignored():
    state = _state(_empty=torch.zeros(0))
    assert sorted(check_head_tensors(state, EXPECTED, source="h.safetensors")) == ["b", "steps", "w"]


@pytest.mark.parametrize(
    "state,needle",
    [
        (
            _state(w=None),
            "h.st: tensor 'w' is missing (1 missing in all); the file was not saved for this variant",
        ),
        (
            _state(extra=torch.ones(1)),
            "h.st: unexpected tensor 'extra' (1 unexpected in all); the file was saved",
        ),
        (_state(w=torch.ones(3, 2)), "h.st: tensor 'w' has shape (3, 2), expected (2, 3) for this backbone"),
        (
            _state(b=torch.tensor([1.0, float("inf"), float("nan")])),
            "h.st: tensor 'b' holds 2 NaN or infinite",
        ),
    ],
)
def test_a_head_tensor_that_does_not_fit_is_named_with_the_file(state, needle):
    with pytest.raises(InputError) as e:
        check_head_tensors(state, EXPECTED, source="h.st")
    assert str(e.value).startswith(needle)
