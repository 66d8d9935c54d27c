"""Memory of a whole leaderboard run (plan, hashing, scoring, writing, merge, summary) per result row: what a
run keeps per row is a few compact numbers, so a 300,000-image leaderboard does not hold its rows."""

from __future__ import annotations

import gc
import tracemalloc

from genmetrics.leaderboard import run_leaderboard
from genmetrics.testing import toy_leaderboard


def _run_peak(root, n: int) -> tuple[int, int, int]:
    """tracemalloc peak (bytes) of a psnr + ssim leaderboard of 2 generators x ``n`` images, its rows and its
    files (the references and both generators')."""
    cfg = toy_leaderboard(root, n=n, size=16)
    cfg["metrics"].append({"name": "ssim"})
    cfg["run"]["n_boot"] = 10
    gc.collect()
    tracemalloc.start()
    try:
        run_leaderboard(cfg, root / "out", base_dir=root, plots=False, workers=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, 2 * 2 * n, 3 * n


def test_a_run_grows_by_a_bounded_amount_per_row(tmp_path):
    """Bytes per row, from what a run must keep. Per file (3 files for 4 rows here): its ``Path`` in the plan
    (the object, its string and its parts list: about 350 bytes), its hash cache entry (40 packed bytes in a
    bytes object and a dict entry: about 150) and its number in the input pipeline's plan (a dict entry and an
    int: about 70). Per row: half a ``Sample`` (4 slots: 72, shared by the two metrics), the score, state, merge source and offset
    (9 + 10), one flag in each of the finished and written key sets (2), half an id-index entry (shared by the
    two metrics: (3 x 24 + 28) / 2), the chunk plan's pointers to its sample and files (4 x 8) and what the
    intervals need (float64 copies of a column and its differences, a few of them, and scipy's n_boot
    resamples: 8 x (n_boot + 6)). A tuple per written key and a list of 4 ints and a string per hashed file
    took about 1,100 bytes per row."""
    n_boot = 10
    per_file = 350 + 150 + 70
    per_row = 72 // 2 + 9 + 10 + 2 + (3 * 24 + 28) // 2 + 4 * 8 + 8 * (n_boot + 6) + per_file * 3 // 4
    _run_peak(tmp_path / "warm", 3)  # imports done on first use are not the run's memory
    (p1, r1, _), (p2, r2, _) = (_run_peak(tmp_path / str(n), n) for n in (150, 600))
    assert p2 - p1 <= per_row * (r2 - r1), (p1, p2, (p2 - p1) / (r2 - r1), per_row)
