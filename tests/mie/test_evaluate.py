"""The evaluation harness against human labels: explicit checks on synthetic pairs."""

import json

import numpy as np
import pytest

from genmetrics import registry
from genmetrics.registry import MetricCard, register_metric


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
