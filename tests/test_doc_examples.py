"""Public classes and functions carry a short runnable example (a doctest; CI runs
``pytest --doctest-modules genmetrics``, which executes them).

The public API walked here:

* every module of the package (private modules, ``_name``, and the click commands under ``cli/``
  excepted): the names of its ``__all__`` when it declares one, else every public class and function
  defined in it;
* the class of every registered metric (a card's ``factory``).

A name passes when its docstring holds a ``>>>`` line. Every public method of those classes (functions,
class and static methods and properties defined in the class body) carries a docstring of its own;
:data:`PENDING_DOCSTRINGS` lists the ones still waiting (it may only shrink too). :data:`EXEMPT` lists the few that cannot run in a
doctest, each with the reason; :data:`PENDING` lists the names still waiting for an example (it may only
shrink: a listed name that has gained an example fails the test until it is removed from the list).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil

import pytest

import genmetrics

#: qualified name -> why it has no runnable example
EXEMPT = {
    "genmetrics.testing.spawn_gloo": "starts worker processes (gloo); tests/contract runs it",
}
#: qualified name -> what is missing (names still without an example; the list only shrinks)
PENDING: dict[str, str] = {}
METRIC_METHODS = ["options", "has_data", "backbones", "per_sample", "state_snapshot"]
#: ``Class.method`` (qualified name, so an entry survives a module move) -> where it is defined; methods
#: still without a docstring of their own (the list only shrinks)
PENDING_DOCSTRINGS: dict[str, str] = {}


def _modules() -> list[str]:
    names = ["genmetrics"]
    for m in pkgutil.walk_packages(genmetrics.__path__, "genmetrics."):
        parts = m.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] == "cli" or parts[-1] == "cli":
            continue
        names.append(m.name)
    return names


def _wanted(obj: object) -> bool:
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False  # constants (VARIANTS, SET_ID, ...) need no example
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return False  # enums are shown in MetricCard's example
    return True


def public_api() -> dict[str, object]:
    """Qualified name -> object for every public class and function (each object once)."""
    from genmetrics.core.registry import get_card, list_metrics

    found: dict[str, object] = {}
    seen: set[int] = set()

    def add(label: str, obj: object) -> None:
        if _wanted(obj) and id(obj) not in seen:
            seen.add(id(obj))
            found[label] = obj

    for name in _modules():
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            for n in module.__all__:
                add(f"{name}.{n}", getattr(module, n))
            continue
        for n, obj in vars(module).items():
            if not n.startswith("_") and getattr(obj, "__module__", None) == name:
                add(f"{name}.{n}", obj)
    for metric in list_metrics():
        path, cls = get_card(metric).factory.split(":")
        add(f"{path}.{cls}", getattr(importlib.import_module(path), cls))
    return found


def has_example(obj: object) -> bool:
    return ">>>" in (inspect.getdoc(obj) or "")


def public_methods(api: dict[str, object]) -> dict[str, object]:
    """``Class.method`` -> function for every public method defined in the body of a public class of
    ``api`` (properties by their getter, class and static methods by their function, decorated methods
    unwrapped; a name bound to a function defined elsewhere is not a method of the class)."""
    out: dict[str, object] = {}
    for obj in api.values():
        if not inspect.isclass(obj):
            continue
        for name, member in vars(obj).items():
            fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            fn = inspect.unwrap(fn) if callable(fn) else fn
            if name.startswith("_") or not inspect.isfunction(fn):
                continue
            if fn.__qualname__ == f"{obj.__qualname__}.{name}":
                out.setdefault(fn.__qualname__, fn)
    return out


def has_docstring(fn: object) -> bool:
    """The function's own docstring (not one inherited from a base class) says something."""
    return bool((getattr(fn, "__doc__", None) or "").strip())


@pytest.fixture(scope="module")
def api() -> dict[str, object]:
    return public_api()


def test_every_public_name_has_an_example(api):
    missing = sorted(
        n for n, obj in api.items() if n not in EXEMPT and n not in PENDING and not has_example(obj)
    )
    assert not missing, f"add a short runnable example (>>> ...) to the docstring of: {missing}"


def test_pending_list_only_shrinks(api):
    done = sorted(n for n in PENDING if n in api and has_example(api[n]))
    gone = sorted(n for n in {**PENDING, **EXEMPT} if n not in api)
    assert not done, f"these now have examples: remove them from PENDING in {__file__}: {done}"
    assert not gone, f"these are no longer public names: remove them from PENDING/EXEMPT: {gone}"


def test_every_public_method_has_a_docstring(api):
    missing = sorted(
        n for n, fn in public_methods(api).items() if n not in PENDING_DOCSTRINGS and not has_docstring(fn)
    )
    assert not missing, f"add a docstring (what it returns or does; units, shapes) to: {missing}"


def test_pending_docstrings_only_shrink(api):
    methods = public_methods(api)
    done = sorted(n for n in PENDING_DOCSTRINGS if n in methods and has_docstring(methods[n]))
    gone = sorted(n for n in PENDING_DOCSTRINGS if n not in methods)
    assert not done, f"these now have docstrings: remove them from PENDING_DOCSTRINGS in {__file__}: {done}"
    assert not gone, f"these are no longer public methods: remove them from PENDING_DOCSTRINGS: {gone}"
    assert len(methods) > 200  # the walk reaches the classes' methods, not a handful


def test_the_method_walk_sees_properties_decorated_and_class_methods(tmp_path, monkeypatch):
    """Properties, class methods and decorated methods are walked; private names, functions bound from
    elsewhere and inherited methods are not; a docstring must be the method's own."""
    (tmp_path / "gm_method_probe.py").write_text(
        "import functools\n\n"
        "def helper():\n    'Defined elsewhere.'\n\n"
        "def deco(f):\n    @functools.wraps(f)\n    def w(*a):\n        return f(*a)\n    return w\n\n"
        "class Base:\n    def inherited(self):\n        'Documented in the base.'\n\n"
        "class Probe(Base):\n"
        "    alias = helper\n"
        "    def inherited(self):\n        pass\n"
        "    @property\n    def size(self):\n        return 1\n"
        "    @classmethod\n    def make(cls):\n        'Builds one.'\n"
        "    @deco\n    def wrapped(self):\n        pass\n"
        "    def _private(self):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("gm_method_probe")
    methods = public_methods({"Probe": probe.Probe})
    assert sorted(methods) == ["Probe.inherited", "Probe.make", "Probe.size", "Probe.wrapped"]
    assert sorted(n for n, fn in methods.items() if not has_docstring(fn)) == [
        "Probe.inherited",
        "Probe.size",
        "Probe.wrapped",
    ]


def test_the_walk_sees_the_documented_surface(api):
    """The walk is not vacuous: it reaches every family, the functional API, the metric classes, the
    training loop and modules without ``__all__``, and finds over three hundred names."""
    for name in [
        "genmetrics.create_metric",
        "genmetrics.functional.sad",
        "genmetrics.raclip.RAClipScore",
        "genmetrics.baselines.pixel.PSNR",
        "genmetrics.tpips.TPIPS",
        "genmetrics.mie.MIEModel",
        "genmetrics.train.fit",
        "genmetrics.leaderboard.run_leaderboard",
        "genmetrics.wrappers.BootStrapper",
        "genmetrics.testing.tiny_clip",
        "genmetrics.data.images.load_image",  # the documented path, walked before data.io.images
        "genmetrics.raclip.model.eq7_mask",
    ]:
        assert name in api, name
    assert len(api) > 300


def test_metric_public_api_has_examples():
    from genmetrics.core.metric import Metric, SampleMetric

    assert all(
        has_example(getattr(Metric, m) if hasattr(Metric, m) else getattr(SampleMetric, m))
        for m in METRIC_METHODS
    )


def test_checker_notices_a_missing_example(tmp_path, monkeypatch):
    (tmp_path / "gm_doc_probe.py").write_text(
        'def f():\n    """No example."""\n\n\ndef g():\n    """>>> 1\n    1\n    """\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("gm_doc_probe")
    assert [has_example(probe.f), has_example(probe.g)] == [False, True]


def test_contributing_map_names_every_module():
    """docs/contributing.md's "Which file holds what" names every package folder and every module file."""
    from pathlib import Path

    root = Path(genmetrics.__file__).parent
    text = (root.parent / "docs" / "contributing.md").read_text(encoding="utf-8")
    layout = text.split("## Which file holds what", 1)[1].split("```", 2)[1]
    files = sorted(p for p in root.rglob("*.py") if p.name != "__init__.py")
    missing = [str(p.relative_to(root)) for p in files if p.name not in layout]
    missing += [
        f"{d.name}/"
        for d in sorted(root.iterdir())
        if d.is_dir() and (d / "__init__.py").is_file() and f"{d.name}/" not in layout
    ]
    assert not missing, f"docs/contributing.md's file map does not name: {missing}"
