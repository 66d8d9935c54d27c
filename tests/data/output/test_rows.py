"""Result rows (genmetrics.data.output.rows): the append-only writer resumes without loss or duplicates, a torn
last line is dropped, a corrupt line before it is refused naming the file and line."""

from __future__ import annotations

import json

import pytest

from genmetrics.data.output.atomic import atomic_write_json
from genmetrics.data.output.rows import ResultsWriter, read_results
from genmetrics.errors import InputError


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
