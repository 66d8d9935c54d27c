"""genmetrics.core.options: the typed checks name the option, accept what they document and refuse the rest."""

from __future__ import annotations

import math

import pytest

from genmetrics import create_metric
from genmetrics.core import options
from genmetrics.core.options import integer, number
from genmetrics.errors import InputError


@pytest.mark.parametrize("value, expect", [(3, 3.0), (2.5, 2.5), ("1e-3", 1e-3), (" 7 ", 7.0)])
def test_number_accepts_numbers_and_numeric_text(value, expect):
    assert options.number("x", value, lo=0.0) == expect


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, True, None, "(", [1.0], "nan"])
def test_number_refuses_naming_the_option(value):
    with pytest.raises(InputError, match=r"^m: option max_db: expected a finite number in \(0\.0, inf\)"):
        options.number("max_db", value, lo=0.0, lo_open=True, owner="m")


def test_number_bounds_are_inclusive_unless_open():
    assert options.number("a", 1.0, lo=0.0, hi=1.0) == 1.0
    with pytest.raises(InputError):
        options.number("a", 1.0, lo=0.0, hi=1.0, hi_open=True)


@pytest.mark.parametrize("value, expect", [(3, 3), (3.0, 3), ("4", 4)])
def test_integer_accepts(value, expect):
    assert options.integer("n", value, lo=1) == expect
    assert isinstance(options.integer("n", value, lo=1), int)


@pytest.mark.parametrize("value", [0, 3.5, True, float("nan"), "x", 10**9])
def test_integer_refuses(value):
    with pytest.raises(InputError, match=r"option n: expected an integer in \[1, 1000\]"):
        options.integer("n", value, lo=1, hi=1000)


@pytest.mark.parametrize("good", ["a photo of {}", "{}", "{{literal}} {}"])
def test_template_one_slot(good):
    assert options.template("t", good) == good
    assert good.format("x").count("x") >= 1


@pytest.mark.parametrize("bad", ["{} {}", "a {attr}", "none", "{0}", "{", 3])
def test_template_refused(bad):
    with pytest.raises(InputError, match="option t"):
        options.template("t", bad)


def test_choice_suggests():
    with pytest.raises(InputError, match="did you mean 'skip'"):
        options.choice("on_error", "skp", ("stop", "skip"))


@pytest.mark.parametrize(
    "name, raw, expect",
    [
        ("GENMETRICS_OFFLINE", "yes", True),
        ("GENMETRICS_OFFLINE", "0", False),
        ("GENMETRICS_MAX_PIXELS", "100", 100),
        ("GENMETRICS_PROGRESS", "1", "1"),
        ("GENMETRICS_MAX_PIXELS", "", None),
    ],
)
def test_env_parses_by_kind(monkeypatch, name, raw, expect):
    monkeypatch.setenv(name, raw)
    assert options.env(name) == expect


@pytest.mark.parametrize(
    "name, raw",
    [
        ("GENMETRICS_OFFLINE", "maybe"),
        ("GENMETRICS_MAX_PIXELS", "1e99x"),
        ("GENMETRICS_MAX_PIXELS", "-4"),
        ("GENMETRICS_PROGRESS", "2"),
        ("GENMETRICS_HOME", "~nosuchuser_gm/x"),
    ],
)
def test_env_refuses_naming_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(InputError, match=f"{name}"):
        options.check_environment()


def test_env_home_expands_the_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GENMETRICS_HOME", "~/gm")
    from genmetrics.backbones.weights import genmetrics_home

    assert genmetrics_home() == tmp_path / "gm"


def test_device_names():
    assert options.device("d", "cuda:1") == "cuda:1"
    for bad in ("gpu", "cuda:x", "CPU0"):
        with pytest.raises(InputError, match="unknown device"):
            options.device("d", bad)


def test_bootstrap_checks_before_allocating():
    from genmetrics.functional.bootstrap import bootstrap_ci, paired_bootstrap

    with pytest.raises(ValueError, match="n_boot"):  # functional/ is pure math: ValueError, not InputError
        bootstrap_ci([1.0, 2.0], n_boot=10**8)
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap([1.0, 2.0], [2.0, 1.0], n_boot=0)
    est, lo, hi = bootstrap_ci([1.0, 2.0, 4.0], n_boot=200)
    assert lo < est < hi and math.isclose(est, 7 / 3)


HUGE = 10**400  # a JSON or Python integer that no float holds


@pytest.mark.parametrize("value", [HUGE, -HUGE])
def test_an_option_too_large_for_a_float_is_named(value):
    with pytest.raises(InputError, match="option max_db: expected a finite number"):
        create_metric("psnr", max_db=value)
    with pytest.raises(InputError, match="option n: expected an integer"):
        integer("n", value, lo=1)
    with pytest.raises(InputError, match="option x"):
        number("x", value)
