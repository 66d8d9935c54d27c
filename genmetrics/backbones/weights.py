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
from pathlib import Path

from genmetrics.errors import WeightsUnavailableError
from genmetrics.options import env


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


def weights_unavailable(
    what: str, looked: list[str] | str, option: str, cause: BaseException | None = None
) -> WeightsUnavailableError:
    """The error for weights that are not there: what, where it looked, and the option that points at them.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_OFFLINE": "0", "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}):
    ...     print(weights_unavailable("facebook/dinov2-base", ["~/.cache/genmetrics/hf"], "weights=/local/dir"))
    weights 'facebook/dinov2-base' are not available. Looked in: ~/.cache/genmetrics/hf. Fix: pass a local file or folder with weights=/local/dir, set GENMETRICS_HOME to a folder that holds them, or download them once on a machine with network access.
    """
    looked_s = ", ".join(looked) if isinstance(looked, list) else looked
    why = f" ({type(cause).__name__}: {str(cause).splitlines()[0][:200]})" if cause is not None else ""
    mode = " Downloads are disabled (offline mode)." if offline() else ""
    return WeightsUnavailableError(
        f"weights {what!r} are not available{why}. Looked in: {looked_s}.{mode} Fix: pass a local file or folder "
        f"with {option}, set GENMETRICS_HOME to a folder that holds them, or download them once on a machine "
        "with network access."
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


def load_state_dict(path: str | os.PathLike) -> dict:
    """Load a checkpoint safely: safetensors, or ``torch.load(weights_only=True)``; pickles are refused.

    >>> import tempfile, torch
    >>> from safetensors.torch import save_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_file({"w": torch.ones(2)}, f"{d}/m.safetensors")
    ...     torch.save({"w": torch.zeros(2)}, f"{d}/m.pt")
    ...     load_state_dict(f"{d}/m.safetensors")["w"].tolist(), load_state_dict(f"{d}/m.pt")["w"].tolist()
    ([1.0, 1.0], [0.0, 0.0])
    """
    import torch

    p = Path(path)
    if not p.exists():
        raise weights_unavailable(str(p), str(p), "a correct path")
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(p))
        except Exception as e:  # noqa: BLE001
            raise WeightsUnavailableError(
                f"checkpoint {str(p)!r} is corrupt or not a safetensors file ({e}); re-save it"
            ) from None
    try:
        return torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise WeightsUnavailableError(
            f"checkpoint {str(p)!r} could not be loaded safely ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
            "genmetrics loads only safetensors or plain tensor checkpoints (torch.load(weights_only=True)), never "
            "arbitrary pickles; re-save it with safetensors.torch.save_file"
        ) from None
