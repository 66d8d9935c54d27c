"""bf16 against fp32 per model-based metric on the tiny test configurations (the ``precision`` option).

    OMP_NUM_THREADS=1 python benchmarks/bf16_error.py

One JSON line per metric: the max absolute and relative difference of ``compute()`` between
``precision="bf16"`` and ``"fp32"`` over the metric's fixed test batches (tests/recipes, tiny random
backbones, fixed seeds), the bound tests/test_precision.py derives for it (``2 * S * u * sqrt(D)``), the
CPU seconds of each pass and their ratio, and the CPU model with its bf16 flags. Set-level metrics (sad, pad,
rsad) also give the difference of their per-image rows, the part bf16 changes (their divergences of tiny
sets amplify it). Real-size figures: ``benchmarks/real_size.py --precision``.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def main() -> None:
    import torch

    import genmetrics as gm
    from benchmarks.real_size import cpu_model
    from genmetrics.data.device import BF16_CPU_FLAGS, bf16_units, cpu_flags
    from genmetrics.testing import random_images
    from tests.recipes import metric_recipe
    from tests.test_precision import MODEL_METRICS, SET_METRICS, U_BF16, _depth, _flat, bf16_bound

    warnings.simplefilter("ignore")  # the 'no bf16 units' warning: reported as bf16_units
    flags = sorted((cpu_flags() or frozenset()) & set(BF16_CPU_FLAGS))
    for name in MODEL_METRICS:
        recipe = metric_recipe(name)
        values, cpu, built = {}, {}, {}
        for p in ("fp32", "bf16"):
            m = gm.create_metric(name, **recipe["kwargs"], precision=p)
            t = time.process_time()
            for u in recipe["updates"]:
                m.update(**u)
            values[p] = _flat(m.compute())
            cpu[p] = time.process_time() - t
            built[p] = m
        diff = (values["fp32"] - values["bf16"]).abs()
        rec = {
            "benchmark": "bf16_error",
            "metric": name,
            "values": int(diff.numel()),
            "max_abs_diff": float(diff.max()),
            "max_rel_diff": float((diff / values["fp32"].abs().clamp_min(1e-12)).max()),
            "max_abs_fp32": float(values["fp32"].abs().max()),
            # a set's divergence has no such bound (tiny sets amplify row changes): see rows_bound
            "bound": None if name in SET_METRICS else bf16_bound(name, built["fp32"]),
            "depth_D": _depth(built["fp32"]),
            "u_bf16": U_BF16,
            "fp32_cpu_s": round(cpu["fp32"], 3),
            "bf16_cpu_s": round(cpu["bf16"], 3),
            "bf16_over_fp32_cpu": round(cpu["bf16"] / max(cpu["fp32"], 1e-9), 2),
        }
        if name in SET_METRICS:
            images = list(random_images(4, 32, seed=5))
            rows = {p: built[p]._score_rows(images, "candidates")["score"] for p in built}
            rec["rows_max_abs_diff"] = float((rows["fp32"] - rows["bf16"]).abs().max())
            rec["rows_bound"] = bf16_bound("raclip", built["fp32"])
        rec.update(
            cpu=cpu_model(),
            cpu_bf16_flags=flags,
            bf16_units=bf16_units("cpu")[1],
            threads=torch.get_num_threads(),
            torch=torch.__version__,
        )
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
