"""`evaluate-human --controls`: the same records scored with the aspect replaced (by "overall",
by another record's aspect) and, for 2AFC, with another record's reference, read against the original votes.
The controls are computed on the right rows: a swapped reference really is another record's (a control that
swapped a record with itself would read exactly the real agreement), and a scorer blind to an input reads
its real agreement under that input's control."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from genmetrics.backbones.provider import use_provider
from genmetrics.functional.agreement import per_sample_agreement
from genmetrics.testing import tiny_backbones
from genmetrics.tpips.evaluate import (
    CONTROLS,
    SimilarityScorer,
    control_sets,
    evaluate_human,
    load_human_data,
    to_markdown,
)
from genmetrics.tpips.model import TPIPSModel

from .conftest import SIZE, make_triplets, make_two_afc


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("controls")
    ooo = load_human_data(make_triplets(root, n=6))  # aspects lighting / overall / color, cycling
    afc = load_human_data(make_two_afc(root, n=8))
    # a 2AFC set with varied aspects (the generated one uses "color" throughout)
    aspects = ["color", "lighting", "pose of the cat", "color", "overall", "texture", "color", "lighting"]
    afc.records = [replace(r, aspect=a) for r, a in zip(afc.records, aspects)]
    return ooo, afc


def _next_different(values, i):
    n = len(values)
    return next(((i + s) % n for s in range(1, n) if values[(i + s) % n] != values[i]), i)


def test_control_sets_take_inputs_from_other_records(data):
    ooo, afc = data
    sets = {c.name: c for c in control_sets(afc)}
    assert list(sets) == list(CONTROLS)
    refs = [str(r.reference) for r in afc.records]
    swapped = sets["reference_swapped"]
    for i, (orig, ctrl) in enumerate(zip(afc.records, swapped.dataset.records)):
        j = swapped.source[i]
        assert j != i and j == _next_different(refs, i)
        assert ctrl.reference == afc.records[j].reference != orig.reference  # really another record's
        assert (ctrl.candidates, ctrl.votes, ctrl.aspect, ctrl.id) == (
            orig.candidates,
            orig.votes,
            orig.aspect,
            orig.id,
        )
    assert swapped.changed == afc.n
    aspects = sets["aspect_swapped"]
    for i, (orig, ctrl) in enumerate(zip(afc.records, aspects.dataset.records)):
        assert ctrl.aspect == afc.records[aspects.source[i]].aspect != orig.aspect
        assert ctrl.reference == orig.reference
    overall = sets["aspect_overall"]
    assert all(r.aspect == "overall" for r in overall.dataset.records)
    assert overall.changed == sum(r.aspect != "overall" for r in afc.records) == 7
    assert [c.name for c in control_sets(ooo)] == [
        "aspect_overall",
        "aspect_swapped",
    ]  # no reference in a triplet
    same = replace(afc, records=[replace(r, aspect="color") for r in afc.records])
    assert {c.name: c for c in control_sets(same)}["aspect_swapped"].changed == 0  # nothing to swap with


def _reading(res, name, control, ds):
    model = next(m for m in res["models"] if m["name"] == name)
    return model["controls"][control][ds]["overall"]["mean"], model["results"][ds]["overall"]["mean"]


def test_controls_are_computed_on_the_control_rows(data):
    """Scorers blind to the reference or the aspect read their real agreement under that control, and the
    readings of a scorer that uses both are its predictions on the control rows (recomputed here by hand)."""
    ooo, afc = data
    seen: list[list[str]] = []

    def uses_both(a, b, aspects):
        seen.append([str(x) for x in a])
        return torch.tensor([float(hash((str(x), str(y), c)) % 1000) for x, y, c in zip(a, b, aspects)])

    scorers = [
        SimilarityScorer(name="both", fn=uses_both),
        SimilarityScorer(
            name="no-ref",
            fn=lambda a, b, c: torch.tensor([float(hash((str(y), z)) % 997) for y, z in zip(b, c)]),
        ),
        SimilarityScorer(
            name="no-aspect",
            fn=lambda a, b, c: torch.tensor([float(hash((str(x), str(y))) % 991) for x, y in zip(a, b)]),
        ),
    ]
    res = evaluate_human([ooo, afc], scorers, controls=True, progress=False)
    ctrl, real = _reading(res, "no-ref", "reference_swapped", "2AFC")
    assert ctrl == real
    for name in ("aspect_overall", "aspect_swapped"):
        for ds in ("Odd-One-Out", "2AFC"):
            assert _reading(res, "no-aspect", name, ds)[0] == _reading(res, "no-aspect", name, ds)[1]
    # the reference control of the scorer that uses it, by hand: each record against the next record's reference
    recs = afc.records
    refs = [str(r.reference) for r in recs]
    src = [_next_different(refs, i) for i in range(len(recs))]
    swapped_refs = [recs[j].reference for j in src]
    assert any(call == [str(x) for x in swapped_refs + swapped_refs] for call in seen)  # the rows scored
    pred = torch.stack(
        [
            uses_both(swapped_refs, [r.candidates[0] for r in recs], [r.aspect for r in recs]),
            uses_both(swapped_refs, [r.candidates[1] for r in recs], [r.aspect for r in recs]),
        ],
        1,
    ).double()
    expected = float(per_sample_agreement(pred, afc.votes()).mean())
    assert _reading(res, "both", "reference_swapped", "2AFC")[0] == pytest.approx(expected, abs=1e-12)
    assert res["models"][0]["controls"]["reference_swapped"]["2AFC"]["changed"] == afc.n
    assert "reference_swapped" not in {
        k for k, v in res["models"][0]["controls"].items() if "Odd-One-Out" in v
    }
    md = to_markdown(res)
    assert "| control | both: reference of another record |" in md and "Controls:" in md


def test_controls_on_the_tiny_backbone_and_the_command_line(data, tmp_path, capsys):
    """A late-fusion model on the tiny Qwen3-VL: its reference control equals its scores on the swapped rows;
    the command prints the control rows and writes them to results.json."""
    from genmetrics.cli.main import main
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    ooo, afc = data
    model = TPIPSModel(tiny_qwen3vl(seed=0), tiny_qwen3vl_processor(), "late", image_size=SIZE)
    res = evaluate_human(
        [afc], [SimilarityScorer(name="tpips", fn=model.similarity)], controls=True, progress=False
    )
    recs = afc.records
    src = [_next_different([str(r.reference) for r in recs], i) for i in range(len(recs))]
    refs = [recs[j].reference for j in src]
    pred = torch.stack(
        [model.similarity(refs, [r.candidates[k] for r in recs], [r.aspect for r in recs]) for k in (0, 1)], 1
    ).double()
    expected = float(per_sample_agreement(pred, afc.votes()).mean())
    assert _reading(res, "tpips", "reference_swapped", "2AFC")[0] == pytest.approx(expected, abs=1e-9)

    out = tmp_path / "report"
    with use_provider(tiny_backbones):
        rc = main(
            [
                "evaluate-human",
                "tpips",
                "--data",
                ooo.path,
                "--data",
                afc.path,
                "--controls",
                "--out",
                str(out),
            ]
        )
    printed = capsys.readouterr().out
    assert rc == 0
    assert "| control | Qwen3-VL-Emb (zero-shot): aspect -> overall |" in printed
    assert "| control | Qwen3-VL-Emb (zero-shot): reference of another record |" in printed
    saved = json.loads((out / "results.json").read_text())["models"][0]["controls"]
    assert set(saved) == set(CONTROLS) and set(saved["aspect_swapped"]) == {"Odd-One-Out", "2AFC"}
    assert json.loads((out / "manifest.json").read_text()).get("controls") is True
