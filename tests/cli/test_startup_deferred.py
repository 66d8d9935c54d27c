"""``genmetrics score`` starts without torchmetrics' package ``__init__``: the heavy modules it
would import (torchvision, torch._dynamo, scipy.signal, transformers) stay out, the score is the one the
library computes, and anything else asked of the ``torchmetrics`` package still works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
from PIL import Image

HEAVY = (
    "torchvision",
    "torch._dynamo",
    "scipy",
    "transformers",
    "open_clip",
    "pandas",
    "torchmetrics.functional",  # torchmetrics' full package init
    "matplotlib",
)

SCORE = """
import json, sys
from genmetrics.cli.main import main
rc = main(["score", "psnr", "-r", {ref!r}, "-c", {gen!r}])
print(json.dumps({{"rc": rc, "heavy": [m for m in {heavy!r} if m in sys.modules]}}), file=sys.stderr)
"""

FALLBACK = """
import json, logging, sys
from genmetrics.cli.main import defer_torchmetrics_init
assert defer_torchmetrics_init()
import torchmetrics
import torchmetrics.metric
light = torchmetrics.Metric is torchmetrics.metric.Metric and "torchmetrics.functional" not in sys.modules
version = torchmetrics.__version__  # anything else runs the real __init__
acc = torchmetrics.Accuracy(task="binary")
print(json.dumps({"light": light, "version": version, "full": "torchmetrics.functional" in sys.modules,
    "handlers": len(logging.getLogger("torchmetrics").handlers), "acc": type(acc).__name__,
    "again": defer_torchmetrics_init()}))
"""


def _images(tmp_path, n=3):
    rng = np.random.default_rng(0)
    for role in ("ref", "gen"):
        (tmp_path / role).mkdir()
        for i in range(n):
            Image.fromarray((rng.random((16, 16, 3)) * 255).astype("uint8")).save(
                tmp_path / role / f"{i}.png"
            )
    return tmp_path / "ref", tmp_path / "gen"


def test_score_psnr_imports_none_of_the_heavy_modules(tmp_path):
    import torch

    from genmetrics.baselines.pixel import PSNR

    ref, gen = _images(tmp_path)
    code = SCORE.format(ref=str(ref), gen=str(gen), heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"rc": 0, "heavy": []}, out.stderr[-2000:]

    def read(folder):  # an explicit second reading: numpy arrays of the PNGs, in [0,1]
        arrays = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(folder.iterdir())]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255

    expect = float(PSNR().score(read(ref), read(gen)))
    printed = float(re.search(r"psnr: ([-0-9.e]+)", out.stdout).group(1))
    assert abs(printed - expect) <= 1e-4, out.stdout  # printed to 4 decimals


PLOT = """
import json, sys
from genmetrics.cli.main import defer_torchmetrics_init
assert defer_torchmetrics_init()
import torch
import genmetrics
m = genmetrics.create_metric("psnr")
m.update(reference=torch.zeros(2, 3, 8, 8), candidates=torch.full((2, 3, 8, 8), 0.1))
before = "matplotlib.pyplot" in sys.modules
fig, ax = m.plot()  # genmetrics' Metric.plot -> torchmetrics' plot_single_or_multi_val
import torchmetrics.utilities.plot as p
print(json.dumps({"before": before, "after": "matplotlib.pyplot" in sys.modules,
    "fig": type(fig).__name__, "ax": type(ax).__name__, "cmap_type": p._CMAP_TYPE is not object}))
"""


def test_plotting_still_works_after_the_deferred_plot_module():
    """matplotlib stays out of a score process until something plots; then the real plot module runs."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", PLOT], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"before": False, "after": True, "fig": "Figure", "ax": "Axes", "cmap_type": True}


def test_the_deferred_package_loads_fully_on_any_other_name():
    out = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    import importlib.metadata

    assert got == {
        "light": True,
        "version": importlib.metadata.version("torchmetrics"),
        "full": True,
        "handlers": 1,  # __init__ adds a handler; the shell had added the same one: not twice
        "acc": "BinaryAccuracy",
        "again": False,  # torchmetrics is imported now: nothing to defer
    }
