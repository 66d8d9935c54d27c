"""Prompt overrides are checked once, the same way, by every TPIPS model (``common.check_prompts``)."""

from __future__ import annotations

import pytest

from genmetrics.errors import InputError
from genmetrics.tpips.common import PROMPTS, check_prompts, prompt_for
from tests.tpips.conftest import SIZE


def test_defaults_and_a_list_from_a_config():
    for family in PROMPTS:
        assert check_prompts(None, family) == PROMPTS[family]
    pair = check_prompts(["Judge {aspect}.", "Judge."], "late")  # a JSON config gives a list
    assert pair == ("Judge {aspect}.", "Judge.")
    assert (prompt_for("late", "colour", pair), prompt_for("late", "overall", pair)) == (
        "Judge colour.",
        "Judge.",
    )


@pytest.mark.parametrize(
    "bad",
    [
        ("only {aspect}",),
        ("a {aspect}", "b", "c"),
        ("no slot", "overall"),
        "a {aspect}",
        ("a {aspect}", 2),
        7,
    ],
)
def test_refused_with_the_option_name(bad):
    with pytest.raises(InputError, match=r"two_afc_prompts: expected \(template containing '\{aspect\}'"):
        check_prompts(bad, "triplet_2afc", name="two_afc_prompts")


def test_every_model_refuses_a_bad_override(vlm, processor):
    from genmetrics.testing import tiny_qwen3vl_for_generation
    from genmetrics.tpips.baselines import PairwiseScoreModel
    from genmetrics.tpips.model import TPIPSModel
    from genmetrics.tpips.triplet import TPIPSTripletModel

    gen = tiny_qwen3vl_for_generation(seed=0)
    with pytest.raises(InputError, match="^prompts: expected"):
        TPIPSModel(vlm, processor, "late", image_size=SIZE, prompts=("one {aspect}",))
    with pytest.raises(InputError, match="^prompts: expected"):
        TPIPSTripletModel(gen, processor, image_size=SIZE, prompts=("a {aspect}", "b", "c"))
    with pytest.raises(InputError, match="^two_afc_prompts: expected"):
        TPIPSTripletModel(gen, processor, image_size=SIZE, two_afc_prompts=["no slot", "b"])
    with pytest.raises(InputError, match="^prompts: expected"):
        PairwiseScoreModel(gen, processor, image_size=SIZE, prompts=("no slot", "b"))
    ok = TPIPSTripletModel(gen, processor, image_size=SIZE, prompts=["Odd in {aspect}?", "Odd?"])
    assert ok.prompts == ("Odd in {aspect}?", "Odd?")
