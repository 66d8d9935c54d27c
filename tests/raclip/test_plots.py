"""genmetrics.raclip.plots: each figure shows the data it was given (bars sorted and scaled, maps on the
patch grid with a symmetric or a per-column colour scale), labelled, and colour bars stay out of the next
panel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from genmetrics.raclip import plots as raclip_plots
from genmetrics.raclip.report import Example


@pytest.fixture
def saved(monkeypatch):
    """The figures the plot functions save, with the path each was written to (the file is still written)."""
    figs = []
    real = raclip_plots._save

    def keep(fig, path):
        figs.append(fig)
        return real(fig, path)

    monkeypatch.setattr(raclip_plots, "_save", keep)
    return figs


@pytest.mark.parametrize("kind", ["SaD", "PaD"])
def test_bar_charts_show_the_top_values_largest_first_in_milli_nats(saved, tmp_path, kind):
    rng = np.random.default_rng(3)
    values = rng.uniform(0, 0.01, 9)
    names = [f"attr {i}" for i in range(9)]
    if kind == "SaD":
        png = raclip_plots.sad_bar(names, values, tmp_path / "b.png", top=5)
        labels = names
    else:
        pairs = [(n, f"other {i}") for i, n in enumerate(names)]
        png = raclip_plots.pad_bar(pairs, values, tmp_path / "b.png", top=5)
        labels = [f"{a} & {b}" for a, b in pairs]
    assert Image.open(png).format == "PNG"
    (ax,) = saved[0].axes
    order = np.argsort(-values)[:5]
    # barh draws bottom-up: the first (largest) bar is the top one
    widths = [p.get_width() for p in ax.patches]
    shown = [t.get_text() for t in ax.get_yticklabels()]
    ys = ax.get_yticks()
    top_down = [shown[i] for i in np.argsort(-ys)]
    assert widths == pytest.approx(values[order] * 1000, rel=1e-12)
    assert top_down == [labels[i] for i in order]
    assert ax.get_xlabel() == f"{kind} (x10^-3 nats)"
    assert ax.get_title().startswith(f"{kind} per attribute") and "top 5" in ax.get_title()
    assert f"mean {1000 * values.mean():.2f}" in ax.get_title()


def test_rsad_heatmaps_draw_each_top_attribute_on_the_grid_with_a_symmetric_scale(saved, tmp_path):
    torch.manual_seed(1)
    m = torch.randn(12, 5, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1, 3.0, 0.5], dtype=torch.float64)
    names = list("abcde")
    raclip_plots.rsad_heatmaps(m, (3, 4), names, tmp_path / "r.png", top=3)
    images = [ax for ax in saved[0].axes if ax.images]
    order = torch.argsort(m.abs().mean(0), descending=True)[:3].tolist()
    assert [ax.get_title().split("\n")[0] for ax in images] == [names[i] for i in order]
    for ax, i in zip(images, order):
        im = ax.images[0]
        assert np.array_equal(np.asarray(im.get_array()), m[:, i].reshape(3, 4).numpy())
        lo, hi = im.get_clim()
        assert lo == -hi == -float(m[:, i].abs().max())  # 0 is the middle colour


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_rsad_colour_bar_labels_stay_out_of_the_next_panel():
    torch.manual_seed(0)
    m = torch.randn(49, 6) * 3e-4 + torch.linspace(-1e-3, 1e-3, 6)
    fig = raclip_plots._rsad_figure(m, (7, 7), [f"attribute {i}" for i in range(6)], 8)
    r = fig.canvas.get_renderer()
    fig.canvas.draw()
    images = [ax for ax in fig.axes if ax.images]
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(images) == len(bars) == 6
    for cb in bars:
        box = cb.get_tightbbox(r)  # the bar with its tick labels and offset text
        assert not any(_overlaps(box, ax.get_window_extent(r)) for ax in images)


def test_attribute_maps_have_a_colour_scale_per_column():
    ex = [
        Example(r, f"{r}.png", torch.rand(3, 32, 32), torch.rand(3), torch.rand(16, 3) * s)
        for r, s in (("real", 1.0), ("generated", 2.0))
    ]
    fig = raclip_plots._maps_figure(ex, ["a", "b", "c"], (4, 4), [0, 2], 0.5)
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 2
    # each scale runs from 0 to the largest patch score of its column over all examples
    for cb, i in zip(bars, [0, 2]):
        top = max(float(e.patch_scores[:, i].max()) for e in ex)
        assert cb.get_xlim() == pytest.approx((0.0, top))
