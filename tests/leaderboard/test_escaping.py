"""User-controlled text (generator names, metric labels, sample ids, titles) lands in every report format as
text: Markdown renders it without a live link, image or tag; CSV cells never start a formula; HTML shows it
escaped; matplotlib draws ``$`` literally (no mathtext); file names stay short, stable and distinct. Each
format is checked with hostile names, and a whole leaderboard (plots and galleries included) runs with them."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from genmetrics.data.text.escape import MAX_STEM, csv_cell, file_stem, html_text, md_text, mpl_text

markdown_it = pytest.importorskip("markdown_it")

LONG = "g" * 240
HOSTILE = [
    "![t](http://host/track.png)",
    "[c](javascript:alert(1))",
    "<img src=x onerror=alert(1)>",
    "<https://host/auto>",
    r"$\frac{$",
    "=cmd|' /C calc'!A0",
    "**bold** _em_ `code` ~~s~~ a|b",
    "&lt;entity&#60;",
    "# heading",
    "- item",
    LONG,
]


def _render(md: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").render(md)


class _Page(HTMLParser):
    """Tags and text of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


# ------------------------------------------------------------------------------------------ each format
@pytest.mark.parametrize("name", HOSTILE)
def test_markdown_renders_the_name_as_the_same_text(name):
    html = _render(f"| generator |\n|---|\n| {md_text(name)} |\n\nsee {md_text(name)}\n")
    page = _parse(html)
    assert {t for t, _ in page.tags} <= {"table", "thead", "tbody", "tr", "th", "td", "p"}, html
    cell = re.search(r"<td>(.*?)</td>", html, re.S)[1]
    assert _parse(cell).text == [name] or "".join(_parse(cell).text) == name, html


@pytest.mark.parametrize("name", HOSTILE)
def test_csv_cells_never_start_a_formula_and_read_back(name):
    buf = io.StringIO()
    csv.writer(buf).writerow([csv_cell(name), 1.5])
    ((cell, num),) = csv.reader(io.StringIO(buf.getvalue()))
    assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r") and num == "1.5"
    assert cell == name or cell == "'" + name


@pytest.mark.parametrize("name", HOSTILE)
def test_html_text_and_attribute_round_trip(name):
    page = _parse(f'<p title="{html_text(name)}">{html_text(name)}</p>')
    assert page.tags == [("p", {"title": name})] and "".join(page.text) == name


@pytest.mark.parametrize("name", HOSTILE)
def test_matplotlib_draws_the_name_literally(name, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(mpl_text(name))
    ax.set_xticks([0], [mpl_text(name)])
    fig.savefig(tmp_path / "x.png")  # mathtext would raise on r"$\frac{$"
    assert ax.title._get_layout(fig.canvas.get_renderer()) and ax.title.get_text() == mpl_text(name)
    assert not ax.title._preprocess_math(ax.title.get_text())[1]  # not parsed as math


def test_file_stems_are_short_stable_distinct_and_usable(tmp_path):
    names = [*HOSTILE, LONG + "x", "g" * 239, "a/b", "a?b", "..", "con"]
    stems = [file_stem(n) for n in names]
    assert all(0 < len(s) <= MAX_STEM and re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", s) for s in stems)
    assert stems == [file_stem(n) for n in names]  # deterministic
    assert len({file_stem(n) for n in (LONG, LONG + "x", "g" * 239)}) == 3  # long names stay apart
    for s in stems:
        (tmp_path / f"{s}_per_attribute_heatmap.html").write_text("ok")


# ------------------------------------------------------------------------------------------ a whole run
NAMES = [
    "![t](http://host/track.png)",
    "[c](javascript:alert(1))",
    r"$\frac{$",
    "=cmd|' /C calc'!A0",
    "<script>alert(1)</script>",
    LONG,
]


@pytest.fixture(scope="module")
def hostile_board(tmp_path_factory):
    from genmetrics.leaderboard import run_leaderboard
    from genmetrics.testing import toy_leaderboard

    tmp = tmp_path_factory.mktemp("hostile")
    cfg = toy_leaderboard(tmp)
    folders = [g["images"] for g in cfg["generators"]]
    cfg["generators"] = [{"name": n, "images": folders[i % len(folders)]} for i, n in enumerate(NAMES)]
    cfg["run"] = {**cfg.get("run", {}), "title": "[t](http://host/x) $\\frac{$", "n_boot": 100}
    return run_leaderboard(cfg, tmp / "out", base_dir=tmp)


def test_markdown_report_has_no_live_link_or_image_from_a_name(hostile_board):
    out = hostile_board.out
    html = _render((out / "leaderboard.md").read_text())
    page = _parse(html)
    imgs = [a["src"] for t, a in page.tags if t == "img"]
    links = [a["href"] for t, a in page.tags if t == "a"]
    assert imgs and all(re.fullmatch(r"plots/[A-Za-z0-9._-]+\.png", s) for s in imgs), imgs
    assert links and all(re.fullmatch(r"gallery/[A-Za-z0-9._-]+\.html", h) for h in links), links
    assert all((out / p).is_file() for p in imgs + links)
    assert not [t for t, _ in page.tags if t in ("script", "iframe")]
    text = "".join(page.text)
    for n in NAMES:
        assert n in text


def test_csv_html_plots_and_galleries_with_hostile_names(hostile_board):
    out = hostile_board.out
    with open(out / "leaderboard.csv", newline="") as f:
        gens = [r["generator"] for r in csv.DictReader(f)]
    assert sorted(gens) == sorted("'" + n if n.startswith("=") else n for n in NAMES)
    with open(out / "paired.csv", newline="") as f:
        assert all(not r[k].startswith("=") for r in csv.DictReader(f) for k in ("a", "b"))
    page = _parse((out / "leaderboard.html").read_text())
    assert not [t for t, _ in page.tags if t == "script"]
    assert all(n in "".join(page.text) for n in NAMES)
    galleries = sorted((out / "gallery").glob("*.html"))
    assert len(galleries) == len(NAMES) and all(len(p.name) < 100 for p in galleries)
    plots = list((out / "plots").glob("*.png"))
    assert plots and all(p.stat().st_size > 1000 for p in plots)
    for p in galleries:
        g = _parse(p.read_text())
        assert [t for t, _ in g.tags if t == "script"] == ["script"]  # the page's own sort script only
    assert Path(out / "manifest.json").is_file()


def test_generator_ranking_report_and_plot_with_hostile_names(tmp_path):
    """``genmetrics rank-generators`` writes ranking.md and ranking.png from the data's generator names."""
    from genmetrics.mie.ranking import rank_generators, ranking_markdown, ranking_plot

    a, b, c = "![t](http://host/track.png)", r"$\frac{$", "[c](javascript:alert(1))"
    res = rank_generators([a, a, b], [b, c, c], [0.9, 0.8, 0.7], [0.1, 0.2, 0.3], n_boot=50)
    page = _parse(_render(ranking_markdown(res, title=c)))
    assert not [t for t, _ in page.tags if t in ("img", "a", "script")]
    assert all(n in "".join(page.text) for n in (a, b, c))
    ranking_plot(res, tmp_path / "ranking.png")  # mathtext would raise on the TeX name
    assert (tmp_path / "ranking.png").stat().st_size > 1000


def test_tpips_agreement_table_with_a_hostile_dataset_name():
    """``genmetrics evaluate-human tpips`` writes table.md with the dataset names of the user's data."""
    from genmetrics.data.jsonl import OddOneOutRecord
    from genmetrics.testing import random_images
    from genmetrics.tpips.evaluate import Dataset, MetricScorer, evaluate_human, to_markdown

    x, y = random_images(2, 32, seed=1)
    record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    name = "![t](http://host/track.png)"
    res = evaluate_human(
        [Dataset(name, "odd_one_out", [record])], [MetricScorer("psnr", metric_name="psnr")], progress=False
    )
    page = _parse(_render(to_markdown(res)))
    assert not [t for t, _ in page.tags if t in ("img", "a")] and name in "".join(page.text)


# ------------------------------------------------------------------------------------- bidi controls
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]


@pytest.mark.parametrize("ch", BIDI)
def test_bidi_controls_are_shown_as_their_escape_in_every_format(ch):
    name = f"abc{ch}gnp.exe"
    shown = f"abc\\u{ord(ch):04x}gnp.exe"  # the visible escape, written out independently
    for esc in (md_text, html_text, csv_cell, mpl_text):
        assert ch not in esc(name) and esc(name) == shown, esc
    cell = re.search(r"<td>(.*?)</td>", _render(f"| g |\n|---|\n| {md_text(name)} |\n"), re.S)[1]
    assert "".join(_parse(cell).text) == shown  # a Markdown viewer shows the escape as typed
    assert "".join(_parse(f"<p>{html_text(name)}</p>").text) == shown
    assert csv_cell(ch + "=cmd") == f"\\u{ord(ch):04x}=cmd"  # hiding a formula behind a control: inert


def test_reports_show_a_bidi_override_in_a_generator_name_escaped(tmp_path):
    from genmetrics.leaderboard import run_leaderboard
    from genmetrics.testing import toy_leaderboard

    cfg = toy_leaderboard(tmp_path)
    name = "abc\u202egnp.exe"
    cfg["generators"][0]["name"] = name
    cfg["run"] = {**cfg.get("run", {}), "title": "t\u2067x", "n_boot": 10}
    res = run_leaderboard(cfg, tmp_path / "out", base_dir=tmp_path)
    for f in ("leaderboard.md", "leaderboard.html", "leaderboard.csv"):
        text = (res.out / f).read_text("utf-8")
        assert not any(c in text for c in BIDI) and "abc\\u202egnp.exe" in text, f
    rows = (res.out / "results.jsonl").read_text("utf-8")
    assert name in {json.loads(r)["generator"] for r in rows.splitlines() if r.strip()}  # data keeps the name
