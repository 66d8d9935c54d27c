"""A full disk (genmetrics.data.output.disk): recognised as an ``OSError`` (ENOSPC, EDQUOT) or in a library's
wrapped message, and turned into one ``DiskFullError`` line naming the disk, its free space, the file, what is
kept and how to continue."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from genmetrics.data.output.disk import (
    DiskFullError,
    describe_disk,
    disk_full_message,
    disk_full_named,
    is_disk_full,
)


@pytest.mark.parametrize(
    "err,full",
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (RuntimeError("I/O error: No space left on device (os error 28)"), True),
        (RuntimeError(f"write failed (os error {errno.ENOSPC})"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (ValueError("no space"), False),
    ],
)
def test_is_disk_full(err, full):
    assert is_disk_full(err) is full


def test_describe_disk_names_the_mount_point_and_its_free_space(tmp_path):
    text = describe_disk(
        tmp_path / "not" / "yet" / "made"
    )  # a path to be created: its existing parent's disk
    mount = Path(text.split(" (")[0])
    assert os.path.ismount(mount) and tmp_path.resolve().is_relative_to(mount)
    free = shutil.disk_usage(mount).free / 2**20
    shown = float(text.split(", ")[-1].split(" MiB free")[0].split("(")[-1])
    assert abs(shown - free) <= 64  # free space moves while the suite runs; the unit and rounding are right


def test_the_message_names_the_file_or_the_folder(tmp_path):
    line = disk_full_message(tmp_path, tmp_path / "a.json", "kept", "then")
    assert (
        line
        == f"no space left on the disk {describe_disk(tmp_path)} while writing {tmp_path / 'a.json'}; kept: then"
    )
    assert f"while writing into {tmp_path};" in disk_full_message(tmp_path, None, "kept", "then")


def test_disk_full_named_rewords_only_a_full_disk(tmp_path):
    with pytest.raises(DiskFullError) as info, disk_full_named(tmp_path, kept="rows are kept", then="rerun"):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", "results.jsonl")
    assert info.value.path == "results.jsonl" and info.value.errno == errno.ENOSPC
    assert isinstance(info.value, OSError) and str(info.value).endswith("results.jsonl; rows are kept: rerun")
    other = OSError(errno.EACCES, "Permission denied")
    with pytest.raises(OSError) as info2, disk_full_named(tmp_path, kept="k", then="t"):
        raise other
    assert info2.value is other
    with pytest.raises(DiskFullError, match="; outer kept: outer then$"):  # an inner one gets the outer words
        with disk_full_named(tmp_path, kept="outer kept", then="outer then"):
            with disk_full_named(tmp_path, kept="inner", then="inner"):
                raise OSError(errno.ENOSPC, "No space left on device", "x.bin")
