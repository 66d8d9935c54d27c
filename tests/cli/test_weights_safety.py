"""``weights.json`` and the other records of ``GENMETRICS_HOME``: concurrent downloads all recorded, ``verify``
refusing entries that cannot vouch for files, download failures as one line, and hostile home files (a FIFO, a
device, a 100,000-deep document, a lock held by a stopped process) answered with one line and a fallback.

Nothing downloads: the hub functions are replaced by fakes. Each case was red before the fix: the second of two
concurrent downloads overwrote the first's record; ``"files": []`` and ``../../x`` verified as ok; a missing or
string ``files`` and a non-string path were tracebacks; a dropped connection or a malformed listing was a raw
traceback; a FIFO hung the reader; a deep document gave a recursion message; a stopped lock holder stalled a
run 120 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import huggingface_hub
import pytest

from genmetrics.accel import fastpath
from genmetrics.backbones import hub as hub_module
from genmetrics.backbones.weights import genmetrics_home
from genmetrics.cli.main import main
from genmetrics.data.caches import homefile

ROOT = Path(__file__).resolve().parents[2]
DINO = "facebook/dinov2-base"


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "recursion" not in err.lower()
    return lines[0]


@pytest.fixture
def online(monkeypatch):
    for var in ("GENMETRICS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub_module, "unreachable", lambda url=None: None)  # the fake hub answers


def _fake_snapshot(repo_id, *, cache_dir, **kw):
    folder = Path(cache_dir) / ("models--" + repo_id.replace("/", "--")) / "snapshots" / "rev"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"repo": repo_id}))
    return str(folder)


# ------------------------------------------------------------------------------ concurrent downloads

_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import huggingface_hub
    from genmetrics.backbones import hub
    from genmetrics.cli.main import main

    repo, barrier = sys.argv[1], Path(sys.argv[2])

    def fake(repo_id, *, cache_dir, **kw):
        folder = Path(cache_dir) / ("models--" + repo_id.replace("/", "--")) / "snapshots" / "rev"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"repo": repo_id}))
        (barrier / repo_id.replace("/", "--")).touch()
        t0 = time.time()  # both downloads finish together: their records are written at the same moment
        while len(list(barrier.iterdir())) < 2 and time.time() - t0 < 60:
            time.sleep(0.01)
        return str(folder)

    huggingface_hub.snapshot_download = fake
    hub.unreachable = lambda url=None: None
    sys.exit(main(["weights", "download", repo]))
    """
)


def test_two_concurrent_downloads_are_both_recorded(tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    home = tmp_path / "home"
    env = {**os.environ, "GENMETRICS_HOME": str(home), "PYTHONPATH": str(ROOT), "GENMETRICS_OFFLINE": "0"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    repos = ["org/model-a", "org/model-b"]
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, r, str(barrier)], env=env, stderr=subprocess.PIPE)
        for r in repos
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    recorded = json.loads((home / "weights.json").read_text())["weights"]
    assert set(recorded) == set(repos)


# -------------------------------------------------------------------------------------------- verify


def _manifest(entry) -> None:
    home = genmetrics_home()
    home.mkdir(parents=True, exist_ok=True)
    (home / "weights.json").write_text(json.dumps({"version": 1, "weights": {DINO: entry}}))


def _outside_file() -> tuple[str, str]:
    """A file two levels above GENMETRICS_HOME, and its sha256 (as a planted entry would carry it)."""
    target = genmetrics_home().parent.parent / "outside_file.txt"
    target.write_bytes(b"not a weights file")
    return "../../outside_file.txt", hashlib.sha256(b"not a weights file").hexdigest()


@pytest.mark.parametrize(
    "case",
    ["empty", "escaping", "absolute", "no-files", "files-string", "path-int", "file-not-object", "bad-sha"],
)
def test_verify_refuses_an_entry_that_cannot_vouch_for_files(case, capsys):
    ok = "0" * 64
    entry = {
        "empty": lambda: {"files": []},
        "escaping": lambda: {"files": [dict(zip(("path", "sha256"), _outside_file()))]},
        "absolute": lambda: {"files": [{"path": "/etc/hostname", "sha256": ok}]},
        "no-files": lambda: {"source": "hf"},
        "files-string": lambda: {"files": "hf/models--x/config.json"},
        "path-int": lambda: {"files": [{"path": 7, "sha256": ok}]},
        "file-not-object": lambda: {"files": ["hf/config.json"]},
        "bad-sha": lambda: {"files": [{"path": "hf/config.json", "sha256": 12}]},
    }[case]()
    _manifest(entry)
    rc, out, err = run(["weights", "verify", "dino"], capsys)
    line = one_line(err)
    assert rc == 1 and "ok " not in out
    assert f"entry {DINO!r}" in line and "weights.json" in line and "genmetrics weights download" in line


# ---------------------------------------------------------------------------------- download failures


def _dropped(repo_id, *, cache_dir, **kw):
    import httpx2

    folder = Path(_fake_snapshot(repo_id, cache_dir=cache_dir))
    (folder / "model.safetensors.incomplete").write_bytes(b"\0" * 10)  # half a file
    raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")


def _malformed(repo_id, **kw):
    raise TypeError("'NoneType' object is not iterable")  # what a malformed hub listing gives


@pytest.mark.parametrize("fake", [_dropped, _malformed], ids=["dropped-connection", "malformed-listing"])
def test_download_failure_is_one_line_and_nothing_is_recorded(fake, online, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    rc, _, err = run(["weights", "download", "dino"], capsys)
    line = one_line(err)
    assert rc == 1 and DINO in line and "nothing of it was recorded" in line
    assert "`genmetrics weights download dino`" in line
    manifest = genmetrics_home() / "weights.json"
    assert not manifest.exists() or DINO not in json.loads(manifest.read_text())["weights"]


# ------------------------------------------------------------------------------------- hostile home files


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _deep(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[" * 100_000 + "]" * 100_000)


def _device(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/zero")


HOSTILE = {"fifo": _fifo, "deep": _deep, "device": _device}


def _in_subprocess(code: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """A FIFO would hang a reader: the case runs in its own process, with a time limit."""
    env = {**os.environ, "GENMETRICS_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_weights_json_hostile_is_one_line(kind, tmp_path):
    home = tmp_path / "home"
    HOSTILE[kind](home / "weights.json")
    t0 = time.perf_counter()
    done = _in_subprocess(
        "import sys; from genmetrics.cli.main import main; sys.exit(main(['weights', 'list', 'dino']))", home
    )
    assert time.perf_counter() - t0 < 120
    line = one_line(done.stderr)
    assert done.returncode == 1 and "weights.json" in line and "delete it" in line


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_fast_path_record_hostile_falls_back_with_one_warning(kind, tmp_path):
    home = tmp_path / "home"
    HOSTILE[kind](home / fastpath.STORE_NAME)
    code = textwrap.dedent(
        """
        import warnings
        from genmetrics.accel import fastpath
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            c = fastpath.choose_path(("demo", 1), lambda: {"plain": lambda: None, "alt": lambda: None}, baseline="plain", exact=True)
        print(c.path, bool(c.times))
        for x in w:
            print("WARNING", x.message)
        """
    )
    done = _in_subprocess(code, home)
    assert done.returncode == 0, done.stderr
    first, *warns = done.stdout.strip().splitlines()
    assert first.split()[1] == "True"  # measured again: the record was not usable
    assert len(warns) == 1 and "fast_paths.json" in warns[0] and "recursion" not in done.stdout.lower()


def _stopped_holder(lock: Path) -> subprocess.Popen:
    """A process that takes ``lock`` and is then stopped (SIGSTOP): it holds the lock and never lets go."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
        "print('held', flush=True); time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    p.send_signal(signal.SIGSTOP)
    return p


def _end(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGCONT)
    p.kill()
    p.wait()


def test_fast_path_lock_held_by_a_stopped_process_gives_the_plain_path(monkeypatch, recwarn):
    holder = _stopped_holder(genmetrics_home() / "fast_paths.lock")
    try:
        monkeypatch.setattr(fastpath, "LOCK_WAIT", 1.0)
        fastpath.forget_fast_path_choices()
        t0 = time.perf_counter()
        c = fastpath.choose_path(
            ("demo-held", 1),
            lambda: {"plain": lambda: None, "alt": lambda: None},
            baseline="plain",
            exact=True,
        )
        took = time.perf_counter() - t0
    finally:
        _end(holder)
        fastpath.forget_fast_path_choices()
    assert c.path == "plain" and not c.times and took < 5.0  # the reference choice, neither measured nor hung
    msgs = [str(w.message) for w in recwarn if "fast_paths.lock" in str(w.message)]
    assert len(msgs) == 1 and "held by another process" in msgs[0]


def test_weights_lock_held_by_a_stopped_process_is_one_line(online, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _fake_snapshot)
    monkeypatch.setattr(homefile, "LOCK_WAIT", 1.0)
    holder = _stopped_holder(genmetrics_home() / "weights.json.lock")
    try:
        t0 = time.perf_counter()
        rc, _, err = run(["weights", "download", "dino"], capsys)
        took = time.perf_counter() - t0
    finally:
        _end(holder)
    line = one_line(err)
    assert rc == 1 and took < 5.0 and "weights.json.lock" in line and "held by another process" in line
