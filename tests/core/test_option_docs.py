"""What each metric option means (genmetrics.core.option_docs): ``genmetrics info`` describes every option of every
metric (default, allowed values, description) from the one table the class docstrings' ``Options`` section is
built from; a metric's own meaning of an option wins over the shared one."""

from __future__ import annotations

import json
import re

import pytest

from genmetrics.cli.main import main
from genmetrics.core.option_docs import OPTIONS, PER_METRIC, describe_options, option_doc, options_section
from genmetrics.core.registry import alias_of, list_metrics, metric_class, metric_options


@pytest.mark.parametrize("name", [n for n in list_metrics() if alias_of(n) is None])
def test_info_describes_every_option_from_the_table_the_docstring_uses(name, capsys):
    """Each option: default, allowed values and description, from genmetrics.core.option_docs; the class docstring
    carries the same lines (red before: options had only their default)."""
    defaults = metric_options(name)
    described = describe_options(name, defaults)
    missing = [k for k, d in described.items() if not (d["allowed"] and d["description"])]
    assert not missing, f"{name}: options without a description in genmetrics.core.option_docs: {missing}"
    assert main(["info", name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["options"]
    assert shown == described
    doc = metric_class(name).__doc__
    assert options_section(name, defaults) in doc


def test_a_metric_s_own_meaning_wins_over_the_shared_one():
    for (metric, option), entry in PER_METRIC.items():
        assert option_doc(metric, option) == entry
        assert option in metric_options(metric), (
            f"PER_METRIC documents {metric}.{option}, which it does not take"
        )
    shared = next(o for o in OPTIONS if ("psnr", o) not in PER_METRIC)
    assert option_doc("psnr", shared) == OPTIONS[shared]
    assert option_doc("psnr", "no_such_option") is None


def test_an_undocumented_option_keeps_its_default_with_empty_texts():
    got = describe_options("psnr", {"no_such_option": "3", "max_db": "100.0"})
    assert got["no_such_option"] == {"default": "3", "allowed": "", "description": ""}
    assert got["max_db"] == {
        "default": "100.0",
        "allowed": PER_METRIC["psnr", "max_db"][0],
        "description": PER_METRIC["psnr", "max_db"][1],
    }


def test_options_section_reads_back_to_the_described_options():
    """Each bullet of the section parses back to the option's default, allowed values and description."""
    defaults = metric_options("ssim")
    described = describe_options("ssim", defaults)
    text = options_section("ssim", defaults)
    head, blank, *bullets = text.splitlines()
    assert head == "Options (``genmetrics info ssim``):" and blank == ""
    line = re.compile(r"\* ``(\w+)`` \(default ``(.*?)``(?:; (.*?))?\)(?:: (.*))?$")
    parsed = {}
    for b in bullets:
        name, default, allowed, what = line.match(b).groups()
        parsed[name] = {"default": default, "allowed": allowed or "", "description": what or ""}
    assert parsed == {k: {**d, "default": str(d["default"])} for k, d in described.items()}
