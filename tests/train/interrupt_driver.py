"""A training run in its own process whose checkpoint write of step ``--block-step`` waits for the test
(a deterministic slow save: no timing luck), so that the test can send Ctrl-C or SIGTERM while it is written.

Hand-shake through files in ``GATE``: the driver creates ``saving`` when the blocked write starts; every
SIGINT or SIGTERM handler of the process (Python's default SIGINT one and any installed later) first
creates ``signalled``;
the blocked write goes on once ``go`` exists. Exit code 130 when the run ends with KeyboardInterrupt (as the
CLI). ``--cli ARGS...`` runs ``genmetrics ARGS...`` instead of the toy fit. ``--sigint ignore`` starts with
Ctrl-C ignored (a background job of a shell script, ``nohup``-like launchers); ``--sigint user`` installs a
handler of the user's that only creates ``user_handler`` in ``GATE`` (a "stop gracefully" flag).

    python -m tests.train.interrupt_driver GATE --block-step 4 --out OUT
    python -m tests.train.interrupt_driver GATE --block-step 1 --cli train mie --data ... --out OUT
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import safetensors.torch


def _spy_on_sigint(gate: Path) -> None:
    install = signal.signal

    def wrapped(handler):
        if not callable(handler):
            return handler

        def spy(signum, frame):
            (gate / "signalled").touch()
            return handler(signum, frame)

        return spy

    def signal_spy(signum, handler):
        return install(signum, wrapped(handler) if signum in (signal.SIGINT, signal.SIGTERM) else handler)

    signal.signal = signal_spy  # type: ignore[assignment]
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _block_checkpoint_write(gate: Path, step: int) -> None:
    real = safetensors.torch.save_file

    def save_file(tensors, filename, metadata=None):
        if f"step-{step}.tmp" in str(filename) and not (gate / "saving").exists():
            (gate / "saving").touch()
            while not (gate / "go").exists():
                time.sleep(0.01)
        return real(tensors, filename, metadata=metadata)

    safetensors.torch.save_file = save_file  # before genmetrics imports it


def main(argv: list[str]) -> int:
    gate, block_step = Path(argv[0]), int(argv[argv.index("--block-step") + 1])
    _spy_on_sigint(gate)
    _block_checkpoint_write(gate, block_step)
    if "--sigint" in argv:
        kind = argv[argv.index("--sigint") + 1]
        user = lambda signum, frame: (gate / "user_handler").touch()  # noqa: E731
        signal.signal(signal.SIGINT, signal.SIG_IGN if kind == "ignore" else user)
    if "--cli" in argv:
        from genmetrics.cli.main import main as cli

        return cli(argv[argv.index("--cli") + 1 :])
    from genmetrics.train import fit

    from .test_signals import toy_run

    task, data, cfg, val = toy_run(Path(argv[argv.index("--out") + 1]))
    try:
        fit(task, data, cfg, val_examples=val)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
