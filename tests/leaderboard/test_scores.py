"""The streamed end of a run (ScoreTable, merge_in_order) against the rows-in-memory computation: the same
summary and gallery picks, and memory that grows by a bounded number of bytes per row."""

from __future__ import annotations

import gc
import math
import random
import tracemalloc

import numpy as np
import pytest

from genmetrics.data.output.merge import merge_in_order, merge_results
from genmetrics.data.output.rows import dumps_line, read_results
from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
from genmetrics.leaderboard.gallery import _top, best_and_worst
from genmetrics.leaderboard.report import _interval, _paired, summarize
from genmetrics.leaderboard.scores import KeySet, ScoreTable
from genmetrics.testing import toy_leaderboard


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _columns_from_dicts(plan, rows):
    """The per-column entries and paired comparisons computed from dicts of rows (the computation the table
    replaces): ``(column, generator) -> {id: row}``, the last row of a key winning."""
    planned = set(plan.keys())
    data = {}
    for r in rows:
        k = (str(r.get("generator")), str(r.get("metric")), str(r.get("id")))
        if k in planned:
            data.setdefault((k[1], k[0]), {})[k[2]] = r
    run, gens, out = plan.config.run, [g.name for g in plan.generators], {}
    for mp in plan.metrics:
        for col in mp.columns:
            entries = {}
            for g in gens:
                d, expected = data.get((col.name, g), {}), [s.id for s in mp.samples[g]]
                vals = [float(d[i]["score"]) for i in expected if i in d and _finite(d[i].get("score"))]
                invalid = sum(1 for i in expected if i in d and not _finite(d[i].get("score")))
                entry = {"n": len(vals), "n_expected": len(expected), "n_invalid": invalid}
                if vals:
                    est, lo, hi = _interval(vals, run)
                    std = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
                    entry.update(mean=est, low=lo, high=hi, std=std)
                entries[g] = entry
            pairs = {}
            for a in gens:
                for b in gens:
                    da, db = data.get((col.name, a), {}), data.get((col.name, b), {})
                    shared = sorted(
                        k
                        for k in da
                        if k in db and _finite(da[k].get("score")) and _finite(db[k].get("score"))
                    )
                    if a != b and shared:
                        pairs[(a, b)] = _paired(
                            [da[k]["score"] for k in shared], [db[k]["score"] for k in shared], run
                        )
            out[col.name] = (entries, pairs)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("board")
    cfg = toy_leaderboard(d, n=12, size=16)
    cfg["metrics"] = [{"name": "psnr"}, {"name": "ssim"}]
    cfg["run"]["n_boot"] = 50
    res = run_leaderboard(cfg, d / "out", base_dir=d, plots=False)
    return cfg, d, res


def test_summary_from_the_table_equals_the_computation_over_dicts(run):
    cfg, d, res = run
    plan = build_plan(load_config(cfg, base_dir=d))
    rows = read_results(res.results)
    rng = random.Random(0)
    rng.shuffle(rows)
    rows = rows[3:]  # missing rows
    rows[0] = {**rows[0], "score": None}  # a row without a finite score
    rows[1] = {**rows[1], "score": float("nan")}
    rows.append({**rows[2], "score": 0.0})  # a key given twice: the last row counts
    rows.append({"generator": "noisy", "metric": "psnr", "id": "not-planned", "score": 1e9})
    for table_rows in (rows, ScoreTable.from_rows(plan, rows)):
        summary = summarize(plan, table_rows)
        for name, (entries, pairs) in _columns_from_dicts(plan, rows).items():
            col = summary["columns"][name]
            for g, want in entries.items():
                assert {k: col["generators"][g][k] for k in want} == want
            assert col["paired"], name
            for p in col["paired"]:
                assert {k: p[k] for k in ("diff", "low", "high", "p_value", "n", "method")} == pairs[
                    (p["a"], p["b"])
                ]


def test_the_run_writes_what_the_rows_in_memory_give(run):
    """results.jsonl equals merge_results over the file shuffled with repeats; summary.json equals
    summarize over the rows read back."""
    cfg, d, res = run
    plan = build_plan(load_config(cfg, base_dir=d))
    lines = res.results.read_text().splitlines()
    rng = random.Random(1)
    shuffled = lines + rng.sample(lines, 5)
    rng.shuffle(shuffled)
    (d / "shuffled.jsonl").write_text("\n".join(shuffled) + "\n")
    order = {k: i for i, k in enumerate(plan.keys())}
    merge_results(
        [d / "shuffled.jsonl"],
        d / "old.jsonl",
        sort_key=lambda r: order[(r["generator"], r["metric"], r["id"])],
    )
    assert res.results.read_bytes() == (d / "old.jsonl").read_bytes()
    assert summarize(plan, read_results(res.results)) == res.summary


def test_gallery_picks_from_arrays_equal_best_and_worst(run):
    cfg, d, _ = run
    plan = build_plan(load_config(cfg, base_dir=d))
    rng = random.Random(2)
    for hib in (True, False, None):
        for k in (1, 3, 20):
            rows = [
                {
                    "generator": "noisy",
                    "metric": "psnr",
                    "id": s.id,
                    "score": rng.choice([0.0, -0.0, 1.5, rng.random()]),
                }
                for s in plan.metrics[0].samples["noisy"]
                if rng.random() < 0.8
            ]
            table = ScoreTable.from_rows(plan, rows)
            best, worst, n = _top(table, "psnr", "noisy", hib, k)
            assert (best, worst) == best_and_worst({r["id"]: r["score"] for r in rows}, hib, k)
            assert n == len(rows)


def _merge_and_summary_peak(tmp_path, n, n_boot):
    """tracemalloc peak (bytes) of merging a shuffled results file of 2 generators x n rows and summarising it,
    and the number of rows."""
    root = tmp_path / str(n)
    cfg = toy_leaderboard(root, n=n, size=8)
    cfg["run"]["n_boot"] = n_boot
    plan = build_plan(load_config(cfg, base_dir=root))
    rng = random.Random(n)
    rows = [
        {"generator": g, "metric": c, "id": i, "score": rng.random(), "input": "0123456789abcdef"}
        for g, c, i in plan.keys()
    ]
    rng.shuffle(rows)
    src = root / "results.jsonl"
    src.write_text("".join(dumps_line(r) + "\n" for r in rows))
    del rows
    gc.collect()
    tracemalloc.start()
    try:
        table = ScoreTable(plan)
        merge_in_order([src], root / "merged.jsonl", table.position, table.size, visit=table.put)
        summarize(plan, table)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, table.size


def test_merge_and_summary_memory_grows_by_a_bounded_amount_per_row(tmp_path):
    """Bytes per row, from what is kept per row: the table's score and state (9), the merge's source and
    offset (10), the id index (a dict entry: at most 3 x 24 bytes with its spare room, plus a 28-byte int)
    and what the interval and the paired bootstrap need per sample: float64 copies of the scores and their
    differences (8 each, a few of them) and n_boot resampled values (8 x n_boot, scipy's resamples), plus the
    sorted ids of a pair (2 x 8-byte pointers and a set entry, ~50). Rows held as dicts take over 1 kB each."""
    n_boot = 10
    per_row = 9 + 10 + (3 * 24 + 28) + 8 * 6 + 8 * n_boot + 50 + 8 * 3  # ~330 bytes
    (p1, r1), (p2, r2) = (_merge_and_summary_peak(tmp_path, n, n_boot) for n in (500, 4000))
    assert p2 - p1 <= per_row * (r2 - r1), (p1, p2, (p2 - p1) / (r2 - r1))


def test_key_set_behaves_as_a_set_of_its_keys(tmp_path):
    """KeySet (a flag per planned key, a set for the others) against a plain set fed the same keys: the same
    membership for every planned key and some outside the plan, the same length, repeats counted once."""
    plan = build_plan(load_config(toy_leaderboard(tmp_path, n=6), base_dir=tmp_path))
    planned = plan.keys()
    outside = [("copy", "psnr", "nope"), ("other", "psnr", "000"), ("copy", "ssim", "000")]
    rng = random.Random(1)
    keys = [rng.choice(planned + outside) for _ in range(40)]
    done, plain = KeySet(ScoreTable(plan), keys[:20]), set(keys[:20])
    for k in keys[20:]:
        done.add(k)
        plain.add(k)
    assert len(done) == len(plain)
    assert all((k in done) == (k in plain) for k in planned + outside)
    assert ("copy", "psnr") not in done and "x" not in done
