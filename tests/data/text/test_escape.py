"""genmetrics.data.escape: report cells that would run as spreadsheet formulas or break Markdown tables are neutralised."""

from __future__ import annotations

import pytest

from genmetrics.data.text.escape import WINDOWS_DEVICES, file_stem
from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-csv-formula-cells", "silent", "report cells starting with = + - @ tab CR are neutralised")
def _(ctx):
    from genmetrics.leaderboard.report import csv_safe

    ctx.freeze()
    for v in ("=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"):
        assert csv_safe(v) == "'" + v
    assert csv_safe("model-a") == "model-a" and csv_safe(-0.5) == -0.5


@case("h-markdown-pipe-newline", "silent", "Markdown cells escape |, line breaks, tags and entities")
def _(ctx):
    from genmetrics.leaderboard.report import md_escape

    ctx.freeze()
    out = md_escape("a|b\nc<script>&lt;")
    assert "|" not in out.replace("\\|", "") and "\n" not in out, out
    assert "<script>" not in out.replace("\\<script>", "") and "\\&lt;" in out, out


test_hostile = HOSTILE.test()


@pytest.mark.parametrize("name", ["CON", "con", "Prn", "aux", "NUL", "com1", "LPT9", "nul.tar", "CON.x.y"])
def test_file_stem_is_never_a_windows_device_name(name):
    """A generator named CON got gallery/CON.html: on Windows that name is the console, whatever the extension
    (red before). The part before the first dot is never a device name; the rest is kept."""
    stem = file_stem(name)
    first, _, rest = stem.partition(".")
    assert first.upper() not in WINDOWS_DEVICES and first == name.partition(".")[0] + "_"
    assert rest == name.partition(".")[2] and file_stem(name) == stem
    for other in ("CONSOLE", "com10", "lpt", "a.con"):  # not device names: as before
        assert file_stem(other) == other
