"""Reading a leaderboard run's manifest.json: an unreadable one is named with the reason, never raised."""

from __future__ import annotations


def test_malformed_manifest_is_named(tmp_path):
    from genmetrics.leaderboard.manifest import read_manifest

    (tmp_path / "manifest.json").write_bytes(b'{"metrics": {"psnr": \xff}}')
    why = read_manifest(tmp_path)
    assert isinstance(why, str) and "manifest.json cannot be read (not UTF-8 text at byte 21)" in why
    (tmp_path / "manifest.json").write_text('{"metrics": {"psnr": ')
    assert "cannot be read (JSONDecodeError: line 1, column 22)" in read_manifest(tmp_path)
