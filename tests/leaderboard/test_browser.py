"""The HTML reports in a real browser (headless Chromium, as CI runs it through .ci/browser_check.py): the
leaderboard and its gallery pages render with no console message, embed everything, and give a sane
screenshot; a broken page fails the same check; the gallery tables sort on a click. Skipped where no
chromium is installed (CI installs it from Debian's packages; see .ci/run)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile

import pytest
from lb_helpers import REPO, toml_config

from genmetrics.leaderboard import run_leaderboard

spec = importlib.util.spec_from_file_location("browser_check", REPO / ".ci" / "browser_check.py")
bc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bc)

CHROMIUM = bc.find_chromium(None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (CI installs it)")


def test_log_parsing_units():
    log = (
        "[1:1:1201/1.2:WARNING:media/gpu/vaapi_wrapper.cc:1655] drmGetDevices2() has not found any devices\n"
        '[1:1:1201/1.3:INFO:CONSOLE:7] "boom", source: file:///a.html (7)\n'
        '[1:1:1201/1.4:INFO:CONSOLE(9)] "Uncaught TypeError: x", source: file:///a.html (9)\n'
    )
    assert bc.console_messages(log) == [
        "boom (file:///a.html (7))",
        "Uncaught TypeError: x (file:///a.html (9))",
    ]
    assert bc.external_refs('<img src="data:x"><script src="https://cdn/x.js"></script>') == [
        "https://cdn/x.js"
    ]


@pytest.mark.slow
@needs_chromium
def test_reports_pass_the_browser_check_and_a_broken_page_fails(small_set, tmp_path):
    cfg = toml_config(
        small_set, '[[metrics]]\nname = "psnr"\n', extra='[run]\nn_boot = 100\ntitle = "Browser"\n'
    )
    out = run_leaderboard(cfg, tmp_path / "out").out
    pages = [out / "leaderboard.html", *sorted((out / "gallery").glob("*.html"))]
    assert len(pages) == 4
    rc = bc.main(["--shots", str(tmp_path / "shots"), "--expect", "Browser", *map(str, pages)])
    assert rc == 0
    bad = tmp_path / "bad.html"
    bad.write_text(
        pages[1].read_text().replace("</body>", '<script>console.error("x"); f();</script></body>')
    )
    problems = bc.check_page(CHROMIUM, bad, tmp_path / "bad.png", expect=[])
    assert any("console: x" in p for p in problems) and any("Uncaught ReferenceError" in p for p in problems)


@pytest.mark.slow
@needs_chromium
def test_gallery_tables_sort_on_click(small_set, tmp_path):
    cfg = toml_config(small_set, '[[metrics]]\nname = "psnr"\n', extra="[run]\nn_boot = 100\n")
    out = run_leaderboard(cfg, tmp_path / "out").out
    page = (out / "gallery" / "good.html").read_text()
    probe = """<script>var t = document.querySelector("table.sortable"), th = t.querySelectorAll("th");
    function col(i) { return [].map.call(t.tBodies[0].rows, function (r) { return r.cells[i].getAttribute("data-v"); }); }
    th[1].click(); var a = col(1); th[1].click(); var b = col(1); var k = [].findIndex.call(th, function (h) { return h.textContent.indexOf("psnr") === 0; });
    th[k].click(); var c = col(k);
    document.body.setAttribute("data-probe", JSON.stringify([a, b, c]));</script></body>"""
    probe_page = out / "gallery" / "probe.html"
    probe_page.write_text(page.replace("</body>", probe))
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [CHROMIUM, *bc.FLAGS, f"--user-data-dir={profile}", "--dump-dom", probe_page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    import html
    import json

    a, b, c = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom)[1]))
    assert a == sorted(a) and b == sorted(a, reverse=True)
    assert [float(v) for v in c] == sorted(float(v) for v in c)  # the score column: numeric, ascending


def test_ci_skips_with_a_reason_when_apt_get_cannot_reach_debian(tmp_path):
    """The CI step prints one SKIP line (and does not fail) on a machine without chromium or apt-get."""
    text = (REPO / ".ci" / "run").read_text()
    block = text[text.index('step "HTML report') : text.index('step "ruff')]
    (tmp_path / "block.sh").write_text(block)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "id", "tail", "cat"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    run = subprocess.run(
        [
            shutil.which("bash"),
            "-c",
            f'set -euo pipefail; step() {{ echo "== $1"; }}; . "{tmp_path}/block.sh"',
        ],
        env={"PATH": str(bin_), "WORK": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "SKIP browser check: no chromium and no apt-get on this machine" in run.stdout


def _probe(page, js: str):
    """Run ``js`` (which sets ``window.probe``) at the end of ``page`` in Chromium; returns that value."""
    import html
    import json

    probe_page = page.with_name(page.stem + "-probe.html")
    script = f"<script>{js}\ndocument.body.setAttribute('data-probe', JSON.stringify(window.probe));</script>"
    probe_page.write_text(page.read_text().replace("</body>", script + "</body>"))
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                CHROMIUM,
                *bc.FLAGS,
                "--window-size=1200,2400",
                f"--user-data-dir={profile}",
                "--dump-dom",
                probe_page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    probe_page.unlink()
    return json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom)[1]))


@pytest.mark.slow
@needs_chromium
def test_report_look_in_the_browser(small_set, tmp_path):
    """Units in the headers, aligned paired tables with one marker for "excludes 0" (and a highlight only
    there), the gallery's candidate column named and its tables across the window, the Markdown report's
    p-values shown as "<" (not as an entity) once rendered."""
    cfg = toml_config(
        small_set,
        '[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "ssim"\n',
        extra='[run]\nn_boot = 100\ntitle = "Look"\n',
    )
    out = run_leaderboard(cfg, tmp_path / "out").out
    board = _probe(
        out / "leaderboard.html",
        """var heads = [].map.call(document.querySelectorAll("table.lb th"), function (h) { return h.textContent; });
        var paired = [].map.call(document.querySelectorAll("table.paired"), function (t) {
          return [].map.call(t.querySelectorAll("th"), function (h) { var r = h.getBoundingClientRect(); return [r.left, r.width, h.textContent]; });
        });
        var marks = [].map.call(document.querySelectorAll("table.paired td.mark"), function (c) {
          var plain = c.parentElement.cells[5];  // the n column: an ordinary cell of the same row
          return [c.textContent, getComputedStyle(c).backgroundColor, getComputedStyle(plain).backgroundColor];
        });
        var wins = [].map.call(document.querySelectorAll("table.paired tr"), function (r) {
          var m = r.querySelector("td.mark"); return m ? [m.textContent, r.querySelectorAll("td.win").length] : null;
        }).filter(Boolean);
        window.probe = {heads: heads, paired: paired, marks: marks, wins: wins};""",
    )
    assert "psnr (dB) ↑" in board["heads"] and "ssim ↑" in board["heads"]
    assert len(board["paired"]) == 2
    lefts = [[round(c[0]) for c in t] for t in board["paired"]]
    assert lefts[0] == lefts[1]  # the paired tables' columns line up
    assert [c[2] for c in board["paired"][0]][2:4] == ["A − B (dB)", "CI (dB)"]
    colours = {text: set() for text in ("yes", "no")}
    for text, bg, plain in board["marks"]:
        colours[text].add(bg)
        assert (bg != plain) == (text == "yes"), (text, bg, plain)  # only the marker stands out of its row
    assert colours["yes"], "the tiny set has clear differences (noise 2 vs 25)"
    assert not colours["yes"] & colours["no"]  # the marker looks different from its absence
    assert all((n > 0) == (mark == "yes") for mark, n in board["wins"])  # a highlight only with the marker
    gallery = _probe(
        out / "gallery" / "good.html",
        """var t = document.querySelector("table.sortable");
        window.probe = {heads: [].map.call(t.querySelectorAll("th"), function (h) { return h.textContent; }),
                        width: t.getBoundingClientRect().width, window: window.innerWidth};""",
    )
    assert "candidate" in gallery["heads"] and "image" not in gallery["heads"]
    assert any(h.startswith("psnr (dB)") for h in gallery["heads"])
    assert gallery["width"] >= 0.9 * gallery["window"], gallery

    markdown_it = pytest.importorskip("markdown_it")
    md = (out / "leaderboard.md").read_text()
    page = tmp_path / "md.html"
    body = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}</body></html>')
    shown = _probe(page, "window.probe = document.body.innerText;")
    assert "&lt;" not in shown and "< 0.01" in shown and "psnr (dB) ↑" in shown


@pytest.mark.slow
@needs_chromium
def test_pages_with_hostile_names_pass_the_browser_check(tmp_path):
    """Generator names that are markup, scripts, TeX and 240 characters long: every page still renders with
    no console message and fetches nothing."""
    from genmetrics.testing import toy_leaderboard

    names = ["<script>alert(1)</script>", "<img src=http://host/x.png>", r"$\frac{$", "g" * 240]
    cfg = toy_leaderboard(tmp_path)
    folders = [g["images"] for g in cfg["generators"]]
    cfg["generators"] = [{"name": n, "images": folders[i % 2]} for i, n in enumerate(names)]
    out = run_leaderboard(cfg, tmp_path / "out", base_dir=tmp_path).out
    pages = [out / "leaderboard.html", *sorted((out / "gallery").glob("*.html"))]
    assert len(pages) == 1 + len(names)
    assert bc.main(["--shots", str(tmp_path / "shots"), *map(str, pages)]) == 0
