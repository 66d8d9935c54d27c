"""Check HTML reports in a real browser (headless Chromium): each page renders, logs no console error or
uncaught exception, and its screenshot has a sane size and is not blank.

    python .ci/browser_check.py [--chromium PATH] [--shots DIR] PAGE.html...

Exit 0: every page passed; 1: a page failed (the reasons are printed); 3: no Chromium found (the caller
decides whether that is a skip). For each page Chromium runs twice with a fresh profile: ``--dump-dom``
with ``--enable-logging=stderr`` (the DOM after scripts ran, and every console message, which Chromium
writes to stderr as ``CONSOLE(line)] "message"``) and ``--screenshot``. The pages are opened from disk,
with networking off in the browser: a report must embed everything.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]
WIDTH, HEIGHT = 1200, 2400
# a console message in Chromium's stderr log: ``INFO:CONSOLE:12] "msg", source: file:///... (12)`` (newer
# builds) or ``INFO:CONSOLE(12)] ...`` (older); headless builds log every level as INFO, so the level is not
# told apart: a report page logs nothing, and any message (console.error, an uncaught exception) fails it.
CONSOLE = re.compile(r':CONSOLE[:(]\d+\)?\] "(?P<msg>.*)", source: (?P<src>.*)$')


def find_chromium(given: str | None) -> str | None:
    for c in ([given] if given else []) + ["chromium", "chromium-browser", "google-chrome", "chrome"]:
        found = shutil.which(c) if c and not os.path.isabs(c) else c
        if found and os.access(found, os.X_OK):
            return found
    return None


def _run(chromium: str, extra: list[str], url: str, timeout: int = 120) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", *extra, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def console_messages(stderr: str) -> list[str]:
    """Every console message in Chromium's stderr log, as ``message (source)``.

    >>> console_messages('[1:1:1201/1.2:INFO:CONSOLE:1] "Uncaught ReferenceError: f", source: file:///a.html (1)')
    ['Uncaught ReferenceError: f (file:///a.html (1))']
    """
    return [f"{m['msg']} ({m['src']})" for m in map(CONSOLE.search, stderr.splitlines()) if m]


def external_refs(dom: str) -> list[str]:
    """``src`` attributes of the rendered page that point anywhere but a ``data:`` URI (a report embeds
    everything; links between report pages are ``href`` and allowed).

    >>> external_refs('<img src="data:image/png;base64,AA"><img src="x.png"><a href="g.html">')
    ['x.png']
    """
    return [u for u in re.findall(r'\ssrc="([^"]*)"', dom) if not u.startswith("data:")]


def check_page(chromium: str, page: Path, shot: Path, *, expect: list[str]) -> list[str]:
    """The problems of one page (empty: it passed); its screenshot goes to ``shot``."""
    url = page.resolve().as_uri()
    problems = []
    dom = _run(chromium, ["--dump-dom", "--enable-logging=stderr", "--v=0"], url)
    if dom.returncode != 0 or "<body" not in dom.stdout:
        problems.append(f"--dump-dom failed (exit {dom.returncode}): {dom.stderr.strip()[-500:]}")
    problems += [f"console: {m}" for m in console_messages(dom.stderr)]
    problems += [f"not embedded: src={u!r}" for u in external_refs(dom.stdout)]
    for text in expect:
        if text not in dom.stdout:
            problems.append(f"rendered DOM lacks {text!r}")
    run = _run(chromium, [f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}"], url)
    if run.returncode != 0 or not shot.is_file():
        return [*problems, f"--screenshot failed (exit {run.returncode}): {run.stderr.strip()[-500:]}"]
    from PIL import Image, ImageStat

    with Image.open(shot) as im:
        size = im.size
        spread = ImageStat.Stat(im.convert("L")).stddev[0]
    if size != (WIDTH, HEIGHT):
        problems.append(f"screenshot is {size[0]}x{size[1]}, expected {WIDTH}x{HEIGHT}")
    if spread < 5.0:  # a blank (or nearly uniform) page
        problems.append(f"screenshot is blank (grey-level standard deviation {spread:.2f})")
    if shot.stat().st_size < 20_000:
        problems.append(f"screenshot is only {shot.stat().st_size} bytes: the page rendered almost nothing")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="+", type=Path)
    ap.add_argument("--chromium")
    ap.add_argument("--shots", type=Path, default=Path(tempfile.gettempdir()) / "browser-check")
    ap.add_argument("--expect", action="append", default=[], help="text the rendered DOM of every page has")
    args = ap.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("browser check: no chromium on PATH", file=sys.stderr)
        return 3
    args.shots.mkdir(parents=True, exist_ok=True)
    failed = 0
    for page in args.pages:
        shot = args.shots / (re.sub(r"[^A-Za-z0-9._-]+", "_", str(page)).strip("_") + ".png")
        problems = check_page(chromium, page, shot, expect=args.expect)
        print(f"browser check {'FAIL' if problems else 'ok'}: {page} (screenshot {shot})")
        for p in problems:
            print(f"  {p}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
