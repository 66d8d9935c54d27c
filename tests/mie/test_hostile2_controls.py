"""``evaluate-human mie --controls`` when pairs' references are the same images under other paths (hostile2):
a copy or a symlink of a reference is the same reference, so swapping it in scores the pair as it is. The
swapped control must then read '– (nothing to swap)' (report.md, the CLI line) with ``changed: 0`` in the
JSON, and where other images exist the donor is one of them."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
import torch


class Spy:
    """Stands in for an MIEModel: random scores, and the references of every scoring call."""

    def __init__(self):
        self.refs = []

    def score_pairs(self, references, prompts, cands_a, cands_b):
        from genmetrics.mie.model import MIEOutput

        self.refs += [list(r) for r in references]
        n = len(prompts)
        g = torch.Generator().manual_seed(len(self.refs))
        return MIEOutput(torch.rand(n, generator=g), torch.zeros(n, 3)), MIEOutput(
            torch.rand(n, generator=g), torch.zeros(n, 3)
        )


def _aliases(records, tmp_path, how: str):
    """Every pair gets pair 0's reference images under its own paths (copies or symlinks)."""
    out = []
    for i, r in enumerate(records):
        refs = []
        for k, p in enumerate(records[0].references):
            q = tmp_path / f"{how}_{i}_{k}{p.suffix}"
            if how == "copy":
                shutil.copy(p, q)
            else:
                os.symlink(p, q)
            refs.append(q)
        out.append(dataclasses.replace(r, references=tuple(refs)))
    return out


@pytest.mark.parametrize("how", ["copy", "symlink"])
def test_copies_and_symlinks_of_one_reference_are_nothing_to_swap(records_8, tmp_path, how):
    """Before: the paths differed, so ``changed`` was 8 and the swapped control read an accuracy -- the pairs'
    own scores again, which reads as 'the evaluator ignores its references'."""
    from genmetrics.mie.evaluate import evaluate_human, report_markdown

    same = _aliases(records_8, tmp_path, how)
    report, _ = evaluate_human(same, model=Spy(), controls=True, n_boot=10, batch_pairs=4)
    info = report["controls"]["swapped_references"]
    assert info["changed"] == 0 and info["same_files"] == len(same), info
    row = next(x for x in report_markdown(report).splitlines() if x.startswith("| swapped references"))
    assert "nothing to swap" in row, row


def test_an_alias_is_not_taken_as_a_donor_when_other_images_exist(records_8, tmp_path):
    """Pairs 0-3 get copies of pair 0's references under their own paths, pairs 4-7 keep theirs: every pair's
    donor has other image bytes than its own, for several seeds (before, a copy counted as another image)."""
    from genmetrics.mie.evaluate import reference_keys, swap_donors

    recs = _aliases(records_8[:4], tmp_path, "copy") + list(records_8[4:])
    keys = reference_keys(recs)
    assert len(set(keys[:4])) == 1 and len({r.references for r in recs[:4]}) == 4
    for seed in range(4):
        donors = swap_donors(recs, seed)
        assert all(d != i and keys[d] != keys[i] for i, d in enumerate(donors)), (seed, donors)


def test_cli_prints_nothing_to_swap_for_two_pairs_that_are_copies(
    tmp_path, pairs_file, make_model, provider, capsys
):
    """End to end, 2 pairs whose references are copies of one image: the CLI line reads '– (nothing to swap)'
    for the swapped control and a number for the blank one; ``--json`` gives it null and names it in
    ``controls_nothing_to_swap``; report.json keeps the reading with ``changed: 0``."""
    from _data import eval_argv

    from genmetrics.cli.main import main

    rows = [json.loads(x) for x in pairs_file.read_text().splitlines() if x.strip()][:2]
    ref = (pairs_file.parent / rows[0]["references"][0]).resolve()
    for i, row in enumerate(rows):
        copy = tmp_path / f"ref_copy_{i}{ref.suffix}"
        shutil.copy(ref, copy)
        row["references"] = [str(copy)]
        row["candidates"] = [str((pairs_file.parent / c).resolve()) for c in row["candidates"]]
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    make_model("layer_only").save_pretrained(tmp_path / "ckpt")
    assert main(eval_argv(data, tmp_path / "ckpt", tmp_path / "e", "--controls", "--n-boot", "10")) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("mie controls:"))
    assert "swapped references – (nothing to swap)" in line and "blank references " in line, line
    assert (
        main(eval_argv(data, tmp_path / "ckpt", tmp_path / "j", "--controls", "--n-boot", "10", "--json"))
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    # --json: no number for a control that scored the pairs as they are (before: the pairs' own accuracy)
    assert res["controls"]["swapped_references"] is None and res["controls_nothing_to_swap"] == [
        "swapped_references"
    ], res
    assert 0.0 <= res["controls"]["blank_references"] <= 1.0, res
    report = json.loads((tmp_path / "j" / "report.json").read_text())
    assert report["controls"]["swapped_references"]["changed"] == 0


@pytest.fixture()
def records_8(pairs_file):
    from genmetrics.data.jsonl import load_mib_pairs

    return load_mib_pairs(pairs_file)
