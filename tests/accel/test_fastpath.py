"""genmetrics.accel.fastpath: a score never depends on a timing (the whole registry scored with an empty
``GENMETRICS_HOME``, with every recorded choice flipped and with fast paths off gives the same bits); an
unusable ``fast_paths.json`` (a top-level list, an entry of the wrong type, a null path) is named in one
warning and the path measured again, then recorded usable."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from genmetrics.accel import clip_packed, fastpath
from genmetrics.backbones.weights import genmetrics_home
from genmetrics.errors import InputError
from genmetrics.metric import SampleMetric
from tests.contract import tester as T

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


#: a recorded choice and the other path of the same choice
_FLIP = {"torch": "native", "native": "torch", "plain": "packed", "packed": "plain"}


def _psnr_cases() -> list[dict]:
    """psnr on uint8 images (the native kernel's exact, automatic case) and on float32 images (its
    bit-changing case): the contract batches are uint8 only."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randint(0, 256, (5, 3, 24, 40), generator=g, dtype=torch.uint8)
    cand = torch.randint(0, 256, (5, 3, 24, 40), generator=g, dtype=torch.uint8)
    fref, fcand = torch.rand(4, 3, 24, 40, generator=g), torch.rand(4, 3, 24, 40, generator=g)
    return [{"reference": list(ref), "candidates": list(cand)}, {"reference": fref, "candidates": fcand}]


def _score_everything() -> dict[str, torch.Tensor]:
    """Every registered metric (tiny backbones, the contract tester's batches, all in one update): its value
    and, for a sample metric, its per-sample scores; plus psnr on uint8 and on float32 images."""
    cases = [(name, T.batches(name)) for name in T.NAMES] + [("psnr", [c]) for c in _psnr_cases()]
    out: dict[str, torch.Tensor] = {}
    for i, (name, updates) in enumerate(cases):
        m = T.build(name)
        try:
            m.update(**T.merged(updates))
            value = m.compute()
        except InputError:  # a set metric whose batches alone define no value
            value = m._undefined_value()
        parts = value if isinstance(value, dict) else {"value": value}
        for k, v in parts.items():
            out[f"{i}:{name}:{k}"] = torch.as_tensor(v).detach().cpu()
        if isinstance(m, SampleMetric):
            out[f"{i}:{name}:per_sample"] = m.per_sample()["scores"].detach().cpu()
    return out


def _fresh_process_state() -> None:
    fastpath.forget_fast_path_choices()
    clip_packed.release_packed_weights()


def test_no_score_depends_on_a_timing_or_a_recorded_choice(tmp_path, monkeypatch):
    """Three ways: an empty GENMETRICS_HOME (the exact fast paths measured and recorded), every recorded
    choice flipped to the other path (as if another timing had won), and every fast path off. The bits of
    every value and per-sample score are the same (exact equality, NaN where NaN)."""
    monkeypatch.delenv(fastpath.FAST_PATHS_ENV, raising=False)
    runs = {}
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "empty"))
    _fresh_process_state()
    runs["empty home"] = _score_everything()
    store = tmp_path / "empty" / fastpath.STORE_NAME
    record = json.loads(store.read_text()) if store.exists() else {}
    from genmetrics.accel.pixel_native import native_available

    if native_available():  # the uint8 psnr case measured the kernel: there is a choice to flip
        assert any(json.loads(k)[4] == "psnr_native" for k in record), record
    flipped = {k: {**v, "path": _FLIP.get(v["path"], v["path"])} for k, v in record.items()}
    (tmp_path / "flipped").mkdir()
    (tmp_path / "flipped" / fastpath.STORE_NAME).write_text(json.dumps(flipped))
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "flipped"))
    _fresh_process_state()
    runs["every choice flipped"] = _score_everything()
    assert json.loads((tmp_path / "flipped" / fastpath.STORE_NAME).read_text()) == flipped  # read, not redone
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "off"))
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "off")
    _fresh_process_state()
    runs["fast paths off"] = _score_everything()
    _fresh_process_state()
    first = runs["empty home"]
    for how, got in runs.items():
        assert got.keys() == first.keys()
        for k in first:
            torch.testing.assert_close(got[k], first[k], rtol=0, atol=0, equal_nan=True, msg=f"{how}: {k}")


@pytest.mark.parametrize(
    "value, expected",
    [
        (" ALL ", ("all", frozenset())),
        ("", ("exact", frozenset())),
        ("psnr_native, ", ("exact", frozenset({"psnr_native"}))),
        # 'exact' is the default that always holds: listing it beside names used to be refused as unknown
        # by a message that in the same breath listed 'exact' as expected
        ("exact,psnr_native", ("exact", frozenset({"psnr_native"}))),
        ("Exact", ("exact", frozenset())),
    ],
)
def test_fast_paths_spellings(monkeypatch, value, expected):
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, value)
    assert fastpath.fast_paths_mode() == expected


@pytest.mark.parametrize(
    "value, said",
    [
        ("fast", "unknown fast path(s) ['fast']"),
        ("psnr_native,typo", "unknown fast path(s) ['typo']"),
        ("off,psnr_native", "'off' is a setting of its own"),
        ("all,psnr_native", "'all' is a setting of its own"),
    ],
)
def test_bad_fast_paths_values_name_the_variable_and_the_fix(monkeypatch, value, said):
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, value)
    with pytest.raises(InputError, match=fastpath.FAST_PATHS_ENV) as e:
        fastpath.fast_paths_mode()
    assert said in str(e.value)
