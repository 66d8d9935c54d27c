"""A finished run's ``train_result.json`` that is valid JSON but holds values of the wrong type: a resume
names the file and the key (InputError, CLI exit 2), never an AttributeError / TypeError from inside the
loop (the CLI printed a traceback for those: it maps only InputError / ValueError / OSError to a line)."""

from __future__ import annotations

import json
import math

import pytest

from genmetrics.errors import InputError
from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data


def _cfg(out, **kw):
    base = dict(out_dir=out, lr=0.05, epochs=1, batch_size=4, grad_accum=1, warmup_ratio=0.0, progress=False)
    return TrainLoopConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    fit(Toy(), make_data(8), _cfg(out))
    return out, json.loads((out / "train_result.json").read_text())


BAD = {
    "settings": [[], "a JSON object"],
    "steps": ["2", [2], -1, True, 2.5, None],
    "best_metric": ["0.1", [0.1], True],
    "best_step": ["1", -1, 1.5],
    "stopped_early": ["no", 0, None],
    "epochs_started": ["1", [1], -1],
}
CASES = [(key, value) for key, values in BAD.items() for value in values]


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v!r}" for k, v in CASES])
def test_a_result_of_the_wrong_type_is_named(finished, tmp_path, key, value):
    out, good = finished
    run = tmp_path / "run"
    run.mkdir()
    for entry in out.iterdir():  # the result file only is replaced; the rest is read as it is
        if entry.is_file() and entry.name != "train_result.json":
            (run / entry.name).write_bytes(entry.read_bytes())
    (run / "train_result.json").write_text(json.dumps({**good, key: value}))
    with pytest.raises(InputError) as e:
        fit(Toy(), make_data(8), _cfg(run, resume=True))
    msg = str(e.value)
    assert "train_result.json" in msg and repr(key) in msg and "overwrite=True" in msg


def test_the_good_result_still_resumes(finished, tmp_path):
    """The control of the cases above: the same copy with the file as written resumes to the finished run."""
    out, good = finished
    run = tmp_path / "run"
    run.mkdir()
    for entry in out.iterdir():
        if entry.is_file():
            (run / entry.name).write_bytes(entry.read_bytes())
    res = fit(Toy(), make_data(8), _cfg(run, resume=True))
    assert res.steps == good["steps"] == 2 and res.module is None  # nothing trained: the recorded result
    assert res.best_metric is None or math.isfinite(res.best_metric)


@pytest.mark.parametrize("planted", ["notes.txt", "x\udcff.json", "a_folder"])
def test_a_planted_entry_in_a_checkpoint_is_named_in_one_readable_line(tmp_path, planted):
    """A stray file (also one whose name is not UTF-8) or folder in a checkpoint stops the resume with a
    sentence that names it (it read "a file that is not part in a checkpoint")."""
    from genmetrics.train.checkpoint import check_folder, state_files

    for name in state_files(1, False):
        (tmp_path / name).write_text("")
    (tmp_path / planted).mkdir() if planted == "a_folder" else (tmp_path / planted).write_text("")
    with pytest.raises(InputError) as e:
        check_folder(tmp_path, 1, False)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / planted}: an unexpected file in a checkpoint;") and "\n" not in msg
