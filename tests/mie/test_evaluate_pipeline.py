"""evaluate-human mie reads image files through the shared input pipeline: each file opened at most twice and
decoded once for MIE, its controls and every metric, results identical for 0 and 2 workers, a bad file named."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from genmetrics.cli.main import main
from genmetrics.data.jsonl import load_mib_pairs
from genmetrics.errors import InputError
from genmetrics.mie.evaluate import evaluate_human
from genmetrics.testing.pil_counts import count_pil


def _files(recs) -> list:
    return sorted({str(p) for r in recs for p in (*r.references, *r.candidates)})


def test_each_file_decoded_once_and_workers_agree(pairs_file, make_model):
    recs = load_mib_pairs(pairs_file)[:6]
    model = make_model()
    runs = {}
    for workers in (0, 2):
        with count_pil() as c:
            runs[workers] = evaluate_human(
                recs,
                model=model,
                metrics=["psnr", "ssim"],
                controls=True,
                n_boot=20,
                batch_pairs=2,
                workers=workers,
            )
        o_lo, o_hi, d_lo, d_hi = c.per_file(_files(recs))
        assert (d_lo, d_hi) == (1, 1), f"workers={workers}: mie, 2 controls, 2 metrics, one decode per file"
        assert o_hi <= 2
    (r0, s0), (r2, s2) = runs[0], runs[2]
    assert (
        list(s0) == list(s2) == ["mie", "mie (swapped references)", "mie (blank references)", "psnr", "ssim"]
    )
    for name in s0:
        for k in s0[name]:
            assert np.array_equal(s0[name][k], s2[name][k]), (name, k)
    assert json.dumps(r0, sort_keys=True) == json.dumps(r2, sort_keys=True)


def test_cli_workers_agree_and_decode_once(pairs_file, tmp_path):
    recs = load_mib_pairs(pairs_file)
    reports = []
    for workers in (0, 2):
        out = tmp_path / f"w{workers}"
        with count_pil() as c:
            args = ["evaluate-human", "mie", "--data", str(pairs_file), "--metrics", "psnr,ssim"]
            assert main([*args, "--n-boot", "20", "--out", str(out), "--workers", str(workers)]) == 0
        assert c.per_file(_files(recs))[1:] in [(1, 1, 1), (2, 1, 1)]
        reports.append(json.loads((out / "report.json").read_text()))
    assert reports[0]["metrics"] == reports[1]["metrics"]


def test_bad_file_named(pairs_file, make_model, tmp_path):
    recs = load_mib_pairs(pairs_file)[:4]
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    recs[2] = replace(recs[2], candidates=(bad, recs[2].candidates[1]))
    for workers in (0, 2):
        # a metric that cannot read a file is reported as failed, naming it; the others still score
        report, _ = evaluate_human(recs, metrics=["psnr"], n_boot=20, workers=workers)
        assert str(bad) in report["metrics"]["psnr"]["error"]
        with pytest.raises(InputError, match="bad.png"):  # MIE itself stops, naming the file
            evaluate_human(recs, model=make_model(), n_boot=20, workers=workers)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_score_pairs_mie_decodes_once_and_matches_the_model_on_files(pairs_file, make_model):
    from genmetrics.mie.evaluate import score_pairs_mie

    recs = load_mib_pairs(pairs_file)
    model = make_model()
    runs = {}
    for workers in (0, 2):
        with count_pil() as c:
            runs[workers] = score_pairs_mie(model, recs, batch_pairs=3, workers=workers)
        assert c.per_file(_files(recs))[1:] in [(1, 1, 1), (2, 1, 1)]
    # the model given the files themselves, batch by batch (it decodes them in this process)
    want = [
        model.score_pairs(
            [[str(p) for p in r.references] for r in recs[s : s + 3]],
            [r.prompt for r in recs[s : s + 3]],
            [str(r.candidates[0]) for r in recs[s : s + 3]],
            [str(r.candidates[1]) for r in recs[s : s + 3]],
        )
        for s in range(0, len(recs), 3)
    ]
    for k in ("a", "b"):
        direct = np.concatenate([(w[0] if k == "a" else w[1]).score.double().numpy() for w in want])
        assert np.array_equal(runs[0][k], runs[2][k]) and np.array_equal(runs[0][k], direct)


def test_rank_generators_cli_workers(pairs_file, make_model, provider, tmp_path):
    recs = load_mib_pairs(pairs_file)
    heads = tmp_path / "heads"
    make_model().save_pretrained(heads)
    results = []
    for workers in (0, 2):
        args = ["rank-generators", "--data", str(pairs_file), "--heads", str(heads), "--n-boot", "20"]
        with count_pil() as c:
            assert main([*args, "--out", str(tmp_path / f"w{workers}"), "--workers", str(workers)]) == 0
        assert c.per_file(_files(recs))[1:] in [(1, 1, 1), (2, 1, 1)]
        results.append(json.loads((tmp_path / f"w{workers}" / "ranking.json").read_text()))
    assert results[0] == results[1]
