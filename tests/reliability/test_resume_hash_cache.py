"""The content hashes that tell a resumed leaderboard run what changed persist in the run folder
(``.genmetrics.hashes.json``, keyed by path, size, mtime, ctime and inode), so ``--resume`` does not read
unchanged files again, and still reads (and rescores) a file replaced by one of the same size, also when
its modification time was set back."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from genmetrics.data.output import hashes as results_module
from genmetrics.data.output.hashes import HashCache
from genmetrics.leaderboard import run_leaderboard
from genmetrics.leaderboard.runner import HASHES


def _bmp_set(root, n=3):
    """BMP images: the byte size depends only on the dimensions, so a replacement keeps name and size."""
    rng = np.random.default_rng(0)
    for sub in ("refs", "gen/a"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / sub / f"s{i}.bmp")
    cfg = root / "config.toml"
    cfg.write_text(
        '[data]\nreferences = "refs"\n\n[[generators]]\nname = "a"\nimages = "gen/a"\n\n'
        '[[metrics]]\nname = "psnr"\n',
        encoding="utf-8",
    )
    return cfg


@pytest.fixture
def reads(monkeypatch):
    """The files whose bytes were hashed (every hash read goes through ``_sha256_file``)."""
    seen: list[str] = []
    real = results_module._sha256_file

    def counting(path):
        seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(results_module, "_sha256_file", counting)
    return seen


def test_resume_reads_no_unchanged_file_and_rehashes_a_replaced_one(tmp_path, reads):
    cfg = _bmp_set(tmp_path / "set")
    out = tmp_path / "out"
    run_leaderboard(cfg, out, plots=False)
    assert sorted(reads) == sorted(["s0.bmp", "s1.bmp", "s2.bmp"] * 2)  # each file once, in the first run
    assert (out / HASHES).is_file()

    reads.clear()
    res = run_leaderboard(cfg, out, resume=True, plots=False)  # a new run: only the cache file can help it
    assert reads == [] and res.scored == 0

    target = tmp_path / "set" / "gen" / "a" / "s1.bmp"
    st = target.stat()
    Image.fromarray(np.full((16, 16, 3), 9, np.uint8)).save(target)
    os.utime(
        target, ns=(st.st_atime_ns, st.st_mtime_ns)
    )  # same name, size and mtime: only ctime/inode differ
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    res = run_leaderboard(cfg, out, resume=True, plots=False)
    assert reads == ["s1.bmp"] and res.scored == 1
    fresh = run_leaderboard(cfg, tmp_path / "fresh", plots=False)
    assert res.results.read_bytes() == fresh.results.read_bytes()


@pytest.mark.parametrize("damage", ["torn", "not-json", "wrong-shape", "forged-stamp"])
def test_a_damaged_cache_file_only_costs_a_rehash(tmp_path, reads, damage):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    cache = tmp_path / "hashes.json"
    c = HashCache(cache)
    right = c(f)
    c.save()
    data = json.loads(cache.read_text())
    if damage == "torn":
        cache.write_text(cache.read_text()[:20])
    elif damage == "not-json":
        cache.write_text("[1, 2")
    elif damage == "wrong-shape":
        cache.write_text(json.dumps({"version": 1, "files": {str(f): "0123456789abcdef"}}))
    else:  # an entry for another state of the file (other size) is not used
        entry = data["files"][str(f)]
        cache.write_text(json.dumps({"version": 1, "files": {str(f): [entry[0] + 1, *entry[1:4], "0" * 16]}}))
    reads.clear()
    assert HashCache(cache)(f) == right and reads == ["a.bin"]


def test_the_cache_answers_the_same_as_hashing(tmp_path, reads):
    """Parity: a cached answer equals a fresh sha256 of the bytes (second computation with hashlib)."""
    import hashlib

    f = tmp_path / "img.bin"
    f.write_bytes(os.urandom(3000))
    c = HashCache(tmp_path / "h.json")
    first = c(f)
    c.save()
    again = HashCache(tmp_path / "h.json")(f)
    assert first == again == hashlib.sha256(f.read_bytes()).hexdigest()[:16] and reads == ["img.bin"]
