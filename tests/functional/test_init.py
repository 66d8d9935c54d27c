"""The functional namespace (genmetrics/functional/__init__.py): every listed name is its module's function,
loaded on first use (importing the package loads none of the math modules); an unknown name is named."""

from __future__ import annotations

import importlib

import pytest

import genmetrics.functional as F
from tests.helpers import assert_unknown_name_named, run_python


@pytest.mark.parametrize("name", F.__all__)
def test_every_name_is_its_module_s_function(name):
    home = F._WHERE[name]
    assert getattr(F, name) is getattr(importlib.import_module(f"genmetrics.functional.{home}"), name)
    assert callable(getattr(F, name))


def test_all_and_dir_list_each_name_once():
    listed = [n for names in F._EXPORTS.values() for n in names]
    assert sorted(listed) == F.__all__ == dir(F) and len(set(listed)) == len(listed)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    assert_unknown_name_named(F, "sadd")


def test_the_math_modules_load_on_first_use():
    code = (
        "import sys, genmetrics.functional as F\n"
        "mods = [f'genmetrics.functional.{m}' for m in F._EXPORTS]\n"
        "assert not [m for m in mods if m in sys.modules]\n"
        "F.sad\n"
        "assert 'genmetrics.functional.divergence' in sys.modules and 'genmetrics.functional.ranking' not in sys.modules"
    )
    run_python(code)
