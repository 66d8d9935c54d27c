"""What MIE says when its trained heads cannot be had, and the check that says it before torch is imported.

No MIE heads are published on a hub: every error about missing heads ends with :data:`TRAIN_HINT` (how to
train them). :func:`precheck` is the ``mie`` card's pre-check (:func:`genmetrics.backbones.precheck.check_metric`):
the command line calls it with the metric's options and reports, in start-up time, what
:class:`~genmetrics.mie.metric.MIEMetric` would after importing torch, transformers and peft.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genmetrics.backbones.precheck import HUB_ID, hub_folder_missing
from genmetrics.backbones.weights import weights_unavailable
from genmetrics.errors import WeightsUnavailableError

__all__ = [
    "CONFIG_NAMES",
    "HEADS_OPTION",
    "RUN_CHECKPOINTS",
    "TRAIN_HINT",
    "heads_unavailable",
    "is_hub_id",
    "local_heads",
    "no_heads_error",
    "no_such_heads",
    "pick_file",
    "precheck",
]

TRAIN_HINT = (
    "None are published on a hub: train a small evaluator on your own preference pairs, "
    "`genmetrics train mie --data pairs.jsonl --out runs/mie --backbone 0.8b` (one MIB pair per line; "
    "`genmetrics train mie --help`), then score with --heads runs/mie (Python: heads='runs/mie'). A checkpoint "
    "folder in the authors' released layout loads the same way."
)
#: how a user points the metric at trained heads
HEADS_OPTION = "--heads DIR (command line) or heads=DIR (Python)"
#: the file that makes a folder an MIE checkpoint (genmetrics' format, the authors' layout)
CONFIG_NAMES = ("mie_config.json", "lens_config.json")
#: the loadable checkpoints of a training run's folder, in order of preference (train_mie's "checkpoint")
RUN_CHECKPOINTS = ("best", "final")


def pick_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    """The first of ``names`` that is a file in ``folder``, or None.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "b.json").write_text("{}")
    ...     pick_file(Path(d), ("a.json", "b.json")).name, pick_file(Path(d), ("a.json",))
    ('b.json', None)
    """
    for n in names:
        if (folder / n).is_file():
            return folder / n
    return None


def local_heads(value: str) -> Path | None:
    """The checkpoint folder that heads given as an existing local path name: the folder itself when it holds
    one of :data:`CONFIG_NAMES`, else a training run's ``best/`` or ``final/``; None when ``value`` is no
    existing path (a hub id, or a folder that does not exist: :func:`precheck` and the loader say which). An
    existing path that holds no checkpoint (a file, an unfinished run, another folder) raises the
    :class:`~genmetrics.errors.WeightsUnavailableError` naming it and the fix.

    >>> local_heads("org/heads") is None
    True
    >>> local_heads(__file__)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: MIE heads '...hints.py': expected a checkpoint folder holding mie_config.json ...
    """
    p = Path(value).expanduser()
    if not p.exists():
        return None
    if p.is_dir() and pick_file(p, CONFIG_NAMES):
        return p
    if p.is_dir():
        for sub in RUN_CHECKPOINTS:
            if pick_file(p / sub, CONFIG_NAMES):
                return p / sub
        steps = sorted((p / "checkpoints").glob("step-*")) if (p / "checkpoints").is_dir() else []
        if steps:
            raise WeightsUnavailableError(
                f"MIE heads {value!r} is an unfinished training run (newest checkpoint {steps[-1].name}, no "
                f"best/ or final/ yet): continue it with `genmetrics train mie ... --out {value} --resume`, "
                "then pass this folder again"
            )
    raise WeightsUnavailableError(
        f"MIE heads {value!r}: expected a checkpoint folder holding mie_config.json (genmetrics' format or the "
        f"authors' layout, also lens_config.json) or a training run's --out folder (with best/ or "
        f"final/). {TRAIN_HINT}"
    )


def no_heads_error() -> WeightsUnavailableError:
    """The error for an ``mie`` metric created without trained heads (it says how to train them).

    >>> str(no_heads_error()).startswith("the mie metric needs trained heads")
    True
    """
    return WeightsUnavailableError(
        "the mie metric needs trained heads (score + diagnostic heads and their trained layers) and none are "
        "bundled. " + TRAIN_HINT
    )


def no_such_heads(value: str) -> WeightsUnavailableError:
    """Heads given as a local path that does not exist.

    >>> print(no_such_heads("./runs/mie"))  # doctest: +ELLIPSIS
    MIE heads './runs/mie': no such folder. None are published on a hub: ...
    """
    return WeightsUnavailableError(f"MIE heads {value!r}: no such folder. {TRAIN_HINT}")


def heads_unavailable(
    value: str, looked: list[str], cause: BaseException | None = None, *, why: str | None = None
) -> WeightsUnavailableError:
    """Heads given as a hub id that no cache holds and the hub did not give.

    >>> e = heads_unavailable("org/heads", ["/home/me/.cache/genmetrics/hf", "the Hugging Face Hub"], why="hub down")
    >>> str(e).startswith("weights 'MIE heads org/heads' are not available (hub down)."), str(e).endswith(TRAIN_HINT)
    (True, True)
    """
    err = weights_unavailable(f"MIE heads {value}", looked, HEADS_OPTION, cause, why=why)
    return WeightsUnavailableError(f"{err} {TRAIN_HINT}")


def is_hub_id(value: str) -> bool:
    """Whether heads that are no existing path are fetched from the hub (``org/name``) rather than reported
    as a missing folder.

    >>> is_hub_id("org/mie-heads"), is_hub_id("./runs/mie"), is_hub_id("runs/a/best")
    (True, False, False)
    """
    return bool(HUB_ID.match(value))


def precheck(options: Mapping[str, Any]) -> None:
    """Raise what ``MIEMetric(**options)`` would for its heads when that is known without loading anything:
    no heads and no built ``model`` (:func:`no_heads_error`; with ``model=`` nothing is loaded), heads at a local path that does not exist
    (:func:`no_such_heads`) or holds no checkpoint (:func:`local_heads`: a file, a folder without
    ``mie_config.json``), a hub id in no cache while downloads are off or the hub cannot be reached
    (:func:`heads_unavailable`). Heads that exist, or a hub that answers, are left to the metric.

    >>> precheck({"heads": "./no/such/run"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: MIE heads './no/such/run': no such folder. ...
    """
    if options.get("model") is not None:
        return  # a built MIEModel: heads are not loaded
    heads = options.get("heads")
    if heads is None:
        raise no_heads_error()
    value = os.fspath(heads)
    if local_heads(value) is not None:  # an existing path that holds no checkpoint raises here
        return
    if not is_hub_id(value):
        raise no_such_heads(value)
    missing = hub_folder_missing(value)
    if missing is not None:
        looked, why = missing
        raise heads_unavailable(value, looked, why=why)
