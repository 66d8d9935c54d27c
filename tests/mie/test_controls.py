"""``evaluate-human mie --controls``: the same pairs scored with references swapped between pairs
and with blank references, printed next to the accuracy. The controls must use the right rows: a swapped
reference comes from ANOTHER pair (never the pair itself; one with other files whenever there is one), the
pair keeps its own prompt and candidates, and blank references are uniform images of the references' sizes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from _data import eval_argv
from PIL import Image

from genmetrics.cli.main import main


class SpyModel:
    """Stands in for an MIEModel: records every score_pairs call; scores from the inputs' names."""

    def __init__(self):
        self.calls = []

    def score_pairs(self, references, prompts, cands_a, cands_b):
        from genmetrics.mie.model import MIEOutput

        self.calls.append((references, prompts, cands_a, cands_b))
        n = len(prompts)
        g = torch.Generator().manual_seed(len(self.calls))
        return (
            MIEOutput(torch.rand(n, generator=g), torch.zeros(n, 3)),
            MIEOutput(torch.rand(n, generator=g), torch.zeros(n, 3)),
        )


@pytest.fixture()
def records(pairs_file):
    from genmetrics.data.jsonl import load_mib_pairs

    return load_mib_pairs(pairs_file)  # 8 pairs over a pool of references: pairs 0, 3, 6 share theirs


def _flat(calls):
    """The rows of a scoring run (it may be split into batches)."""
    out = [[], [], [], []]
    for call in calls:
        for k in range(4):
            out[k] += list(call[k])
    return out


def _names(records):
    """Each image as the model is given it (decoded by the input pipeline) -> the file it came from."""
    from genmetrics.data.io.pipeline import decoded

    files = sorted({str(p) for r in records for p in (*r.references, *r.candidates)})
    table = [(p, out[0]) for batch in decoded(files, workers=0) for p, out in batch]

    def name(x):
        hits = [p for p, t in table if t.shape == x.shape and torch.equal(t, x)]
        assert len(hits) == 1
        return hits[0]

    return name


def test_controls_use_the_right_rows(records):
    from genmetrics.mie.evaluate import CONTROLS, evaluate_human

    spy = SpyModel()
    report, scores = evaluate_human(records, model=spy, controls=True, n_boot=20, batch_pairs=3, workers=0)
    name = _names(records)
    spy.calls = [  # decoded images back to their files; the blank references stay PIL images
        (
            [[name(x) if isinstance(x, torch.Tensor) else x for x in refs] for refs in R],
            P,
            list(map(name, A)),
            list(map(name, B)),
        )
        for R, P, A, B in spy.calls
    ]
    assert len(spy.calls) == 3 * 3  # real run, swapped, blank; 8 pairs in batches of 3
    real, swapped, blank = (_flat(spy.calls[k : k + 3]) for k in (0, 3, 6))
    donors = report["controls"]["swapped_references"]["donors"]
    assert sorted(report["controls"]) == sorted(CONTROLS) and set(CONTROLS.values()) <= set(scores)
    for i, r in enumerate(records):
        own = [str(p) for p in r.references]
        assert [str(p) for p in real[0][i]] == own
        # swapped: the references of another pair, with other files; prompt and candidates its own
        d = donors[i]
        assert d != i and [str(p) for p in swapped[0][i]] == [str(p) for p in records[d].references] != own
        assert (swapped[1][i], swapped[2][i], swapped[3][i]) == (
            r.prompt,
            str(r.candidates[0]),
            str(r.candidates[1]),
        )
        # blank: as many uniform images as references, each of its reference's size
        assert len(blank[0][i]) == len(r.references)
        for im, p in zip(blank[0][i], r.references):
            with Image.open(p) as ref:
                assert im.size == ref.size
            assert len(np.unique(np.asarray(im))) == 1
        assert (blank[1][i], blank[2][i]) == (r.prompt, str(r.candidates[0]))
    assert report["controls"]["swapped_references"]["same_files"] == 0
    # each control's accuracy is computed from its own scores
    sw = scores[CONTROLS["swapped_references"]]
    prefers_a = np.array([r.preference == 0 for r in records])
    assert report["controls"]["swapped_references"]["accuracy"]["value"] == pytest.approx(
        float(np.mean((sw["a"] > sw["b"]) == prefers_a))
    )


def test_swap_donors_never_pick_the_pair_itself():
    """Only identical reference sets to choose from: still another pair (noted as same_files)."""
    from pathlib import Path

    from genmetrics.data.jsonl import MIBPairRecord
    from genmetrics.errors import InputError
    from genmetrics.mie.evaluate import swap_donors

    recs = [
        MIBPairRecord(f"p{i}", "x", (Path("r.png"),), (Path("a.png"), Path("b.png")), ("g", "h"), 0)
        for i in range(5)
    ]
    for seed in range(5):
        donors = swap_donors(recs, seed)
        assert all(d != i for i, d in enumerate(donors)), donors
    with pytest.raises(InputError, match="at least 2"):
        swap_donors(recs[:1])


def test_evaluate_human_prints_the_controls(tmp_path, pairs_file, make_model, provider, capsys):
    """End to end with a tiny MIE checkpoint: the line next to the accuracy, report.md, scores.jsonl, JSON,
    and the swapped control of pair 0 equal to scoring it by hand with its donor's references."""
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.evaluate import swap_donors

    model = make_model("layer_only")
    model.save_pretrained(tmp_path / "ckpt")
    rc = main(eval_argv(pairs_file, tmp_path / "ckpt", tmp_path / "e", "--controls", "--n-boot", "20"))
    out = capsys.readouterr()
    assert rc == 0, out.err
    lines = out.out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("mie: pairwise accuracy"))
    assert re.fullmatch(
        r"mie controls: swapped references [01]\.\d{3}, blank references [01]\.\d{3} \(.*\)", lines[i + 1]
    ), lines[i + 1]
    assert "## Controls" in (tmp_path / "e" / "report.md").read_text()
    rows = [json.loads(x) for x in (tmp_path / "e" / "scores.jsonl").read_text().splitlines()]
    records = load_mib_pairs(pairs_file)
    d = swap_donors(records)[0]
    a, b = model.score_pairs(
        [[str(p) for p in records[d].references]],
        [records[0].prompt],
        [str(records[0].candidates[0])],
        [str(records[0].candidates[1])],
    )
    got = rows[0]["scores"]["mie (swapped references)"]
    assert got == pytest.approx([float(a.score[0]), float(b.score[0])], abs=1e-5)
    assert rows[0]["scores"]["mie"] != pytest.approx(got, abs=1e-6)  # other references, other scores
    rc = main(
        eval_argv(pairs_file, tmp_path / "ckpt", tmp_path / "j", "--controls", "--n-boot", "10", "--json")
    )
    res = json.loads(capsys.readouterr().out)
    assert sorted(res["controls"]) == ["blank_references", "swapped_references"]
    rc = main(["evaluate-human", "mie", "--data", str(pairs_file), "--metrics", "psnr", "--controls"])
    assert rc == 2 and "--heads" in capsys.readouterr().err


def test_a_swap_that_changes_nothing_is_not_read_as_a_control(records):
    """When every pair's references are the same files, swapping them between pairs scores the pairs as they
    are: the report keeps the reading with ``changed: 0`` and shows '–' instead of an accuracy that would
    read as "the evaluator ignores its references" (found by the hostile-user pass)."""
    import dataclasses

    from genmetrics.mie.evaluate import evaluate_human, report_markdown

    same = [dataclasses.replace(r, references=records[0].references) for r in records]
    report, _ = evaluate_human(same, model=SpyModel(), controls=True, n_boot=20, batch_pairs=4)
    info = report["controls"]["swapped_references"]
    assert info["changed"] == 0 and info["same_files"] == len(same)
    row = next(x for x in report_markdown(report).splitlines() if x.startswith("| swapped references"))
    assert "nothing to swap" in row and not re.search(r"\d\.\d", row), row
    report, _ = evaluate_human(records, model=SpyModel(), controls=True, n_boot=20, batch_pairs=4)
    assert report["controls"]["swapped_references"]["changed"] == len(records)  # pairs 0, 3, 6 get others'
    row = next(x for x in report_markdown(report).splitlines() if x.startswith("| swapped references"))
    assert re.search(r"\d\.\d", row), row
