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
