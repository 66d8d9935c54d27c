"""Records and locks under GENMETRICS_HOME (genmetrics.data.caches.homefile): a record is read only when it is
a regular file, small, shallow, UTF-8 JSON; anything else is one ``HomeFileError`` naming the file and the fix;
the lock waits a bounded time and names a holder that does not let go."""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from genmetrics.data.caches.homefile import HomeFileError, home_lock, nesting_depth, read_json_record
from tests.helpers import held_by_child

FIX = "delete it (genmetrics writes it again)"


@pytest.mark.parametrize("seed", range(10))
def test_nesting_depth_equals_the_parsed_depth(seed):
    """A second computation: the depth of the value json.loads gives, on random nested values with brackets
    and escaped quotes inside strings."""
    rng = random.Random(seed)

    def value(d):
        if d == 0 or rng.random() < 0.3:
            return rng.choice([1, None, 'a "[[" {', "]]}}\\"])
        return (
            [value(d - 1) for _ in range(rng.randint(0, 3))]
            if rng.random() < 0.5
            else {str(i): value(d - 1) for i in range(rng.randint(0, 3))}
        )

    def depth(v):
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    v = value(8)
    assert nesting_depth(json.dumps(v)) == depth(v)


def test_a_record_round_trips_and_a_missing_one_is_none(tmp_path):
    record = {"cpu": {"mode": "blocks", "ratio": 1.25}, "names": ["ä", "b"]}
    (tmp_path / "r.json").write_text("\ufeff" + json.dumps(record), encoding="utf-8")  # a BOM is accepted
    assert read_json_record(tmp_path / "r.json") == record
    assert read_json_record(tmp_path / "none.json") is None


@pytest.mark.parametrize(
    "content,says",
    [
        (b"x" * 101, "101 bytes, more than the 100 read"),
        (b"[" * 33 + b"]" * 33, "nests 33 levels deep (at most 32 are read)"),
        (b'{"a": \xff}', "not UTF-8 text (byte 6)"),
        (b'{"a": }', "not valid JSON (Expecting value)"),
    ],
    ids=["too-large", "too-deep", "not-utf8", "not-json"],
)
def test_a_bad_record_is_named_with_the_fix(tmp_path, content, says):
    p = tmp_path / "fast_paths.json"
    p.write_bytes(content)
    with pytest.raises(HomeFileError) as info:
        read_json_record(p, max_bytes=100)
    assert str(info.value) == f"{p}: {says}; {FIX}"
    assert isinstance(info.value, OSError)


def test_a_folder_or_fifo_in_place_of_a_record_is_named_without_blocking(tmp_path):
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(HomeFileError, match=r"dir\.json: is a folder, not a file"):
        read_json_record(tmp_path / "dir.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.json")
        start = time.monotonic()
        with pytest.raises(HomeFileError, match=r"pipe\.json: is a FIFO \(named pipe\), not a file"):
            read_json_record(tmp_path / "pipe.json")
        assert time.monotonic() - start < 5  # opened without blocking on a writer that never comes


def test_home_lock_serialises_and_names_a_holder_that_does_not_let_go(tmp_path):
    lock = tmp_path / "r.lock"
    code = (
        "import time; from genmetrics.data.caches.homefile import home_lock\n"
        f"with home_lock({str(lock)!r}):\n    print('held', flush=True); time.sleep(30)"
    )
    with held_by_child(code):
        start = time.monotonic()
        with pytest.raises(HomeFileError, match=r"r\.lock: held by another process for more than 0\.3 s"):
            with home_lock(lock, wait=0.3):
                pass
        assert time.monotonic() - start >= 0.3  # it did wait
    with home_lock(lock, wait=5):  # the holder ended: the OS released its lock
        pass


def test_a_lock_path_that_is_not_a_file_is_named(tmp_path):
    (tmp_path / "r.lock").mkdir()
    with pytest.raises(HomeFileError, match=r"r\.lock: the lock file is a folder; delete it"):
        with home_lock(tmp_path / "r.lock"):
            pass
