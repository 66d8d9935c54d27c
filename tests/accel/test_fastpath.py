"""An unusable ``fast_paths.json`` (a top-level list, an entry of the wrong type, a null path) is named in one
warning and the path measured again, then recorded usable."""

from __future__ import annotations

import json
import warnings

import pytest

from genmetrics.accel import fastpath
from genmetrics.backbones.weights import genmetrics_home

KEY = ("record_demo", "float32", 1)


def _bad_records() -> list[object]:
    k = fastpath._machine_key(KEY)
    return [
        [1, 2, 3],  # a top-level list
        {k: "fast", "x": [1, 2]},  # the entry a string
        {k: 3},  # a number
        {k: ["fast"]},  # a list
        {k: {"path": None, "speedups": "fast"}},  # a null path
    ]


@pytest.mark.parametrize("record", _bad_records(), ids=["toplevel-list", "string", "number", "list", "null"])
def test_an_unusable_record_is_named_once_measured_again_and_rewritten(monkeypatch, record):
    monkeypatch.setattr(fastpath, "_warned", set())
    store = genmetrics_home() / fastpath.STORE_NAME
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(record))
    measured: list[str] = []
    cands = {"plain": lambda: measured.append("plain"), "fast": lambda: measured.append("fast")}
    fastpath.forget_fast_path_choices()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            choice = fastpath.choose_path(KEY, lambda: cands, baseline="plain", exact=True, repeats=2)
    finally:
        fastpath.forget_fast_path_choices()
    said = [str(w.message) for w in caught if "fast-path record" in str(w.message)]
    assert len(said) == 1 and str(store) in said[0] and "measured again" in said[0], said
    assert sorted(measured) == ["fast", "fast", "plain", "plain"]  # both candidates timed: measured again
    entry = json.loads(store.read_text())[fastpath._machine_key(KEY)]
    assert entry["path"] == choice.path in cands  # the file now holds a usable entry for the key


def test_a_usable_record_is_taken_without_a_word(monkeypatch):
    store = genmetrics_home() / fastpath.STORE_NAME
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({fastpath._machine_key(KEY): {"path": "fast"}}))
    fastpath.forget_fast_path_choices()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            choice = fastpath.choose_path(KEY, lambda: pytest.fail("measured"), baseline="plain", exact=True)
    finally:
        fastpath.forget_fast_path_choices()
    assert choice.path == "fast"


def test_no_record_yet_is_measured_and_written_without_a_word(monkeypatch):
    """A fresh GENMETRICS_HOME has no fast_paths.json: the first choice is measured and recorded, and nothing
    is said about the record (it is not an unusable one)."""
    monkeypatch.setattr(fastpath, "_warned", set())
    store = genmetrics_home() / fastpath.STORE_NAME
    assert not store.exists()
    cands = {"plain": lambda: None, "fast": lambda: None}
    fastpath.forget_fast_path_choices()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            choice = fastpath.choose_path(KEY, lambda: cands, baseline="plain", exact=True, repeats=2)
    finally:
        fastpath.forget_fast_path_choices()
    assert json.loads(store.read_text())[fastpath._machine_key(KEY)]["path"] == choice.path
