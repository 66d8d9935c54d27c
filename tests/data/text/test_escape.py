"""genmetrics.data.escape: report cells that would run as spreadsheet formulas or break Markdown tables are neutralised."""

from __future__ import annotations

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
