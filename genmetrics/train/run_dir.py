"""The training run folder: what is in it, whether a run may start there, and the metrics log.

``out_dir/train_config.json`` (what the run uses), ``out_dir/metrics.jsonl`` (one row per optimizer step and
per evaluation), ``out_dir/checkpoints/step-N/`` (accelerate state + ``loop_state.json``), ``out_dir/best/``
(the artifact of the best evaluation), ``out_dir/final/`` (the artifact at the end) and
``out_dir/train_result.json`` (written last: the run is finished).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from genmetrics.errors import InputError

CHECKPOINTS = "checkpoints"
LOOP_STATE = "loop_state.json"
CONFIG = "train_config.json"
METRICS = "metrics.jsonl"
RESULT = "train_result.json"
BEST, FINAL = "best", "final"
OWN_ENTRIES = (CHECKPOINTS, CONFIG, METRICS, RESULT, BEST, FINAL)


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints (those with a ``loop_state.json``), oldest first."""
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
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot be read ({e}); the run folder is damaged: pass overwrite=True (CLI: "
                         "--overwrite) to start over, or choose another out_dir") from None


def clear(out: Path) -> None:
    """Remove what a previous run of the loop wrote (and nothing else) from ``out``."""
    for name in OWN_ENTRIES:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"name: old -> new"`` for every key whose value differs (nested dicts by dotted name)."""
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
    diff = changes(before, now)
    if diff:
        raise InputError(
            f"out_dir {str(out)!r}: cannot resume: {where} was made with other data or settings ("
            + "; ".join(diff) + "). Resume with the same data and settings, pass overwrite=True (CLI: --overwrite) "
            "to start over in this folder, or choose another out_dir")


def read_metrics(out: Path, upto_step: int) -> list[dict[str, Any]]:
    """Rows of ``metrics.jsonl`` up to ``upto_step`` (a torn last line is ignored)."""
    p = out / METRICS
    if not p.is_file():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= upto_step:
            rows.append(row)
    return rows


def rewrite_metrics(out: Path, rows: list[dict[str, Any]]) -> None:
    from genmetrics.data.results import atomic_write_text

    atomic_write_text(out / METRICS, "".join(json.dumps(r) + "\n" for r in rows))


def append_metrics(out: Path, row: dict[str, Any]) -> None:
    with open(out / METRICS, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final`` (replacing it); a crash leaves one or the other whole."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)
