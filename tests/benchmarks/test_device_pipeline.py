"""benchmarks/device_pipeline.py --dry-run executes end to end on the CPU and prints every kind of line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_dry_run_prints_every_measurement():
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "device_pipeline.py"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    kinds = {(r["bench"], r["format"]) for r in rows}
    assert kinds == {
        (b, f)
        for b in ("decode_per_core", "compute_only", "pipeline", "workers_needed")
        for f in ("png", "jpg")
    }
    for r in rows:
        if r["bench"] == "pipeline":
            assert r["images_per_s"] > 0 and 0.0 <= r["gpu_wait_fraction"] <= 1.0
            assert r["gpu_busy_s"] <= r["wall_s"] * 1.05  # the compute happens inside the wall time
        if r["bench"] == "workers_needed":
            assert r["workers"] >= 1
    assert sorted(r["workers"] for r in rows if r["bench"] == "pipeline" and r["format"] == "png") == [0, 1]
