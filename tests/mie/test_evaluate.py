"""The evaluation harness against human labels: explicit checks on synthetic pairs."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import torch

from genmetrics.core import registry
from genmetrics.core.registry import MetricCard, register_metric


@pytest.fixture
def dummy_metrics():
    cards = [
        MetricCard(
            name="test_brightness",
            factory="_dummy_metrics:Brightness",
            family="test",
            summary="",
            inputs={"candidates": "images"},
            higher_is_better=True,
            range=None,
        ),
        MetricCard(
            name="test_refdist",
            factory="_dummy_metrics:RefDistance",
            family="test",
            summary="",
            inputs={"reference": "images", "candidates": "images"},
            higher_is_better=True,
            range=None,
        ),
        MetricCard(
            name="test_dark",
            factory="_dummy_metrics:Brightness",
            family="test",
            summary="",
            inputs={"candidates": "images"},
            higher_is_better=False,
            range=None,
        ),
    ]
    registry._load_all()
    for c in cards:
        register_metric(c)
    yield [c.name for c in cards]
    for c in cards:
        registry._CARDS.pop(c.name, None)


def test_evaluate_scores_explicit(pairs_file):
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.evaluate import evaluate_scores

    recs = load_mib_pairs(pairs_file)
    n = len(recs)
    rng = np.random.default_rng(0)
    sa, sb = rng.normal(size=n), rng.normal(size=n)
    da, db = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    rep = evaluate_scores(
        recs, {"x": {"a": sa, "b": sb, "diag_a": da, "diag_b": db}}, seen_generators=["gen_a"], n_boot=200
    )
    prefers_a = np.array([r.preference == 0 for r in recs])
    right = ((sa > sb) == prefers_a).astype(float)
    acc = rep["metrics"]["x"]["accuracy"]
    assert acc["overall"]["value"] == pytest.approx(right.mean())
    assert acc["overall"]["low"] <= acc["overall"]["value"] <= acc["overall"]["high"]
    # every synthetic pair mixes gen_a and gen_b: none is fully seen or fully unseen
    assert rep["subsets"]["seen"] == 0 and rep["subsets"]["unseen"] == 0 and rep["subsets"]["mixed"] == n
    rep2 = evaluate_scores(recs, {"x": {"a": sa, "b": sb}}, seen_generators=["gen_a", "gen_b"], n_boot=10)
    assert rep2["metrics"]["x"]["accuracy"]["seen"]["value"] == pytest.approx(right.mean())
    by = rep["metrics"]["x"]["breakdown"]["subjects"]
    assert list(by) == ["2", "3", "4"]
    for k, blk in by.items():
        sel = np.array([r.bucket["subjects"] == int(k) for r in recs])
        assert blk["n"] == sel.sum() and blk["value"] == pytest.approx(right[sel].mean())
    assert set(rep["metrics"]["x"]["breakdown"]["relation"]) == {"non_contact", "occlusion", "physical"}
    # per-dimension F1 over both candidates of every pair
    lab = np.concatenate([[r.diagnostics[0] for r in recs], [r.diagnostics[1] for r in recs]])
    pred = np.concatenate([da, db])
    diag = rep["metrics"]["x"]["diagnostics"]["overall"]
    f1s = []
    for c, d in enumerate(("existence", "appearance", "interaction")):
        p, t = pred[:, c] >= 0, lab[:, c] > 0.5
        tp, fp, fn = (p & t).sum(), (p & ~t).sum(), (~p & t).sum()
        f1s.append(2 * tp / (2 * tp + fp + fn))
        assert diag[f"f1_{d}"] == pytest.approx(f1s[-1])
    assert diag["macro_f1"]["value"] == pytest.approx(np.mean(f1s))


def test_diagnostics_drop_split_labels_and_show_the_majority_answer():
    """Labels of exactly 0.5 are left out (the authors' analysis); a constant "passes" predictor gets the
    F1 of the always-passes answer and balanced accuracy 0.5."""
    from genmetrics.mie.evaluate import diagnostic_agreement

    labels = np.array(
        [[1.0, 0.5, 1.0], [1.0, 1.0, 0.0], [0.0, 0.5, 1.0], [2 / 3, 0.0, 1.0], [1 / 3, 1.0, 1.0]]
    )
    always = np.full((5, 3), 3.0)  # every logit says "passes"
    agg = diagnostic_agreement(always, labels)
    # existence: labels 1,1,0,1,0 -> precision 3/5, recall 1 -> F1 0.75
    assert agg["existence"]["f1"] == pytest.approx(0.75) and agg["existence"][
        "balanced_accuracy"
    ] == pytest.approx(0.5)
    assert agg["existence"]["f1_always_passes"] == pytest.approx(0.75)
    # appearance: the two 0.5 labels are dropped -> labels 1,0,1
    assert agg["appearance"]["n"] == 3 and agg["appearance"]["dropped_ties"] == 2
    assert agg["appearance"]["f1"] == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))
    # interaction: 4 of 5 pass: the constant answer has F1 0.889 and still balanced accuracy 0.5
    assert agg["interaction"]["f1"] == pytest.approx(8 / 9) and agg["interaction"]["balanced_accuracy"] == 0.5
    # a perfect predictor: balanced accuracy 1; a 0.5 label never counts whatever is predicted
    perfect = np.where(labels > 0.5, 2.0, -2.0)
    perfect[0, 1] = perfect[2, 1] = -5.0
    agg = diagnostic_agreement(perfect, labels)
    assert all(agg[d]["balanced_accuracy"] == 1.0 and agg[d]["f1"] == 1.0 for d in agg)


def test_evaluate_human_with_mie_and_registered_metrics(pairs_file, make_model, dummy_metrics, tmp_path):
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.evaluate import evaluate_human, write_report

    recs = load_mib_pairs(pairs_file)[:4]
    report, scores = evaluate_human(
        recs,
        model=make_model(),
        metrics=dummy_metrics + ["psnr_nonexistent_xyz"],
        seen_generators=["gen_a", "gen_b"],
        n_boot=50,
    )
    m = report["metrics"]
    # winners are the bright images: brightness is always right, "lower is better" brightness always wrong
    assert m["test_brightness"]["accuracy"]["overall"]["value"] == 1.0
    assert m["test_dark"]["accuracy"]["overall"]["value"] == 0.0
    # the reference metric averages over every reference of the pair
    from genmetrics.data.io.images import to_tensor

    r0 = recs[0]
    want = -np.mean(
        [
            abs(to_tensor(str(p)).mean().item() - to_tensor(str(r0.candidates[0])).mean().item())
            for p in r0.references
        ]
    )
    assert scores["test_refdist"]["a"][0] == pytest.approx(want, abs=1e-6)
    assert "error" in m["psnr_nonexistent_xyz"]
    assert "diagnostics" in m["mie"] and "macro_f1" in m["mie"]["diagnostics"]["overall"]
    files = write_report(report, scores, recs, tmp_path / "eval")
    md = open(files["markdown"]).read()
    assert "test_brightness" in md and "Accuracy by subjects" in md and "macro-F1" in md
    assert open(files["plot"], "rb").read(4) == b"\x89PNG"
    rows = [json.loads(x) for x in open(files["scores"])]
    assert len(rows) == 4 and set(rows[0]["scores"]) == {
        "mie",
        "test_brightness",
        "test_refdist",
        "test_dark",
    }
    assert json.load(open(files["json"]))["n_pairs"] == 4


# ---------------------------------------------------------------------------- controls over aliased references
# ``evaluate-human mie --controls`` when pairs' references are the same images under other paths: a
# copy or a symlink of a reference is the same reference, so swapping it in scores the pair as it is. The
# swapped control must then read '– (nothing to swap)' (report.md, the CLI line) with ``changed: 0`` in the
# JSON, and where other images exist the donor is one of them.
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
