"""A resume with other data or settings is refused with one message naming every change; a finished run is
never overwritten without overwrite=True; an unfinished one is not silently restarted; bad options name
themselves; train_config.json records what the run used."""

from __future__ import annotations

import json

import pytest

from genmetrics.errors import InputError
from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data


def _cfg(out, **kw):
    base = dict(
        out_dir=out, lr=0.05, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0.0, seed=3, progress=False
    )
    base.update(kw)
    return TrainLoopConfig(**base)


@pytest.fixture
def killed(tmp_path):
    """An unfinished run: killed in step 3 after the end-of-epoch checkpoint at step 2."""
    with pytest.raises(KeyboardInterrupt):
        fit(Toy(kill_at=3), make_data(8), _cfg(tmp_path / "run", extra={"head": "mlp"}))
    return tmp_path / "run"


def test_resume_with_other_settings_or_data_is_refused(killed):
    with pytest.raises(InputError) as e:
        fit(Toy(), make_data(8), _cfg(killed, resume=True, lr=0.1, extra={"head": "mlp"}))
    msg = str(e.value)
    assert "lr: 0.05 -> 0.1" in msg and "step-2" in msg and "overwrite=True" in msg and "--overwrite" in msg
    assert "data_fingerprint" not in msg and "head" not in msg

    with pytest.raises(
        InputError
    ) as e:  # other data (same size) and another family option: one message, both
        fit(Toy(), make_data(8, seed=5), _cfg(killed, resume=True, extra={"head": "linear"}))
    msg = str(e.value)
    assert "extra.head: 'mlp' -> 'linear'" in msg and "lr" not in msg.split("(", 1)[1]
    assert (
        "data_fingerprint: " in msg
        and "(the training examples changed)" in msg
        and "val_fingerprint" not in msg
    )

    with pytest.raises(InputError, match=r"batch_size: 4 -> 2.*grad_accum: 1 -> 2"):
        fit(Toy(), make_data(8), _cfg(killed, resume=True, batch_size=2, grad_accum=2, extra={"head": "mlp"}))
    # the refused attempts changed nothing: the same settings still resume, and the record is what was used
    res = fit(Toy(), make_data(8), _cfg(killed, resume=True, extra={"head": "mlp"}, save_every=1))
    assert res.resumed_from.name == "step-2" and res.steps == 4
    rec = json.loads((killed / "train_config.json").read_text())
    assert rec["settings"]["lr"] == 0.05 and rec["settings"]["extra"] == {"head": "mlp"}
    assert rec["options"]["save_every"] == 1  # options that do not change the numbers may change on resume


def test_unfinished_run_is_not_restarted_silently(killed):
    with pytest.raises(InputError, match=r"unfinished run \(newest checkpoint step-2\).*resume=True"):
        fit(Toy(), make_data(8), _cfg(killed, extra={"head": "mlp"}))
    res = fit(Toy(), make_data(8), _cfg(killed, overwrite=True, lr=0.2))
    assert res.resumed_from is None and res.steps == 4 and res.history[0]["step"] == 1
    assert json.loads((killed / "train_config.json").read_text())["settings"]["lr"] == 0.2


def test_finished_run_is_never_overwritten(tmp_path):
    out = tmp_path / "done"
    first = fit(Toy(), make_data(8), _cfg(out))
    final = (out / "final" / "trainable.safetensors").read_bytes()
    with pytest.raises(InputError, match="finished run.*overwrite=True"):
        fit(Toy(init_seed=4), make_data(8), _cfg(out))
    with pytest.raises(InputError, match="lr: 0.05 -> 0.01"):  # resume of a finished run with other settings
        fit(Toy(init_seed=4), make_data(8), _cfg(out, resume=True, lr=0.01))
    assert (out / "final" / "trainable.safetensors").read_bytes() == final
    again = fit(Toy(init_seed=4), make_data(8), _cfg(out, resume=True))  # nothing left to do
    assert again.module is None and again.steps == first.steps and again.history == first.history
    assert (out / "final" / "trainable.safetensors").read_bytes() == final
    redo = fit(Toy(init_seed=4), make_data(8), _cfg(out, overwrite=True))
    assert redo.module is not None and (out / "final" / "trainable.safetensors").read_bytes() != final


@pytest.mark.parametrize(
    "opt,value,match",
    [
        ("lr", -1.0, "option lr: expected a finite number in"),
        ("lr", "fast", "option lr: expected .* got the text 'fast'"),
        ("scheduler", "cosin", "did you mean 'cosine'"),
        ("warmup_ratio", 1.0, "option warmup_ratio"),
        ("grad_accum", 0, "option grad_accum: expected an integer in \\[1"),
        ("mixed_precision", "fp8", "option mixed_precision"),
    ],
)
def test_bad_options_name_themselves(tmp_path, opt, value, match):
    with pytest.raises(InputError, match=match):
        fit(Toy(), make_data(8), _cfg(tmp_path / "x", **{opt: value}))
    assert not (tmp_path / "x").exists()


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="early_stopping_patience needs validation examples"):
        fit(Toy(), make_data(8), _cfg(tmp_path / "a", early_stopping_patience=2))
    with pytest.raises(InputError, match="train_examples: the list of examples is empty"):
        fit(Toy(), [], _cfg(tmp_path / "b"))
    with pytest.raises(InputError, match=r"metric_for_best='acc' is not among .*\['loss'\]"):
        fit(Toy(), make_data(8), _cfg(tmp_path / "c", metric_for_best="acc"), val_examples=make_data(4))
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        fit(Toy(), make_data(8), _cfg(tmp_path / "f"))
