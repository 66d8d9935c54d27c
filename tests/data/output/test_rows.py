"""Result rows (genmetrics.data.output.rows): the append-only writer resumes without loss or duplicates, a torn
last line is dropped, a corrupt line before it is refused naming the file and line; rows holding pickles, NaN
or a score too large for a float are refused."""

from __future__ import annotations

import json

import pytest

from genmetrics.data.output.atomic import atomic_write_json
from genmetrics.data.output.rows import ResultsWriter, read_results
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases


def test_results_writer_resume_and_torn_line(tmp_path):
    p = tmp_path / "results.jsonl"
    with ResultsWriter(p) as w:
        assert w.write([{"generator": "g", "metric": "m", "id": str(i), "score": i} for i in range(3)]) == 3
    with open(p, "a") as f:
        f.write('{"generator": "g", "metric": "m", "id": "3", "sco')  # torn by a kill
    with ResultsWriter(p, resume=True) as w:
        assert w.n_done == 3
        assert w.done({"generator": "g", "metric": "m", "id": "2"})
        assert (
            w.write([{"generator": "g", "metric": "m", "id": str(i), "score": i} for i in range(2, 5)]) == 2
        )
    rows = read_results(p)
    assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4"]
    atomic_write_json(tmp_path / "s.json", {"x": float("nan")})
    assert json.loads((tmp_path / "s.json").read_text()) == {"x": None}


def test_malformed_results_lines_name_the_line(tmp_path):
    """A results line that is not UTF-8 (or JSON) is refused naming the file and line unless it is the last
    line (torn by a kill, possibly inside a multi-byte character): then it is dropped."""
    good = b'{"generator":"g","metric":"m","id":"1","score":1.0}\n'
    f = tmp_path / "results.jsonl"
    f.write_bytes(good + b'{"generator":"g\xff"}\n' + good)
    with pytest.raises(InputError, match=r"results\.jsonl:2: corrupt results line .*not UTF-8"):
        read_results(f)
    f.write_bytes(good + '{"generator":"é'.encode()[:-1])  # torn inside the two bytes of é
    assert len(read_results(f)) == 1


def test_a_result_row_with_a_score_too_large_for_a_float_is_named(tmp_path, capsys):
    """``leaderboard --resume`` on a results.jsonl whose score is a 400-digit integer: one error line naming
    the file and line (it was an OverflowError traceback, exit 1)."""
    from genmetrics.cli.main import main
    from genmetrics.data.output.rows import check_result_row
    from genmetrics.testing import toy_leaderboard

    row = {"generator": "g", "metric": "psnr", "id": "0"}
    assert check_result_row({**row, "score": 10**300}) is None  # a float holds it
    assert "finite number" in check_result_row({**row, "score": 10**400})

    cfg = toy_leaderboard(tmp_path, n=2)
    board = tmp_path / "board.yaml"  # JSON is YAML
    board.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots"]) == 0
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "score": 10**400})
    results.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err and f"{results}:1" in err


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-results-jsonl-pickle", "pickle", "read_results: results.jsonl holds pickle bytes")
def _(ctx):
    from genmetrics.data.output.rows import read_results

    p = ctx.payload(ctx.inp / "results.jsonl")
    with open(p, "ab") as f:  # a good row after it: the pickle is not a torn last line
        f.write(b'\n{"generator": "g", "metric": "psnr", "id": "a", "value": 1.0}\n')
    ctx.freeze()
    ctx.refused(lambda: read_results(p), "results.jsonl")


@case("h-results-nan-score", "poison", "read_results: a row whose score is NaN text")
def _(ctx):
    from genmetrics.data.output.rows import check_result_row, read_results

    p = ctx.inp / "results.jsonl"
    rows = [
        {"generator": "g", "metric": "psnr", "id": "a", "value": 1.0},
        {"generator": "g", "metric": "psnr", "id": "b", "value": "NaN!"},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ctx.freeze()
    ctx.refused(lambda: read_results(p, check=check_result_row), "results.jsonl")


test_hostile = HOSTILE.test()
