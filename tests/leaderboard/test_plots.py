"""genmetrics.leaderboard.plots: the points plot is scaled to the intervals and names the unit; every axis
is labelled and shows the data it was given."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from genmetrics.leaderboard import plots
from genmetrics.leaderboard.plots import _points, unit


def _axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def test_points_axis_shows_the_differences_not_zero_and_names_the_unit():
    entry = {
        "metric": "psnr",
        "higher_is_better": True,
        "generators": {
            "a": {"mean": 42.0, "low": 41.8, "high": 42.2},
            "b": {"mean": 25.6, "low": 24.4, "high": 26.5},
            "c": {"mean": None},
        },
    }
    ax = _axes()
    assert _points(ax, "psnr", entry, ["a", "b", "c"], 0.95)
    lo, hi = ax.get_ylim()
    assert 0 < lo <= 24.4 and 42.2 <= hi  # every interval visible, the axis not stretched to 0
    assert (hi - lo) < 2 * (42.2 - 24.4)
    assert "(dB)" in ax.get_ylabel() and "95% CI" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert ax.get_title() == "psnr ↑" and ax.get_xlabel() == "generator"
    ax = _axes()
    _points(ax, "sad", {**entry, "metric": "sad", "level": "set"}, ["a", "b"], 0.95)
    assert ax.get_ylabel() == "value vs real set, 95% CI (nats)"
    # whiskers end at the interval, even where the estimate lies outside it
    entry["generators"]["a"] = {"mean": 40.0, "low": 41.0, "high": 43.0}
    ax = _axes()
    _points(ax, "psnr", entry, ["a", "b"], 0.95)
    segs = ax.collections[0].get_segments()
    assert [tuple(s[:, 1]) for s in segs] == [(41.0, 43.0), (24.4, 26.5)]


def test_units():
    assert unit("psnr") == "dB" and unit("psnr[y]") == "dB" and unit("x", {"metric": "sad"}) == "nats"
    assert unit("ssim") == "" and unit("clip_i") == ""


@pytest.fixture
def saved(monkeypatch):
    """The figures the plot functions save (the files are still written)."""
    figs = []
    real = plots._save

    def keep(fig, path, root):
        figs.append(fig)
        return real(fig, path, root)

    monkeypatch.setattr(plots, "_save", keep)
    return figs


def test_attribute_bars_show_each_generators_values_of_the_largest_attributes(saved, tmp_path):
    rng = np.random.default_rng(2)
    labels = [f"attr {i}" for i in range(plots.TOP_ATTRIBUTES + 5)]
    vec = {g: rng.normal(0, 1, len(labels)) for g in ("a", "b")}
    entry = {
        "metric": "sad",
        "generators": {g: {"value": {"per_attribute": v.tolist()}, "labels": labels} for g, v in vec.items()},
    }
    assert plots.attribute_bars("sad", entry, ["a", "b"], tmp_path / "s.png")
    (ax,) = saved[0].axes
    top = np.argsort(-np.abs(np.stack([vec["a"], vec["b"]])).max(0), kind="stable")[: plots.TOP_ATTRIBUTES]
    assert [t.get_text() for t in ax.get_xticklabels()] == [labels[i] for i in top]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx(np.concatenate([vec["a"][top], vec["b"][top]]).tolist(), rel=1e-12)
    assert ax.get_xlabel() == "attribute" and ax.get_ylabel() == "value (nats)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_per_pair_values_are_labelled_with_the_pairs(saved, tmp_path):
    entry = {"generators": {"a": {"value": {"per_pair": [0.3, 0.1, 0.2]}, "labels": ["x", "y", "z"]}}}
    assert plots.attribute_bars("pad", entry, ["a"], tmp_path / "p.png")
    (ax,) = saved[0].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x & y", "y & z", "x & z"]
    assert ax.get_xlabel() == "attribute pair"


def test_heatmaps_draw_the_strongest_maps_on_the_grid_with_one_symmetric_scale(saved, tmp_path):
    rng = np.random.default_rng(4)
    m = rng.normal(0, 1, (16, 5)) * np.array([2.0, 4.0, 0.0, 3.0, 5.0])
    m[7, 2] = 20.0  # the weakest map on average (not drawn) holds the largest value: it sets no scale
    result = {"value": {"map": m.tolist()}, "grid": [4, 4], "labels": list("abcde")}
    assert plots.heatmaps("rsad", "g", result, tmp_path / "h.png")
    images = [ax for ax in saved[0].axes if ax.images]
    top = np.argsort(-np.abs(m).mean(0), kind="stable")[: plots.TOP_MAPS]
    assert 2 not in top  # the premise: the spiked map is not among the drawn ones
    assert [ax.get_title() for ax in images] == [list("abcde")[j] for j in top]
    vmax = float(np.abs(m[:, top]).max())
    for ax, j in zip(images, top):
        assert np.array_equal(np.asarray(ax.images[0].get_array()), m[:, j].reshape(4, 4))
        assert ax.images[0].get_clim() == (-vmax, vmax)
    # a map that fits no grid is not drawn
    assert not plots.heatmaps("rsad", "g", {"value": {"map": m[:5].tolist()}}, tmp_path / "x.png")


@pytest.mark.parametrize("names", [("m/1", "m?1"), ("psnr", "PSNR")])
def test_make_plots_keeps_columns_that_sanitise_alike_in_two_files(tmp_path, names):
    """Also two labels that differ in case only: one file on a case-insensitive file system (red before)."""
    g = {"a": {"mean": 1.0, "low": 0.5, "high": 1.5}}
    col = {"higher_is_better": True, "level": "sample", "generators": g}
    summary = {"generators": ["a"], "ci": 0.95, "columns": dict.fromkeys(names, col)}
    made = plots.make_plots(tmp_path, summary)
    assert [t for t, _ in made] == list(names)
    assert len({p.casefold() for _, p in made}) == 2 and all((tmp_path / p).is_file() for _, p in made)
