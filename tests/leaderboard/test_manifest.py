"""Reading a leaderboard run's manifest.json: an unreadable one is named with the reason, never raised."""

from __future__ import annotations


def test_malformed_manifest_is_named(tmp_path):
    from genmetrics.leaderboard.manifest import read_manifest

    (tmp_path / "manifest.json").write_bytes(b'{"metrics": {"psnr": \xff}}')
    why = read_manifest(tmp_path)
    assert isinstance(why, str) and "manifest.json cannot be read (not UTF-8 text at byte 21)" in why
    (tmp_path / "manifest.json").write_text('{"metrics": {"psnr": ')
    assert "cannot be read (JSONDecodeError: line 1, column 22)" in read_manifest(tmp_path)


def test_resume_compares_each_generator_s_files_with_its_own_by_name(small_set, tmp_path):
    """Generators reordered, or one added in front, since the run being resumed: each generator's file list
    is compared with its own record (by name), not with the one at its old position, so the resume goes on
    (the result bytes of a fresh run of the new config; the added one scored); a generator whose files did
    change is still refused, naming its own config key. Red when the fingerprints are compared by position
    (it said 'generators[0]: the image files changed' for files that had not)."""
    import shutil

    import pytest
    from lb_helpers import toml_config, write_images

    from genmetrics.errors import InputError
    from genmetrics.leaderboard import run_leaderboard

    metrics = '[[metrics]]\nname = "psnr"\n'
    out = tmp_path / "out"
    run_leaderboard(toml_config(small_set, metrics, generators=["mid", "bad"]), out, plots=False)
    write_images(small_set / "gen" / "new", [f"s{i:02d}" for i in range(6)], seed=7)
    for order in (["bad", "mid"], ["new", "bad", "mid"]):
        cfg = toml_config(small_set, metrics, generators=order, name=f"{'-'.join(order)}.toml")
        run = tmp_path / "-".join(order)
        shutil.copytree(out, run)
        resumed = run_leaderboard(cfg, run, resume=True, plots=False)
        fresh = run_leaderboard(cfg, tmp_path / f"fresh-{'-'.join(order)}", plots=False)
        assert resumed.results.read_bytes() == fresh.results.read_bytes(), order
    (small_set / "gen" / "mid" / "s00.png").write_bytes(b"\0")  # mid's files did change (a size)
    cfg = toml_config(small_set, metrics, generators=["bad", "mid"], name="changed.toml")
    with pytest.raises(InputError, match=r"changed\.toml: generators\[1\]: the image files changed"):
        run_leaderboard(cfg, out, resume=True, plots=False)


def test_resume_refuses_two_different_rows_for_one_key(small_set, tmp_path):
    """A results file edited by hand with a second, different row for a key (first or last): the resume
    stops naming both lines, whichever comes first (the first row won without a word: a score the run never
    wrote was ranked when it came first); a copy of the same row is kept once (the bytes of the run). Red
    when the differing copies are not looked for."""
    import json
    import shutil

    import pytest
    from lb_helpers import toml_config

    from genmetrics.errors import InputError
    from genmetrics.leaderboard import run_leaderboard

    cfg = toml_config(small_set, '[[metrics]]\nname = "psnr"\n', generators=["mid", "bad"])
    ref = run_leaderboard(cfg, tmp_path / "ref", plots=False).results
    lines = ref.read_bytes().splitlines(keepends=True)
    other = json.loads(lines[0])
    other["score"] = other["score"] / 2
    edited = (json.dumps(other) + "\n").encode()
    for name, body, where in [
        ("last", b"".join(lines) + edited, f"results.jsonl:1 and .*results.jsonl:{len(lines) + 1}: "),
        ("first", edited + b"".join(lines), "results.jsonl:1 and .*results.jsonl:2: "),
    ]:
        out = tmp_path / name
        shutil.copytree(ref.parent, out)
        (out / "results.jsonl").write_bytes(body)
        with pytest.raises(InputError, match=where + "two different rows for generator 'mid', column 'psnr'"):
            run_leaderboard(cfg, out, resume=True, plots=False)
    out = tmp_path / "copy"
    shutil.copytree(ref.parent, out)
    (out / "results.jsonl").write_bytes(lines[0] + b"".join(lines))
    assert run_leaderboard(cfg, out, resume=True, plots=False).results.read_bytes() == ref.read_bytes()
