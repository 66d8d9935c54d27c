"""The baselines package (genmetrics/baselines/__init__.py): its cards register psnr, ssim, ms_ssim, clip_i and
dino; each card's factory is the class the package exposes, loaded on first use; an unknown name is named."""

from __future__ import annotations

import importlib

import pytest

import genmetrics.baselines as B
from genmetrics.core.registry import get_card, list_metrics
from tests.helpers import assert_unknown_name_named, run_python

CLASSES = {
    "psnr": "PSNR",
    "ssim": "SSIM",
    "ms_ssim": "MSSSIM",
    "clip_i": "CLIPImageSimilarity",
    "dino": "DINOSimilarity",
}


@pytest.mark.parametrize("name,cls", CLASSES.items())
def test_each_card_s_factory_is_the_class_the_package_exposes(name, cls):
    card = get_card(name)
    assert name in list_metrics() and card.family == "baselines"
    module, _, attr = card.factory.partition(":")
    assert attr == cls and getattr(B, cls) is getattr(importlib.import_module(module), attr)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    assert_unknown_name_named(B, "PSNRR")


def test_the_cards_register_without_importing_torch():
    code = (
        "import sys, genmetrics.baselines\n"
        "from genmetrics.core.registry import list_metrics\n"
        f"assert set({list(CLASSES)!r}) <= set(list_metrics())\n"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    run_python(code)
