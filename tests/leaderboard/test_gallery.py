"""genmetrics.leaderboard.gallery: the per-generator galleries show the best and worst samples of each
column (an explicit sort), linked, sortable, self-contained, with names escaped."""

from __future__ import annotations

import html as html_lib
import re

import numpy as np

from genmetrics.leaderboard.gallery import best_and_worst, write_galleries


def test_best_and_worst_match_an_explicit_sort():
    rng = np.random.default_rng(1)
    for n in (1, 3, 7, 8, 20):
        scores = {f"s{i:02d}": float(v) for i, v in enumerate(rng.normal(size=n))}
        for hib in (True, False, None):
            best, worst = best_and_worst(scores, hib, k=4)
            by_value = sorted(scores, key=scores.get, reverse=hib in (True, None))
            assert best == by_value[:4]
            assert worst == by_value[::-1][: min(4, max(0, n - 4))]
            assert not set(best) & set(worst)


def test_gallery_pages(board):
    res, rows = board
    out = res.out
    page_of = dict(
        re.findall(r'<a href="(gallery/[^"]+)">([^<]+)</a>', (out / "leaderboard.html").read_text())
    )
    assert sorted(page_of.values()) == ["bad", "good", "mid"]
    for href, g in page_of.items():
        text = (out / href).read_text()
        assert not re.search(r'src="(?!data:)', text)  # self-contained
        assert 'href="../leaderboard.html"' in text and "Look &lt;b&gt;" in text
        assert "<script>" in text and 'class="sortable"' in text
        for metric in ("psnr", "ssim"):
            scores = {r["id"]: r["score"] for r in rows if r["generator"] == g and r["metric"] == metric}
            best, worst = best_and_worst(scores, True, k=4)
            section = text.split(f'<h2 id="{metric}">')[1].split("</table>")[0]
            shown = re.findall(r'<td class="l" data-v="([^"]+)">', section)
            assert shown == best + worst  # best first, then worst first
            # each row: the candidate's and the reference's thumbnail
            assert section.count('class="thumb" alt="generated') == len(shown)
            assert section.count('class="thumb" alt="reference') == len(shown)


def test_gallery_escapes_names_and_keeps_file_names_apart(board, tmp_path):
    summary, links = _renamed_galleries(
        board, {"good": "<i>a/b", "mid": "<i>a?b", "bad": "bad"}, tmp_path / "o"
    )
    assert len({h for _, h in links}) == 3  # "<i>a/b" and "<i>a?b" sanitise alike: still two files
    for g, h in links:
        text = (tmp_path / "o" / h).read_text()
        assert "<i>" not in text and html_lib.escape(g) in text


def test_gallery_file_names_differ_by_more_than_case(board, tmp_path):
    """Generators "Model" and "model" got gallery/Model.html and gallery/model.html: one file on a
    case-insensitive file system (macOS, Windows), where the second page replaced the first and both links
    opened it (red before). Every page name now differs from the others after casefold."""
    summary, links = _renamed_galleries(
        board, {"good": "Model", "mid": "model", "bad": "MODEL"}, tmp_path / "o"
    )
    assert len({h.casefold() for _, h in links}) == 3
    for g, h in links:
        title = f"<title>{html_lib.escape(summary['title'])}: {g}</title>"
        assert title in (tmp_path / "o" / h).read_text()  # each link opens its own generator's page


def _renamed_galleries(board, rename, out):
    """The galleries of ``board`` with its generators renamed: ``(summary, links)``."""
    res, rows = board
    plan = _plan(res)
    summary = {**res.summary}
    summary["generators"] = [rename[g] for g in res.summary["generators"]]
    summary["ranking"] = [{**it, "generator": rename[it["generator"]]} for it in res.summary["ranking"]]
    rows2 = [{**r, "generator": rename[r["generator"]]} for r in rows]
    for mp in plan.metrics:
        mp.samples = {rename[g]: v for g, v in mp.samples.items()}
    return summary, write_galleries(out, plan, summary, rows2)


def _plan(res):
    from genmetrics.leaderboard import build_plan, load_config

    return build_plan(load_config(res.summary["config"]))
