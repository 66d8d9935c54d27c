"""Plots for RA-CLIPScore comparisons (matplotlib, Agg canvas; no pyplot global state).

* :func:`sad_bar` / :func:`pad_bar` — horizontal bar charts of the largest divergences (x10^-3 nats);
* :func:`rsad_heatmaps` — signed R-SaD maps on the patch grid (red = more in real, blue = more in
  generated, symmetric colour scale per attribute);
* :func:`rsad_overlay` — the same maps upsampled over a representative real image;
* :func:`attribute_maps` — per-image refined patch scores (Eq. 8) over the image, with the image's score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from genmetrics.data.output.atomic import atomic_output


def _figure(w: float, h: float, layout: Literal["constrained"] | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # "constrained": matplotlib reserves room for every title, tick label and colour bar, so a colour bar's
    # labels never run into the next panel
    fig = Figure(figsize=(w, h), dpi=110, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path) -> Path:
    p = Path(path)
    with atomic_output(p) as tmp:  # the write rule (genmetrics/data/output/)
        fig.savefig(tmp, bbox_inches="tight")
    return p


def _bar(
    labels: Sequence[str], values: np.ndarray, path: str | Path, *, title: str, xlabel: str, color: str
) -> Path:
    n = len(labels)
    fig = _figure(7.0, max(2.0, 0.32 * n + 1.0))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(n)[::-1]
    ax.barh(y, values, color=color)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    vmax = float(values.max()) if n else 1.0
    for yi, v in zip(y, values):
        ax.text(v + 0.01 * max(vmax, 1e-12), yi, f"{v:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, vmax * 1.15 if vmax > 0 else 1)
    return _save(fig, path)


def sad_bar(attributes: Sequence[str], sad: Any, path: str | Path, *, top: int = 20) -> Path:
    """Bar chart of the ``top`` largest SaD values (x1000).

    >>> import tempfile
    >>> from PIL import Image
    >>> with tempfile.TemporaryDirectory() as d:
    ...     png = sad_bar(["smiling", "wearing hat"], [0.004, 0.001], Path(d) / "sad.png")
    ...     png.name, Image.open(png).format
    ('sad.png', 'PNG')
    """
    v = torch.as_tensor(sad, dtype=torch.float64)
    order = torch.argsort(v, descending=True)[:top].tolist()
    return _bar(
        [attributes[i] for i in order],
        v[order].numpy() * 1000,
        path,
        title=f"SaD per attribute (top {len(order)}, mean {1000 * float(v.mean()):.2f})",
        xlabel="SaD (x10^-3 nats)",
        color="#d95f02",
    )


def pad_bar(pairs: Sequence[tuple[str, str]], pad: Any, path: str | Path, *, top: int = 20) -> Path:
    """Bar chart of the ``top`` largest PaD values (x1000).

    >>> import tempfile
    >>> from PIL import Image
    >>> with tempfile.TemporaryDirectory() as d:
    ...     png = pad_bar([("smiling", "wearing hat")], [0.003], Path(d) / "plots" / "pad.png")  # folder made
    ...     Image.open(png).format
    'PNG'
    """
    v = torch.as_tensor(pad, dtype=torch.float64)
    order = torch.argsort(v, descending=True)[:top].tolist()
    return _bar(
        [f"{pairs[i][0]} & {pairs[i][1]}" for i in order],
        v[order].numpy() * 1000,
        path,
        title=f"PaD per attribute pair (top {len(order)}, mean {1000 * float(v.mean()):.2f})",
        xlabel="PaD (x10^-3 nats)",
        color="#7570b3",
    )


def _top(rank: torch.Tensor, top: int) -> list[int]:
    return torch.argsort(rank, descending=True)[:top].tolist()


def _cols(n: int) -> int:
    return min(4, max(1, n))


def rsad_heatmaps(
    rsad_map: Any, grid: tuple[int, int], attributes: Sequence[str], path: str | Path, *, top: int = 8
) -> Path:
    """Signed R-SaD maps of the ``top`` attributes by ``mean_j |R-SaD_j|`` on the patch grid.

    >>> import tempfile
    >>> from PIL import Image
    >>> rsad_map = torch.linspace(-1, 1, 16 * 2).reshape(16, 2)  # [P = 4 x 4 patches, C = 2 attributes]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.open(rsad_heatmaps(rsad_map, (4, 4), ["smiling", "wearing hat"], Path(d) / "rsad.png")).format
    'PNG'
    """
    return _save(_rsad_figure(rsad_map, grid, attributes, top), path)


def _rsad_figure(rsad_map: Any, grid: tuple[int, int], attributes: Sequence[str], top: int) -> Any:
    m = torch.as_tensor(rsad_map, dtype=torch.float64)
    idx = _top(m.abs().mean(0), top)
    cols = _cols(len(idx))
    rows = math.ceil(len(idx) / cols)
    fig = _figure(3.4 * cols, 3.0 * rows + 0.4, layout="constrained")
    for k, i in enumerate(idx):
        ax = fig.add_subplot(rows, cols, k + 1)
        g = m[:, i].reshape(grid).numpy()
        lim = max(float(np.abs(g).max()), 1e-12)
        im = ax.imshow(g, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        ax.set_title(f"{attributes[i]}\nmean|R-SaD| {1000 * float(m[:, i].abs().mean()):.2f}e-3", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        cb = fig.colorbar(im, ax=ax, shrink=0.85)
        cb.ax.tick_params(labelsize=7)
        cb.formatter.set_powerlimits((-2, 3))  # 1e-3-sized values as 0.5 with "1e-3" on top, not 0.0005
        cb.ax.yaxis.get_offset_text().set_fontsize(7)
    fig.suptitle(
        "R-SaD = mean real - mean generated (red: more in real, blue: more in generated)", fontsize=10
    )
    return fig


def _upsample(g: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(g)).float()[None, None]
    return torch.nn.functional.interpolate(t, size=hw, mode="bilinear", align_corners=False)[0, 0].numpy()


def rsad_overlay(
    rsad_map: Any,
    grid: tuple[int, int],
    attributes: Sequence[str],
    backdrops: Sequence[Any],
    path: str | Path,
    *,
    top: int = 8,
    alpha: float = 0.55,
) -> Path:
    """Signed R-SaD maps (upsampled) over a backdrop image per attribute (``backdrops[i]``: ``[3,H,W]``
    in [0,1], e.g. the real image that scores highest on attribute ``i``).

    >>> import tempfile
    >>> from PIL import Image
    >>> rsad_map, backdrops = torch.linspace(-1, 1, 32).reshape(16, 2), [torch.rand(3, 32, 32)] * 2
    >>> with tempfile.TemporaryDirectory() as d:
    ...     png = rsad_overlay(rsad_map, (4, 4), ["smiling", "wearing hat"], backdrops, Path(d) / "overlay.png")
    ...     Image.open(png).format
    'PNG'
    """
    m = torch.as_tensor(rsad_map, dtype=torch.float64)
    idx = _top(m.abs().mean(0), top)
    cols = _cols(len(idx))
    rows = math.ceil(len(idx) / cols)
    fig = _figure(3.0 * cols, 3.0 * rows + 0.4)
    for k, i in enumerate(idx):
        ax = fig.add_subplot(rows, cols, k + 1)
        img = torch.as_tensor(backdrops[i]).permute(1, 2, 0).numpy()
        g = _upsample(m[:, i].reshape(grid).numpy(), img.shape[:2])
        lim = max(float(np.abs(g).max()), 1e-12)
        ax.imshow(img)
        ax.imshow(g, cmap="RdBu_r", vmin=-lim, vmax=lim, alpha=alpha)
        ax.set_title(attributes[i], fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("R-SaD overlay (red: more in real, blue: more in generated)", fontsize=10)
    return _save(fig, path)


def attribute_maps(
    examples: Sequence[Any],
    attributes: Sequence[str],
    grid: tuple[int, int],
    path: str | Path,
    *,
    columns: Sequence[int] | None = None,
    alpha: float = 0.5,
) -> Path:
    """Rows: example images (real and generated); columns: the image, then one overlay of the refined
    patch scores per attribute in ``columns`` (indices; default the first 4). Titles give the image's
    RA-CLIPScore for that attribute. One colour scale (0..max) per column, drawn as a colour bar under it.

    >>> import tempfile
    >>> from PIL import Image
    >>> from genmetrics.raclip.report import Example
    >>> examples = [Example(role, f"{role}.png", torch.rand(3, 32, 32), torch.rand(2), torch.rand(16, 2))
    ...             for role in ("real", "generated")]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.open(attribute_maps(examples, ["smiling", "wearing hat"], (4, 4), Path(d) / "maps.png")).format
    'PNG'
    """
    return _save(_maps_figure(examples, attributes, grid, columns, alpha), path)


def _maps_figure(
    examples: Sequence[Any], attributes: Sequence[str], grid: tuple[int, int], columns: Any, alpha: float
) -> Any:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    cols_idx = list(columns) if columns is not None else list(range(min(4, len(attributes))))
    n = len(examples)
    cols = 1 + len(cols_idx)
    fig = _figure(2.4 * cols + 0.6, 2.5 * max(n, 1) + 0.5, layout="constrained")
    axes = fig.subplots(max(n, 1), cols, squeeze=False)
    vmax = {
        i: max(float(e.patch_scores[:, i].max()) for e in examples) if examples else 1.0 for i in cols_idx
    }
    for r, e in enumerate(examples):
        img = e.image.permute(1, 2, 0).numpy()
        ax = axes[r, 0]
        ax.imshow(img)
        ax.set_title(f"{e.role}: {e.name}"[:28], fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        for c, i in enumerate(cols_idx):
            ax = axes[r, c + 1]
            g = _upsample(e.patch_scores[:, i].reshape(grid).numpy(), img.shape[:2])
            ax.imshow(img)
            ax.imshow(g, cmap="inferno", vmin=0.0, vmax=max(vmax[i], 1e-12), alpha=alpha)
            ax.set_title(f"{attributes[i]}\nRA {float(e.score[i]):.3f}"[:40], fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    # the colour scale: one per attribute column (0 .. the column's largest patch score), under its column
    for c, i in enumerate(cols_idx):
        sm = ScalarMappable(Normalize(0.0, max(vmax[i], 1e-12)), cmap="inferno")
        cb = fig.colorbar(sm, ax=axes[:, c + 1], location="bottom", shrink=0.9, aspect=18)
        cb.set_label("refined patch score", fontsize=7)
        cb.ax.tick_params(labelsize=7)
    return fig
