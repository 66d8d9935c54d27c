"""A Ctrl-C held during a checkpoint write goes, once the write is complete, to the SIGINT handler that was in
place, as a held SIGTERM does: a process that ignores Ctrl-C (a background job of a shell script, whose
shell set SIGINT to ignored so that Ctrl-C in the terminal leaves it running) keeps training, and a handler
of the user's runs instead of a KeyboardInterrupt. Before the fix, every held Ctrl-C raised KeyboardInterrupt,
so a Ctrl-C meant for the script's foreground killed the background training when it landed during a
checkpoint write (and only then)."""

from __future__ import annotations

import json
import signal

import pytest

from .test_signals import _interrupt_a_checkpoint_write


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ignore", "user"])
def test_a_held_ctrl_c_goes_to_the_handler_in_place(tmp_path, kind):
    out, gate = tmp_path / "run", tmp_path / "gate"
    rc, err = _interrupt_a_checkpoint_write(gate, 6, ["--sigint", kind, "--out", str(out)], signal.SIGINT)
    assert rc == 0, err[-3000:]  # the run was not stopped: it trained to the end
    assert json.loads((out / "train_result.json").read_text())["steps"] == 12
    assert (gate / "user_handler").exists() == (
        kind == "user"
    )  # the user's handler ran, once the write ended
