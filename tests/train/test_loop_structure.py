"""The loop's structure holds: small named steps, no function-level imports, accelerate's
state left clean by public calls."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from accelerate import Accelerator
from accelerate.state import GradientState

from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data

TRAIN = Path(__file__).resolve().parents[2] / "genmetrics" / "train"
MAX_BODY_LINES = 45  # the longest body today is TrainLoopConfig.checked (one check per option)


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_functions_are_small_and_import_nothing():
    too_long, lazy = [], []
    for path in sorted(TRAIN.glob("*.py")):
        for fn in _functions(path):
            first = fn.body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
            start = first.end_lineno + 1 if has_doc and len(fn.body) > 1 else first.lineno
            if fn.end_lineno - start + 1 > MAX_BODY_LINES:
                too_long.append(f"{path.name}:{fn.name}")
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(fn)):
                lazy.append(f"{path.name}:{fn.name}")
    assert not too_long, f"functions over {MAX_BODY_LINES} lines: {too_long}"
    assert not lazy, f"function-level imports: {lazy}"


@pytest.mark.parametrize("kill_at", [None, 3])
def test_a_fit_leaves_no_data_loader_registered(tmp_path, monkeypatch, kill_at):
    """Finished at an epoch end or interrupted mid-epoch, a fit unregisters its loader through the loader's
    public end() (accelerate's gradient state holds loaders weakly: the test keeps them alive, as a
    traceback or a notebook would), so the next fit needs no reset of accelerate's gradient state."""
    kept = []
    prepare = Accelerator.prepare_data_loader

    def keep(self, *args, **kwargs):
        kept.append(prepare(self, *args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(Accelerator, "prepare_data_loader", keep)
    cfg = TrainLoopConfig(out_dir=tmp_path / "o", lr=0.05, epochs=1, batch_size=2, progress=False)
    if kill_at is None:
        fit(Toy(), make_data(8), cfg)
    else:
        with pytest.raises(KeyboardInterrupt):
            fit(Toy(kill_at=kill_at), make_data(8), cfg)
    assert len(kept) == 1 and not GradientState().in_dataloader
