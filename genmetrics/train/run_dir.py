"""The training run folder: what is in it, whether a run may start there, and the metrics log.

``out_dir/train_config.json`` (what the run uses), ``out_dir/metrics.jsonl`` (one row per optimizer step and
per evaluation), ``out_dir/checkpoints/step-N/`` (accelerate state + ``loop_state.json``), ``out_dir/best/``
(the artifact of the best evaluation), ``out_dir/final/`` (the artifact at the end) and
``out_dir/train_result.json`` (written last: the run is finished).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genmetrics.data.output.atomic import atomic_write_text, open_append
from genmetrics.data.output.disk import DiskFullError, describe_disk, is_disk_full
from genmetrics.data.output.write_rule import destination
from genmetrics.errors import InputError

CHECKPOINTS = "checkpoints"
LOOP_STATE = "loop_state.json"
CONFIG = "train_config.json"
METRICS = "metrics.jsonl"
RESULT = "train_result.json"
BEST, FINAL = "best", "final"
OWN_ENTRIES = (CHECKPOINTS, CONFIG, METRICS, RESULT, BEST, FINAL)
_DAMAGED = "the run folder is damaged: pass overwrite=True (CLI: --overwrite) to start over, or choose another out_dir"


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints (those with a ``loop_state.json``), oldest first.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for step, complete in ((2, True), (10, True), (12, False)):  # step 12 was being written when killed
    ...         (Path(d) / "checkpoints" / f"step-{step}").mkdir(parents=True)
    ...         if complete:
    ...             _ = (Path(d) / "checkpoints" / f"step-{step}" / "loop_state.json").write_text("{}")
    ...     [p.name for p in checkpoints(Path(d))]
    ['step-2', 'step-10']
    """
    root = out / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        name = d.name
        if d.is_dir() and name.startswith("step-") and name[5:].isdigit() and (d / LOOP_STATE).is_file():
            found.append((int(name[5:]), d))
    return [d for _, d in sorted(found)]


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of the run folder; a damaged one (torn, not JSON, not an object) is an error that
    names the file and says how to start over.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "train_config.json").write_text('{"lr": 0.1')  # torn
    ...     read_json(Path(d) / "train_config.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...train_config.json: cannot be read (...); the run folder is damaged: pass overwrite=True ...
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot be read ({e}); {_DAMAGED}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}; {_DAMAGED}")
    return data


def clear(out: Path) -> None:
    """Remove what a previous run of the loop wrote (and nothing else) from ``out``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name in ("metrics.jsonl", "notes.txt"):
    ...         _ = (Path(d) / name).write_text("")
    ...     (Path(d) / "checkpoints").mkdir()
    ...     clear(Path(d))
    ...     sorted(p.name for p in Path(d).iterdir())  # the user's file stays
    ['notes.txt']
    """
    for name in OWN_ENTRIES:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"name: old -> new"`` for every key whose value differs (nested dicts by dotted name).

    >>> changes({"lr": 0.1, "extra": {"lora_r": 16}}, {"lr": 0.2, "extra": {"lora_r": 16, "alpha": 1}})
    ["extra.alpha: '<unset>' -> 1", 'lr: 0.1 -> 0.2']
    """
    out: list[str] = []
    for k in sorted(set(before) | set(now)):
        a, b = before.get(k, "<unset>"), now.get(k, "<unset>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{c}" for c in changes(a, b)]
        elif a != b and k.endswith("fingerprint") and isinstance(a, str) and isinstance(b, str):
            what = "the validation examples" if k.startswith("val") else "the training examples"
            out.append(f"{k}: {a[:12]} -> {b[:12]} ({what} changed)")
        elif a != b:
            out.append(f"{k}: {a!r} -> {b!r}")
    return out


def refuse_changed(out: Path, where: str, before: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse to resume when the settings or data differ from those recorded (every change named).

    >>> refuse_changed(Path("runs/a"), "the checkpoint", {"lr": 0.1}, {"lr": 0.1})  # the same: fine
    >>> refuse_changed(Path("runs/a"), "the checkpoint", {"lr": 0.1}, {"lr": 0.2})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: out_dir 'runs/a': cannot resume: the checkpoint was made with other data or settings (lr: 0.1 -> 0.2). ...
    """
    diff = changes(before, now)
    if diff:
        raise InputError(
            f"out_dir {str(out)!r}: cannot resume: {where} was made with other data or settings ("
            + "; ".join(diff)
            + "). Resume with the same data and settings, pass overwrite=True (CLI: --overwrite) "
            "to start over in this folder, or choose another out_dir"
        )


def read_metrics(out: Path, upto_step: int, *, complete: bool = False) -> list[dict[str, Any]]:
    """Rows of ``metrics.jsonl`` up to ``upto_step``. A torn last line (a crash while appending) is ignored;
    any other line that is not a JSON row is refused with ``metrics.jsonl:LINE``. With ``complete=True`` the
    rows of kind "train" must be the steps 1..``upto_step`` (a resume's history equals the run's).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     rewrite_metrics(Path(d), [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}])
    ...     append_metrics(Path(d), {"step": 3, "loss": 1.2})
    ...     [r["step"] for r in read_metrics(Path(d), upto_step=2)]  # rows after a checkpoint are dropped
    [1, 2]
    """
    p = out / METRICS
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines() if p.is_file() else []
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not (isinstance(row, dict) and isinstance(row.get("step"), int)):
            if number == len(lines):
                break  # torn by a crash while it was appended
            raise InputError(f"{p}:{number}: not a metrics row (a JSON object with a 'step'); {_DAMAGED}")
        if row["step"] <= upto_step:
            rows.append(row)
    steps = [r["step"] for r in rows if r.get("kind") == "train"]
    if complete and steps != list(range(1, upto_step + 1)):
        raise InputError(
            f"{p}: holds the train rows of {len(steps)} step(s), the checkpoint was made after {upto_step}; "
            f"{_DAMAGED}"
        )
    return rows


def rewrite_metrics(out: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``metrics.jsonl`` with ``rows`` atomically (on resume: the rows up to the checkpoint).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     rewrite_metrics(Path(d), [{"step": 1}])
    ...     (Path(d) / "metrics.jsonl").read_text()
    '{"step": 1}\\n'
    """
    atomic_write_text(out / METRICS, "".join(json.dumps(r) + "\n" for r in rows))


def append_metrics(out: Path, row: dict[str, Any]) -> None:
    """Append one row to ``metrics.jsonl`` and flush it (a crash loses at most the row being written).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     append_metrics(Path(d), {"step": 1})
    ...     append_metrics(Path(d), {"step": 2})
    ...     len(read_metrics(Path(d), upto_step=10))
    2
    """
    with open_append(out / METRICS, root=out) as f:  # the write rule (genmetrics/data/output/)
        f.write(json.dumps(row) + "\n")
        f.flush()


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final`` (replacing it); a crash leaves one or the other whole.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name, text in (("final", "old"), ("final.tmp", "new")):
    ...         (Path(d) / name).mkdir()
    ...         _ = (Path(d) / name / "w.txt").write_text(text)
    ...     replace_dir(Path(d) / "final.tmp", Path(d) / "final")
    ...     (Path(d) / "final" / "w.txt").read_text(), sorted(p.name for p in Path(d).iterdir())
    ('new', ['final'])
    """
    old = destination(final.with_name(final.name + ".old"))  # the write rule: neither may be a link
    final = destination(final)  # checked before the rename: a planted link is never moved or followed
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    tmp.rename(destination(final))
    if old.exists():
        shutil.rmtree(old)


@contextlib.contextmanager
def writing(out: Path, path: Path) -> Iterator[None]:
    """Turn a full disk while ``path`` is written into one :class:`DiskFullError` naming the disk and the
    path, and saying that finished work (the newest complete checkpoint) is kept.

    >>> import errno, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with writing(Path(d), Path(d) / "metrics.jsonl"):
    ...         raise OSError(errno.ENOSPC, "No space left on device")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.data.output.disk.DiskFullError: no space left on the disk ... while writing .../metrics.jsonl; ...
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001 - OSError and the errors libraries wrap it in
        if not is_disk_full(e):
            raise
        done = checkpoints(out)
        kept = (
            f"the newest complete checkpoint, {done[-1]}, is kept"
            if done
            else "no checkpoint was finished yet"
        )
        raise DiskFullError(
            f"no space left on the disk {describe_disk(out)} while writing {path}; {kept}: free space (or "
            "move the run folder to a larger disk) and continue with resume=True (CLI: --resume)"
        ) from None
