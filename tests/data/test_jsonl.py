"""The JSONL datasets (genmetrics.data.jsonl): each format parses, malformed lines are named by file and line."""

from __future__ import annotations

import json

import pytest

from genmetrics.cli.main import main
from genmetrics.data.jsonl import load_mib_pairs, load_odd_one_out, load_two_afc
from genmetrics.errors import InputError


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_formats_parse(tmp_path):
    f = _write(
        tmp_path / "o.jsonl",
        [{"id": "t1", "images": ["a.png", "b.png", "c.png"], "aspect": "color", "votes": [1, 5, 0]}],
    )
    (r,) = load_odd_one_out(f)
    assert r.images[0] == tmp_path / "a.png" and r.votes == (1.0, 5.0, 0.0)
    f = _write(
        tmp_path / "t.jsonl",
        [
            {
                "id": 1,
                "reference": "r.png",
                "candidates": ["a.png", "b.png"],
                "aspect": "pose",
                "votes": [2, 1],
                "source": "editing",
            }
        ],
    )
    (r,) = load_two_afc(f)
    assert r.id == "1" and r.source == "editing"
    f = _write(
        tmp_path / "m.jsonl",
        [
            {
                "id": "p",
                "prompt": "two dogs",
                "references": ["d1.png", "d2.png"],
                "candidates": ["x.png", "y.png"],
                "generators": ["g1", "g2"],
                "preference": 1,
                "diagnostics": [[1, 0.5, 0], [1, 1, 1]],
            }
        ],
    )
    (r,) = load_mib_pairs(f)
    assert r.preference == 1 and r.diagnostics[0] == (1.0, 0.5, 0.0)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("{not json", "invalid JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"images": ["a","b","c"], "aspect": "x"}', "missing key 'votes'"),
        ('{"images": ["a","b"], "aspect": "x", "votes": [1,1]}', "should list 3 paths"),
        ('{"images": ["a","b","c"], "aspect": " ", "votes": [1,1,1]}', "empty or whitespace"),
        ('{"images": ["a","b","c"], "aspect": "x", "votes": [0,0,0]}', "sums to zero"),
        ('{"images": ["a","b","c"], "aspect": "x", "votes": [1,"2",0]}', "non-negative number"),
        ('{"images": "a", "aspect": "x", "votes": [1,1,1]}', "should be list"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, fragment):
    f = _write(
        tmp_path / "bad.jsonl",
        [json.dumps({"images": ["a", "b", "c"], "aspect": "ok", "votes": [1, 0, 0]}), line],
    )
    with pytest.raises(InputError, match=fragment) as e:
        load_odd_one_out(f)
    assert "bad.jsonl:2" in str(e.value)


def test_duplicate_ids_and_empty_file(tmp_path):
    row = {"id": "x", "images": ["a", "b", "c"], "aspect": "ok", "votes": [1, 0, 0]}
    with pytest.raises(InputError, match="duplicate id 'x'"):
        load_odd_one_out(_write(tmp_path / "d.jsonl", [row, row]))
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no records"):
        load_odd_one_out(tmp_path / "e.jsonl")
    with pytest.raises(InputError, match="does not exist"):
        load_odd_one_out(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------------------ malformed files
@pytest.mark.parametrize(
    "content, fragment",
    [
        (b'{"id": "a"}\n{"id": "caf\xe9"}\n', "bad.jsonl:2: not UTF-8 text (byte 12 of the line is 0xe9)"),
        (b'{"id": "a"}\n' + b"[" * 100000 + b"\n", "bad.jsonl:2: invalid JSON (nested too deeply"),
        (b'{"id": "a"}\n{"id": \n', "bad.jsonl:2: invalid JSON"),
    ],
)
def test_malformed_dataset_files_name_the_line(tmp_path, content, fragment):
    from genmetrics.data.jsonl import iter_jsonl

    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    with pytest.raises(InputError) as e:
        list(iter_jsonl(f))
    assert fragment in str(e.value)


def test_bom_and_crlf_are_fine(tmp_path):
    from genmetrics.data.jsonl import iter_jsonl

    f = tmp_path / "ok.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": "a"}\r\n{"id": "b"}\r\n')
    assert [o["id"] for _, o in iter_jsonl(f)] == ["a", "b"]


HUGE = 10**400  # a JSON or Python integer that no float holds


def _two_afc(tmp_path, votes):
    row = {
        "id": "p0",
        "reference": "r.png",
        "candidates": ["a.png", "b.png"],
        "aspect": "color",
        "votes": votes,
    }
    path = tmp_path / "votes.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize(
    ("votes", "says"),
    [([HUGE, 1], r"votes\[0\] should be a non-negative number"), ([1e308, 1e308], "sum to more than")],
    ids=["integer-400-digits", "sum-overflows"],
)
def test_votes_a_float_cannot_hold_are_named(tmp_path, capsys, votes, says):
    path = _two_afc(tmp_path, votes)
    with pytest.raises(InputError, match=says) as e:
        load_two_afc(path)
    assert f"{path}:1" in str(e.value)
    args = ["evaluate-human", "tpips", "--data", str(path), "--format", "2afc", "--no-model"]
    assert main([*args, "--baseline", "metric:psnr"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err and f"{path}:1" in err


def test_large_finite_votes_still_load(tmp_path):
    """The control: votes as large as a float holds with a finite sum are kept (shares are what count)."""
    (rec,) = load_two_afc(_two_afc(tmp_path, [1e307, 3e307]))
    assert rec.votes == (1e307, 3e307)
