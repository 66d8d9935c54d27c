"""The output-folder lock (genmetrics.data.output.lock): one run at a time writes to a folder, a second one is
refused naming the holder, a run that wrote nothing leaves the folder as it found it, and the lock file is
never a link planted in its place."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from genmetrics.data.output.lock import LOCK, OutputLock, lock_output_folder
from genmetrics.errors import InputError
from tests.data.output.test_atomic import _link_refused
from tests.helpers import held_by_child
from tests.reliability.hostile import Cases, Ctx


def test_a_second_lock_names_the_holder_and_the_flag(tmp_path):
    lock = lock_output_folder(tmp_path / "out", flag="--index")
    try:
        with pytest.raises(InputError) as info:
            OutputLock(tmp_path / "out", flag="--index")
        msg = str(info.value)
        assert msg.startswith(
            f"--index {str(tmp_path / 'out')!r} is in use by another run (pid {os.getpid()} on "
        )
        assert msg.endswith("choose another --index folder")
    finally:
        lock.release()


def test_release_leaves_a_folder_as_found_unless_written(tmp_path):
    lock = lock_output_folder(tmp_path / "new")
    assert (tmp_path / "new" / LOCK).is_file()
    lock.release()
    assert not (tmp_path / "new").exists()  # created for the run, nothing written: removed again
    lock = lock_output_folder(tmp_path / "new")
    (tmp_path / "new" / "results.jsonl").write_text("{}\n")
    lock.release()
    assert sorted(os.listdir(tmp_path / "new")) == [LOCK, "results.jsonl"]  # written: kept, lock free again
    OutputLock(tmp_path / "new").release()
    lock.release()  # a second release does nothing


def test_a_file_or_an_uncreatable_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match=r"--out '.*f' is a file; pass a folder"):
        lock_output_folder(tmp_path / "f")
    with pytest.raises(
        InputError, match=r"--out '.*f/sub' cannot be created \(.*\); choose a writable folder"
    ):
        lock_output_folder(tmp_path / "f" / "sub")


def test_lock_is_held_by_another_process(tmp_path):
    """flock is per open file description: a child process holding the lock blocks this one."""
    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import sys,time; from genmetrics.data.output.lock import OutputLock; "
        f"l = OutputLock(__import__('pathlib').Path({str(out)!r})); print('held', flush=True); time.sleep(30)"
    )
    with held_by_child(code) as p:
        with pytest.raises(InputError, match=rf"in use by another run \(pid {p.pid} "):
            OutputLock(out)
    time.sleep(0.1)
    OutputLock(out).release()  # the dead process left no stale lock


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def _lock(p: Path):
    from genmetrics.data.output.lock import lock_output_folder

    return lock_output_folder(p.parent)


#: (case id, what it is, where the lock file's link points)
_LINKS: list[tuple[str, str, Callable[[Ctx], Path | str]]] = [
    ("h-link-lock-to-folder", "the lock file is a link to a folder outside", lambda ctx: ctx.outside_dir),
    (
        "h-link-lock-dangling",
        "the lock file is a dangling link to a new file outside",
        lambda ctx: ctx.outside_dir / "new.txt",
    ),
    ("h-link-lock-loop", "the lock file is a link to itself", lambda ctx: LOCK),
]
for _id, _what, _target in _LINKS:
    case(_id, "link", _what)(_link_refused(LOCK, _target, _lock))


test_hostile = HOSTILE.test()
