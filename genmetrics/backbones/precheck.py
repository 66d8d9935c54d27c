"""Weights that cannot be had, known before a model library is imported.

Importing open_clip or transformers' model code takes seconds (4-9 s of a loaded 2-core machine), and a
command that needs weights imports them before its loader finds out that the weights are missing. When
downloads are off (``GENMETRICS_OFFLINE``, ``HF_HUB_OFFLINE``) or the hub cannot be reached
(:func:`genmetrics.backbones.hub.unreachable`: one TCP connection, once per process), and no cache can hold
the named weights, the loader's answer is already known: :func:`check_weights_available` raises the
:class:`~genmetrics.errors.WeightsUnavailableError` the loader would, with nothing heavy imported.

It is a shortcut, never a second opinion: whenever a cache might hold the weights (any file in the
open_clip cache; the model's folder in a Hugging Face cache), the hub answers, a backbone provider is
installed, or the spelling is a local path or cannot be judged, it returns and the loader decides as before.

Nothing here imports torch, open_clip or transformers.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CLIP_OPTION",
    "HF_OPTION",
    "HUB_ID",
    "check_metric_weights",
    "check_weights_available",
    "requested_weights",
    "weights_kind",
]

#: how a user points an open_clip metric at local weights
CLIP_OPTION = "--weights MODEL/TAG or MODEL:/path/ckpt.safetensors (command line), backbone=... (Python)"
#: how a user points a transformers metric at local weights
HF_OPTION = "--weights /local/dir (command line) or weights=/local/dir (Python)"
#: options that hand a metric a model already built: no weights are loaded by name
BUILT_MODEL_OPTIONS = ("backbone", "model")
#: options that may change which weights load (an adapter or heads folder names its own base model): the
#: loader decides
OWN_WEIGHTS_OPTIONS = ("adapter", "heads")
#: options a metric cannot score without unless a built model is passed (MIE's trained heads, none of which
#: is published): without them ``create_metric`` names what is missing and how to train it, which a missing
#: backbone would only hide
REQUIRED_OWN_WEIGHTS = ("heads",)

#: a Hugging Face model id, ``org/name``
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def requested_weights(default: str | None, options: Mapping[str, Any]) -> str | None:
    """The weights a metric built with ``options`` loads by name: ``options["weights"]`` or the card's
    ``default``; ``None`` when a built model is passed (``backbone=``, ``model=``).

    >>> requested_weights("facebook/dinov2-base", {}), requested_weights("a/b", {"weights": "c/d"})
    ('facebook/dinov2-base', 'c/d')
    >>> requested_weights("a/b", {"backbone": object()}) is None
    True
    """
    if any(options.get(k) is not None for k in BUILT_MODEL_OPTIONS):
        return None
    w = options.get("weights") or default
    return str(w) if w else None


def _open_clip_configs() -> Path | None:
    """open_clip's folder of model configurations, found without importing open_clip."""
    try:
        spec = importlib.util.find_spec("open_clip")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model_configs"


def weights_kind(weights: str) -> str | None:
    """``"open_clip"`` (``MODEL/TAG`` of an open_clip model, ``hf-hub:ID``), ``"hf"`` (a Hugging Face model
    id ``org/name``), or ``None`` for a local path or a spelling this module does not judge.

    >>> weights_kind("ViT-B-32-quickgelu/openai"), weights_kind("facebook/dinov2-base")
    ('open_clip', 'hf')
    >>> weights_kind("ViT-B-32:/ckpt/model.safetensors"), weights_kind("./runs/a"), weights_kind("/abs/dir")
    (None, None, None)
    """
    if weights.startswith("hf-hub:"):
        return "open_clip"
    if weights.startswith(("/", ".", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", weights) or ":" in weights:
        return None
    if not HUB_ID.match(weights) or os.path.exists(weights):
        return None
    configs = _open_clip_configs()
    if configs is not None and (configs / f"{weights.split('/', 1)[0]}.json").is_file():
        return "open_clip"
    return "hf"


def _raise(e: OSError) -> None:
    raise e


def _holds_a_file(folder: Path) -> bool:
    """Whether ``folder`` holds any file but a ``.lock`` at any depth (stops at the first). A folder that cannot be listed
    (no read permission: the loader may still open the files it names) counts as holding one."""
    try:
        for _root, _dirs, files in os.walk(folder, onerror=_raise):  # os.walk skips unlistable folders
            if any(not f.endswith(".lock") for f in files):  # a lock left by a download holds no weights
                return True
    except FileNotFoundError:
        return False  # no such folder: nothing in it
    except OSError:
        return True  # cannot tell: the loader decides
    return False


def _caches(kind: str, weights: str) -> tuple[list[str], bool]:
    """``(places the loader looks, whether one of them may hold weights)``."""
    from genmetrics.backbones.weights import genmetrics_home

    if kind == "open_clip":
        folder = genmetrics_home() / "open_clip"
        return [str(folder)], _holds_a_file(folder)
    from huggingface_hub.constants import HF_HUB_CACHE

    name = "models--" + weights.replace("/", "--")
    places = [genmetrics_home() / "hf", Path(HF_HUB_CACHE)]
    return [str(p) for p in places], any((p / name).exists() for p in places)


def check_weights_available(weights: str | None) -> None:
    """Raise :class:`~genmetrics.errors.WeightsUnavailableError` when ``weights`` (a hub id or open_clip
    ``MODEL/TAG``) are in no cache and cannot be downloaded (downloads off, or the hub unreachable); return
    otherwise (the loader then loads, downloads or fails as it would have).

    >>> import tempfile
    >>> from unittest import mock
    >>> with tempfile.TemporaryDirectory() as home, mock.patch.dict(os.environ, {"GENMETRICS_HOME": home, "GENMETRICS_OFFLINE": "1"}):
    ...     check_weights_available("ViT-B-32-quickgelu/openai")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights 'ViT-B-32-quickgelu/openai' are not available. Looked in: .../open_clip. Downloads are disabled (offline mode). ...
    """
    if not weights:
        return
    from genmetrics.backbones.provider import current_provider

    if current_provider() is not None:
        return
    kind = weights_kind(weights)
    if kind is None:
        return
    looked, maybe = _caches(kind, weights)
    if maybe:
        return
    from genmetrics.backbones import hub
    from genmetrics.backbones.weights import offline, weights_unavailable

    why = None
    if not offline():
        why = hub.unreachable()
        if why is None:
            return
    option = CLIP_OPTION if kind == "open_clip" else HF_OPTION
    raise weights_unavailable(weights, looked, option, why=why)


def check_metric_weights(default: str | None, factory: str, options: Mapping[str, Any]) -> None:
    """:func:`check_weights_available` for a metric built by ``factory`` (``"module:Class"``) with ``options``,
    its card's ``default`` weights unless ``options`` name others. Only when every option is one the metric
    accepts (read from its source, :mod:`genmetrics.core.static_options`): a misspelt option is reported by
    ``create_metric`` first, as it would be on a machine with network, and so is a metric that needs trained
    heads (:data:`REQUIRED_OWN_WEIGHTS`) which ``options`` do not give.

    >>> check_metric_weights("ViT-B-32-quickgelu/openai", "genmetrics.baselines.embedding:CLIPImageSimilarity", {"wieghts": "x"})
    """
    if requested_weights(default, options) is None:
        return  # no weights by name (a pixel metric, or a built model passed): nothing to look for
    from genmetrics.core.static_options import static_options

    known = static_options(factory)
    if known is None or any(k not in known for k in options):
        return
    if any(options.get(k) is not None for k in OWN_WEIGHTS_OPTIONS):
        return
    if any(k in known for k in REQUIRED_OWN_WEIGHTS):
        return  # none given (above): create_metric says so, unless a built model is passed
    check_weights_available(requested_weights(default, options))
