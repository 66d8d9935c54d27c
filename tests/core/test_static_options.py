"""A metric's options read from its source (genmetrics.core.static_options) equal those of its imported
signature, following ``__init__`` up the base classes while one passes ``**kwargs`` on; anything it cannot read
statically gives None (the caller then imports)."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from genmetrics.core.registry import alias_of, get_card, list_metrics, metric_class
from genmetrics.core.static_options import static_options


def _imported_options(klass: type) -> dict:
    """The second computation: ``{option: repr(default) or None}`` from ``inspect.signature`` of each
    ``__init__`` up the MRO while it takes ``**kwargs``."""
    expected: dict = {}
    for k in klass.__mro__:
        init = k.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for p, v in params.items():
            if p != "self" and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p not in expected:
                expected[p] = None if v.default is inspect.Parameter.empty else repr(v.default)
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            break
    return expected


def test_static_options_equal_the_imported_signatures():
    for name in list_metrics():
        if alias_of(name):
            continue
        static = static_options(get_card(name).factory)
        assert static is not None, name
        assert static == _imported_options(metric_class(name)), name


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """A throw-away package ``genmetrics_static_probe`` on sys.path (static_options reads only modules
    whose name starts with ``genmetrics``)."""
    pkg = tmp_path / "genmetrics_static_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    from genmetrics.core import static_options as S

    S._module_tree.cache_clear()
    yield pkg
    S._module_tree.cache_clear()


def test_a_constant_default_and_a_kwargs_chain_are_followed(plugin_module):
    (plugin_module / "consts.py").write_text("LIMIT = (1, 2.5)\n")
    (plugin_module / "base.py").write_text(
        textwrap.dedent(
            """
            class Base:
                def __init__(self, shared=3, *, name="b", **kwargs):
                    pass
            """
        )
    )
    (plugin_module / "m.py").write_text(
        textwrap.dedent(
            """
            from genmetrics_static_probe.base import Base
            from genmetrics_static_probe.consts import LIMIT

            class Leaf(Base):
                def __init__(self, required, limit=LIMIT, *, name="leaf", **kwargs):
                    super().__init__(name=name, **kwargs)
            """
        )
    )
    got = static_options("genmetrics_static_probe.m:Leaf")
    assert got == {"required": None, "limit": "(1, 2.5)", "name": "'leaf'", "shared": "3"}
    import importlib

    leaf = importlib.import_module("genmetrics_static_probe.m").Leaf
    assert got == _imported_options(leaf)


@pytest.mark.parametrize(
    "source,factory",
    [
        ("class A:\n    def __init__(self, x=len('ab')):\n        pass\n", "m:A"),  # a call: not a literal
        ("from genmetrics_static_probe.nowhere import Base\nclass A(Base):\n    pass\n", "m:A"),
        ("class A:\n    pass\n", "m:Missing"),
        ("class A(\n", "m:A"),  # a syntax error
    ],
    ids=["call-default", "unknown-base", "no-such-class", "syntax-error"],
)
def test_what_cannot_be_read_statically_is_none(plugin_module, source, factory):
    (plugin_module / "m.py").write_text(source)
    assert static_options("genmetrics_static_probe." + factory) is None


def test_modules_outside_genmetrics_are_not_read():
    assert static_options("collections:OrderedDict") is None
