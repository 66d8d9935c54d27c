"""Where weights live and what happens when they cannot be had.

Weights are cached under ``GENMETRICS_HOME`` (default ``~/.cache/genmetrics``). Loading follows one
policy: a local path is used as is; a hub id or a pretrained tag is looked up in the cache and
downloaded only when the hub is reachable (``HF_HUB_OFFLINE`` / ``GENMETRICS_OFFLINE`` forbid it).
When nothing works, :class:`~genmetrics.errors.WeightsUnavailableError` names the weights, where it
looked and how to point at local files.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from genmetrics.core.options import env
from genmetrics.errors import InputError, WeightsUnavailableError

if TYPE_CHECKING:  # torch is imported where a checkpoint is read: the offline pre-check imports this module
    import torch

_SAFE_FORMATS = (
    "re-save it as a .safetensors file (safetensors.torch.save_file) or as a plain dict of tensors "
    "(torch.save({name: tensor}))"
)


def genmetrics_home() -> Path:
    """Root of genmetrics' caches: ``$GENMETRICS_HOME`` or ``~/.cache/genmetrics``.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_HOME": "/data/gm"}):
    ...     genmetrics_home().as_posix()
    '/data/gm'
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_HOME": ""}):
    ...     genmetrics_home() == Path.home() / ".cache" / "genmetrics"
    True
    """
    root = env("GENMETRICS_HOME")
    return root if root is not None else Path.home() / ".cache" / "genmetrics"


def offline() -> bool:
    """Whether downloads are off: ``GENMETRICS_OFFLINE``, ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_OFFLINE": "1"}):
    ...     offline()
    True
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_OFFLINE": "0", "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": ""}):
    ...     offline()
    False
    """
    return bool(env("GENMETRICS_OFFLINE", False)) or any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def cause_text(cause: BaseException, limit: int = 300) -> str:
    """``"Type: first line"`` of an underlying error, shortened at a word boundary (never mid-word) with
    `` ...`` when longer than ``limit`` characters.

    >>> cause_text(OSError("404 Client Error\\nmore detail"))
    'OSError: 404 Client Error'
    >>> cause_text(OSError("connection refused by host " * 20), limit=40)
    'OSError: connection refused by host connection ...'
    """
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
    first = " ".join(lines[0].split()) if lines else ""
    if len(first) > limit:
        cut = first[: limit + 1]
        first = (cut[: cut.rfind(" ")] if " " in cut else first[:limit]).rstrip(" ,;:") + " ..."
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__


def download_hint(what: str) -> str:
    """The command that prefetches hub weights ``what`` on a machine with network access (``""`` for a
    local path, which no command can fetch).

    >>> download_hint("facebook/dinov2-base")
    'or run `genmetrics weights download facebook/dinov2-base` on a machine with network access and copy its GENMETRICS_HOME folder here (`genmetrics weights --help`)'
    >>> download_hint("/data/ckpt.safetensors")
    ''
    """
    local = what.startswith(("/", ".", "~", "\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", what))
    if (
        local
        or "/" not in what
        or any(c.isspace() for c in what)
        or what.endswith((".bin", ".pt", ".pth", ".safetensors"))
    ):
        return ""
    return (
        f"or run `genmetrics weights download {shlex.quote(what)}` on a machine with network access and copy "
        "its GENMETRICS_HOME folder here (`genmetrics weights --help`)"
    )


def weights_unavailable(
    what: str,
    looked: list[str] | str,
    option: str,
    cause: BaseException | None = None,
    *,
    why: str | None = None,
) -> WeightsUnavailableError:
    """The error for weights that are not there: what, where it looked, why (the cause's first line, never
    cut mid-word), the option that points at local files and the command that downloads them.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_OFFLINE": "0", "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}):
    ...     print(weights_unavailable("facebook/dinov2-base", ["~/.cache/genmetrics/hf"], "weights=/local/dir"))
    weights 'facebook/dinov2-base' are not available. Looked in: ~/.cache/genmetrics/hf. Fix: pass a local file or folder with weights=/local/dir, set GENMETRICS_HOME to a folder that holds them, or run `genmetrics weights download facebook/dinov2-base` on a machine with network access and copy its GENMETRICS_HOME folder here (`genmetrics weights --help`).
    """
    looked_s = ", ".join(looked) if isinstance(looked, list) else looked
    why = f" ({why})" if why else f" ({cause_text(cause)})" if cause is not None else ""
    mode = " Downloads are disabled (offline mode)." if offline() else ""
    fetch = download_hint(what) or "or download them once on a machine with network access"
    return WeightsUnavailableError(
        f"weights {what!r} are not available{why}. Looked in: {looked_s}.{mode} Fix: pass a local file or folder "
        f"with {option}, set GENMETRICS_HOME to a folder that holds them, {fetch}."
    )


#: how a user points a transformers backbone at a local folder
FIX_OPTION = "backbone= (Python) or --weights (command line)"


def hf_cache_dir() -> Path:
    """Where genmetrics caches transformers / peft downloads: ``genmetrics_home() / "hf"``.

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_HOME": "/data/gm"}):
    ...     hf_cache_dir().as_posix()
    '/data/gm/hf'
    """
    return genmetrics_home() / "hf"


def _install_hint(model_id: str) -> str:
    return (
        f"Fix: pass a local folder with {FIX_OPTION}; or set GENMETRICS_HOME to a folder whose hf/ cache holds "
        f"the weights; or pre-download them on a machine with network access with "
        f"`genmetrics weights download {model_id}` (or `hf download {model_id} --cache-dir {hf_cache_dir()}`) "
        "and copy the folder here (`genmetrics weights --help`)."
    )


def unavailable_error(
    what: str,
    looked: list[str],
    *,
    cause: BaseException | None = None,
    hint: str | None = None,
    why: str | None = None,
) -> WeightsUnavailableError:
    """The error for a model or adapter that cannot be had: what, where it looked, why (``cause``), and
    ``hint`` (default: how to point at local files or pre-download them); ``why`` replaces the cause's text
    (the hub cannot be reached: :func:`genmetrics.backbones.hub.unreachable`).

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_OFFLINE": "1"}):
    ...     e = unavailable_error("runs/a", ["/work/runs/a"], hint="Fix: train an adapter first.")
    >>> print(e)
    weights 'runs/a' are not available. Looked in: /work/runs/a. Downloads are disabled (offline mode: HF_HUB_OFFLINE / GENMETRICS_OFFLINE). Fix: train an adapter first.
    """
    why = f" ({why})" if why else f" ({cause_text(cause)})" if cause is not None else ""
    mode = " Downloads are disabled (offline mode: HF_HUB_OFFLINE / GENMETRICS_OFFLINE)." if offline() else ""
    return WeightsUnavailableError(
        f"weights {what!r} are not available{why}. Looked in: {', '.join(looked)}.{mode} "
        + (hint if hint is not None else _install_hint(what))
    )


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The sha256 of a file, read in chunks (large checkpoints never sit in memory whole).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "w.bin").write_bytes(b"abc")
    ...     sha256_file(Path(d) / "w.bin") == hashlib.sha256(b"abc").hexdigest()
    True
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_hash(path: str | os.PathLike, expected: str | None) -> None:
    """Verify a file's sha256 (prefix match allowed, as open_clip does).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "w.bin").write_bytes(b"abc")
    ...     check_hash(Path(d) / "w.bin", hashlib.sha256(b"abc").hexdigest()[:12])  # a prefix is enough
    ...     check_hash(Path(d) / "w.bin", "00ff")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights file '...w.bin' has sha256 ba7816bf8f01cfea..., expected 00ff...; ...
    """
    if not expected:
        return
    got = sha256_file(path)
    if not got.startswith(expected.lower()):
        raise WeightsUnavailableError(
            f"weights file {str(path)!r} has sha256 {got[:16]}..., expected {expected[:16]}...; "
            "the file is corrupt or a different checkpoint: delete it and download again"
        )


def _unpickler_refusal(err: BaseException) -> str:
    """What torch's restricted unpickler refused, in a few words (its own message suggests turning the
    protection off, which genmetrics never does)."""
    text = str(err)
    named = re.search(r"GLOBAL ([\w.]+)", text)
    if named:
        return f"it refers to {named.group(1)}"
    operand = re.search(r"Unsupported operand (\d+)", text)
    if operand:
        return f"pickle instruction {operand.group(1)} is not allowed"
    return type(err).__name__


def load_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Load a flat ``{name: tensor}`` checkpoint safely: safetensors, or ``torch.load(weights_only=True)``
    (zip or legacy format). A pickle holding anything else (code, objects) or a file that is not a dict of
    tensors is refused with one line naming the file and the safe format; nothing is unpickled with code.

    >>> import tempfile, torch
    >>> from safetensors.torch import save_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_file({"w": torch.ones(2)}, f"{d}/m.safetensors")
    ...     torch.save({"w": torch.zeros(2)}, f"{d}/m.pt")
    ...     load_state_dict(f"{d}/m.safetensors")["w"].tolist(), load_state_dict(f"{d}/m.pt")["w"].tolist()
    ([1.0, 1.0], [0.0, 0.0])
    >>> with tempfile.TemporaryDirectory() as d:
    ...     torch.save({"w": Path("x")}, f"{d}/obj.pt")  # an object, not a tensor
    ...     load_state_dict(f"{d}/obj.pt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: checkpoint '...obj.pt' is a pickle of objects other than tensors (...); genmetrics never unpickles such files (never arbitrary pickles): re-save it ...
    """
    import torch
    from safetensors.torch import load_file

    p = Path(path)
    if not p.exists():
        raise weights_unavailable(str(p), str(p), "a correct path")
    if (
        p.is_dir() or p.stat().st_size == 0
    ):  # torch.load would call them pickles (IsADirectoryError, EOFError)
        what = "a folder, not a weights file" if p.is_dir() else "empty (0 bytes)"
        raise InputError(f"checkpoint {str(p)!r} is {what}; name the weights file itself")
    if p.suffix == ".safetensors":
        try:
            sd = load_file(str(p))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise InputError(
                f"checkpoint {str(p)!r} is corrupt or not a safetensors file ({e}); re-save it"
            ) from None
    else:
        try:
            with warnings.catch_warnings():  # "Detected pickle protocol 4": said below in one line
                warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
                sd = torch.load(str(p), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - pickle, zip and torch errors alike
            raise InputError(
                f"checkpoint {str(p)!r} is a pickle of objects other than tensors ({_unpickler_refusal(e)}); "
                f"genmetrics never unpickles such files (never arbitrary pickles): {_SAFE_FORMATS}"
            ) from None
    if not isinstance(sd, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in sd.items()):
        raise InputError(
            f"checkpoint {str(p)!r} holds {type(sd).__name__}, not a flat dict of named tensors; {_SAFE_FORMATS}"
        )
    for k, v in sd.items():  # weights_only reads these, but they hold no dense real values to copy in
        what = (
            "meta"
            if v.is_meta
            else "sparse"
            if v.layout != torch.strided
            else "complex"
            if v.is_complex()
            else ""
        )
        if what:
            raise InputError(
                f"checkpoint {str(p)!r}: tensor {k!r} is a {what} tensor ({v.layout}, {v.dtype}, {v.device}), "
                f"not dense real weights; {_SAFE_FORMATS}"
            )
    return sd
