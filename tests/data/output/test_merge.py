"""merge_in_order (streamed) against merge_results (rows in memory), and iter_results against the whole-file
reading rule of read_results, on files with duplicates, keys outside the order, blank and torn lines."""

from __future__ import annotations

import json
import random

import pytest

from genmetrics.data.jsonl import decode_line, parse_line
from genmetrics.data.output.merge import merge_in_order, merge_results
from genmetrics.data.output.rows import dumps_line, iter_results, read_results
from genmetrics.errors import InputError

KEYS = [("g", m, f"{i:03d}") for m in ("psnr", "ssim") for i in range(40)]


def _row(key, score):
    return {"generator": key[0], "metric": key[1], "id": key[2], "score": score, "input": "ab"}


def _sources(tmp_path, seed):
    """Three shards: shuffled rows, keys repeated across and within files (other scores), rows outside the
    order, a BOM on a first line, spaces in a line (not the canonical form), blank lines, a torn last line."""
    rng = random.Random(seed)
    files = []
    for k in range(3):
        keys = rng.sample(KEYS, 30) + [("other", "psnr", str(k)), ("g", "psnr", "999")]
        lines = [dumps_line(_row(key, rng.random())) for key in keys]
        lines.append(json.dumps(_row(rng.choice(KEYS), 5.0)))  # a repeat, written with spaces
        rng.shuffle(lines)
        text = "\n\n".join(lines) + "\n" + '{"generator": "g", "me'  # killed mid-line
        p = tmp_path / f"rank-{k}.jsonl"
        p.write_bytes(("\ufeff" if k == 1 else "").encode() + text.encode())
        files.append(p)
    return files


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_in_order_writes_what_merge_results_writes(tmp_path, seed):
    files = _sources(tmp_path, seed)
    order = {k: i for i, k in enumerate(KEYS)}
    old = merge_results(
        files,
        tmp_path / "old.jsonl",
        sort_key=lambda r: order.get((str(r["generator"]), str(r["metric"]), str(r["id"])), len(order)),
    )
    seen = []
    n = merge_in_order(
        files, tmp_path / "new.jsonl", order.get, len(order), visit=lambda pos, row: seen.append((pos, row))
    )
    assert (tmp_path / "new.jsonl").read_bytes() == (tmp_path / "old.jsonl").read_bytes()
    assert n == len(old)
    # each kept row visited once, the first of its key: the same rows merge_results keeps
    assert sorted((r for _, r in seen), key=dumps_line) == sorted(old, key=dumps_line)
    assert all(pos == order.get((r["generator"], r["metric"], r["id"])) for pos, r in seen)


def test_merge_in_order_dest_may_be_a_source(tmp_path):
    files = _sources(tmp_path, 3)
    order = {k: i for i, k in enumerate(KEYS)}
    merge_results(
        files,
        tmp_path / "old.jsonl",
        sort_key=lambda r: order.get((r["generator"], r["metric"], r["id"]), 99),
    )
    merge_in_order(files, files[0], order.get, len(order))
    assert files[0].read_bytes() == (tmp_path / "old.jsonl").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _whole_file(path):
    """read_results' rule as it read the whole file: split on newlines, a bad line among the last two ends
    the rows, any other is an error."""
    lines = path.read_bytes().split(b"\n")
    rows = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rows.append(parse_line(decode_line(raw, path, i + 1), path, i + 1))
        except InputError:
            if i >= len(lines) - 2:
                break
            raise
    return rows


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1}\n{"a": 2}\n',
        b'{"a": 1}\n{"a": 2}',
        b'{"a": 1}\n{"a": 2',
        b'{"a": 1}\n{"a": 2\n',
        b'{"a": 1}\n{"a"\n{"a": 3',  # a bad line before an unterminated last line: the end
        b'{"a": 1}\n\n   \n{"a": 2}\n\n',
        b"\xef\xbb\xbf" + b'{"a": 1}\n',
        b'{"a": 1}\n{"a": "\xc3',  # torn inside a character
        b"",
    ],
)
def test_iter_results_follows_the_whole_file_rule(tmp_path, text):
    p = tmp_path / "r.jsonl"
    p.write_bytes(text)
    rows = [r for r, _ in iter_results(p)]
    assert rows == _whole_file(p) == read_results(p)
    for row, off in iter_results(p):  # the offset is where the line starts
        line = text[off:].split(b"\n", 1)[0]
        assert json.loads(line.decode("utf-8-sig")) == row


@pytest.mark.parametrize("text", [b'{"a": 1}\n{"a"\n{"a": 3}\n', b'{"a"\n{"a": 2}\n{"a": 3}'])
def test_iter_results_refuses_a_bad_line_before_the_end(tmp_path, text):
    p = tmp_path / "r.jsonl"
    p.write_bytes(text)
    with pytest.raises(InputError, match=r"r.jsonl:\d+: corrupt results line"):
        list(iter_results(p))
    with pytest.raises(InputError):
        _whole_file(p)


def test_a_source_that_does_not_exist_gives_no_rows(tmp_path):
    """A rank's shard or a results.jsonl not written yet (a DDP run's first finish) is a source without rows,
    as merge_results reads it, not an error."""
    a = tmp_path / "a.jsonl"
    a.write_text('{"k": "1", "score": 1}\n{"k": "0", "score": 0}\n', encoding="utf-8")
    missing = tmp_path / "missing.jsonl"
    order = {("0",): 0, ("1",): 1}
    n = merge_in_order([missing, a], tmp_path / "out.jsonl", order.get, 2, key=("k",), root=tmp_path)
    assert n == 2
    got = [json.loads(x)["k"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert got == ["0", "1"]
