"""genmetrics.leaderboard.inputs: the ``input`` hash of a row is a function of the bytes of exactly the files
and text it was computed from (parity with an explicit sha256), and the file hashes persist in the cache file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from genmetrics.leaderboard import SET_ID, build_plan, load_config
from genmetrics.leaderboard.inputs import InputHashes
from genmetrics.testing import toy_leaderboard


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.fixture
def toy(tmp_path):
    root = tmp_path / "toy"
    cfg = toy_leaderboard(root)
    return root, build_plan(load_config(cfg, base_dir=root), check_construct=False)


def test_a_sample_row_hashes_its_candidate_and_reference(toy):
    root, plan = toy
    h = InputHashes(plan)
    for g in ("copy", "noisy"):
        for stem in ("000", "001", "002"):
            want = hashlib.sha256(_sha(root / g / f"{stem}.png").encode())
            want.update(b"|r" + _sha(root / "refs" / f"{stem}.png").encode())
            assert h.of_key((g, "psnr", stem)) == want.hexdigest()[:16]


def test_only_the_rows_of_a_changed_file_change(toy):
    root, plan = toy
    keys = plan.keys()
    before = {k: InputHashes(plan).of_key(k) for k in keys}
    assert len(set(before.values())) == len(keys)  # no two rows share an input
    (root / "refs" / "001.png").write_bytes(b"another reference")
    after = {k: InputHashes(plan).of_key(k) for k in keys}
    changed = {k for k in keys if before[k] != after[k]}
    assert changed == {("copy", "psnr", "001"), ("noisy", "psnr", "001")}


def test_a_key_that_is_not_planned_has_no_input(toy):
    _, plan = toy
    h = InputHashes(plan)
    for key in (
        ("copy", "psnr", "999"),
        ("other", "psnr", "000"),
        ("copy", "ssim", "000"),
        ("copy", "psnr", SET_ID),
    ):
        assert h.of_key(key) is None


def test_the_cache_file_keeps_the_file_hashes_for_the_next_run(toy, tmp_path):
    _, plan = toy
    cache = tmp_path / "run" / ".genmetrics.hashes.json"
    cache.parent.mkdir()
    first = InputHashes(plan, cache)
    answers = [first.of_key(k) for k in plan.keys()]
    first.save()
    assert cache.is_file()
    again = InputHashes(plan, cache)
    assert [again.of_key(k) for k in plan.keys()] == answers


def test_set_level_input_is_the_real_set_and_the_whole_folder(toy):
    root, plan = toy
    h = InputHashes(plan)
    mp = plan.metrics[0]
    mp.real = sorted((root / "refs").iterdir())

    def files(paths):  # the list hash: stem and content hash per file, sorted by stem
        return hashlib.sha256("".join(f"{p.stem}\t{_sha(p)}\n" for p in paths).encode()).hexdigest()[:16]

    real = files(mp.real)
    assert h.real(mp) == real
    for g in ("copy", "noisy"):
        both = f"{real}|{files(plan.images[g])}"
        assert h.set_level(mp, g) == hashlib.sha256(both.encode()).hexdigest()[:16]
    assert h.set_level(mp, "copy") != h.set_level(mp, "noisy")
