"""Input-file hashes (genmetrics.data.output.hashes): sha256 of the bytes, cached by path, size, times and
inode; a file replaced by another of the same size is hashed again; a torn or unwritable cache file costs only
a re-read, never a wrong hash."""

from __future__ import annotations

import hashlib
import json
import os

from genmetrics.data.output import hashes as H
from genmetrics.data.output.hashes import HashCache, file_hash


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_the_hash_is_sha256_of_the_bytes(tmp_path):
    data = os.urandom(3 << 20)  # more than one read block
    (tmp_path / "a.png").write_bytes(data)
    assert HashCache()(tmp_path / "a.png") == file_hash(tmp_path / "a.png") == _sha(data)


def test_the_cache_reads_an_unchanged_file_once_and_a_replaced_one_again(tmp_path, monkeypatch):
    img, store = tmp_path / "a.png", tmp_path / "hashes.json"
    img.write_bytes(b"abc")
    cache = HashCache(store)
    assert cache(img) == _sha(b"abc")
    cache.save()
    reads = []
    real = H._sha256_file
    monkeypatch.setattr(H, "_sha256_file", lambda p: reads.append(p) or real(p))
    again = HashCache(store)
    assert again(img) == _sha(b"abc") and reads == []  # from the cache file, not read
    st = img.stat()
    img.write_bytes(b"abd")  # same size, and the modification time set back as cp -p would
    os.utime(img, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again(img) == _sha(b"abd") and reads == [str(img)]


def test_a_torn_or_foreign_cache_file_is_ignored(tmp_path):
    img, store = tmp_path / "a.png", tmp_path / "hashes.json"
    img.write_bytes(b"abc")
    st = img.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    for text in (
        '{"version": 1, "files": {',
        json.dumps({"version": 2, "files": {str(img): [*stamp, "0" * 16]}}),
    ):
        store.write_text(text)
        assert HashCache(store)(img) == _sha(b"abc")
    # an entry with the right stamp but a malformed hash is dropped, never trusted
    store.write_text(json.dumps({"version": 1, "files": {str(img): [*stamp, "short"]}}))
    assert HashCache(store)(img) == _sha(b"abc")


def test_save_writes_only_news_and_warns_when_it_cannot(tmp_path, capsys):
    img = tmp_path / "a.png"
    img.write_bytes(b"abc")
    cache = HashCache(tmp_path / "hashes.json")
    cache.save()
    assert not (tmp_path / "hashes.json").exists()  # nothing hashed yet: nothing written
    cache(img)
    (tmp_path / "hashes.json").mkdir()  # a folder in its place: the hashes cannot be kept
    cache.save()
    err = capsys.readouterr().err
    assert err.startswith("warning: could not keep the input hashes in ") and "--resume" in err
    assert cache(img) == _sha(b"abc")


def test_the_cache_file_is_what_json_dumps_writes_and_reads_back_the_same(tmp_path):
    """The entries are held packed and written one at a time: the file is byte for byte json.dumps of the
    mapping {path: [size, mtime_ns, ctime_ns, inode, hash]} (parity with the explicit stat and sha256), and a
    second cache reads every entry back without hashing again."""
    store = tmp_path / "hashes.json"
    files = []
    for i, data in enumerate([b"", b"abc", os.urandom(1000)]):
        f = tmp_path / f'{i} \u00e9"q.png'  # a name JSON must escape
        f.write_bytes(data)
        files.append((f, data))
    cache = HashCache(store)
    for f, data in files:
        assert cache(f) == _sha(data)
    cache.save()
    expected = {}
    for f, data in files:
        st = os.stat(f)
        expected[str(f)] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, _sha(data)]
    assert store.read_text(encoding="utf-8") == json.dumps({"version": 1, "files": expected}) + "\n"
    again = HashCache(store)
    H._sha256_file, real = (
        (lambda p: (_ for _ in ()).throw(AssertionError(f"{p} read again"))),
        H._sha256_file,
    )
    try:
        assert [again(f) for f, _ in files] == [_sha(d) for _, d in files]
    finally:
        H._sha256_file = real


def test_cache_entries_that_cannot_be_held_packed_are_hashed_again(tmp_path):
    """An entry with a hash that is not 16 lowercase hex digits or a number outside the stat fields' range is
    dropped on load (the file is hashed again), never used."""
    img, store = tmp_path / "a.png", tmp_path / "hashes.json"
    img.write_bytes(b"abc")
    st = os.stat(img)
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    for entry in ([*stamp, "ABCDEF0123456789"], [2**64, *stamp[1:], "0123456789abcdef"]):
        store.write_text(json.dumps({"version": 1, "files": {str(img): entry}}))
        assert HashCache(store)(img) == _sha(b"abc")


def test_a_file_that_cannot_be_read_hashes_as_unreadable_and_is_hashed_once_it_can(tmp_path):
    """A broken link among a leaderboard's images stopped the run with a bare ``[Errno 2]`` before anything was
    scored, even with --on-error skip: the hash of an unreadable file is now a marker (never cached), and the
    reader names the file per --on-error."""
    link = tmp_path / "a.png"
    link.symlink_to(tmp_path / "target.png")
    cache = HashCache(tmp_path / "hashes.json")
    assert cache(link) == H.UNREADABLE
    (tmp_path / "target.png").write_bytes(b"abc")
    assert cache(link) == hashlib.sha256(b"abc").hexdigest()[:16]
