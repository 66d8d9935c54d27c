"""Weights that cannot be had, known before a model library is imported.

Importing open_clip or transformers' model code takes seconds (4-9 s of a loaded 2-core machine), and a
command that needs weights imports them before its loader finds out that the weights are missing. When
downloads are off (``GENMETRICS_OFFLINE``, ``HF_HUB_OFFLINE``) or the hub cannot be reached
(:func:`genmetrics.backbones.hub.unreachable`: one TCP connection, once per process), and no cache can hold
the named weights, the loader's answer is already known: :func:`check_weights_available` raises the
:class:`~genmetrics.errors.WeightsUnavailableError` the loader would, with nothing heavy imported. A metric's
own trained weights (MIE's ``heads``, a TPIPS ``adapter``) are judged by its family: the card's ``precheck``
names a function, in a module that imports no torch, that :func:`check_metric` calls with the options
(:func:`hub_folder_missing` answers for a hub id).

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
from typing import TYPE_CHECKING, Any

from genmetrics.backbones.clip_names import CLIP_OPTION

if TYPE_CHECKING:
    from genmetrics.core.registry import MetricCard
    from genmetrics.errors import WeightsUnavailableError

__all__ = [
    "CLIP_OPTION",
    "HF_OPTION",
    "HUB_ID",
    "check_clip_weights",
    "check_metric",
    "check_metric_weights",
    "check_weights_available",
    "has_snapshot",
    "hub_folder_missing",
    "local_weights_folder",
    "looks_like_local_path",
    "missing_folder",
    "requested_weights",
    "weights_kind",
]

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


def looks_like_local_path(s: str) -> bool:
    """Whether the transformers loaders take ``s`` for a local path (absolute, relative with ``./`` or more
    than one ``/``, ``~``, a drive letter, or anything that is no hub id ``org/name``).

    >>> looks_like_local_path("runs/a/final"), looks_like_local_path("facebook/dinov2-base")
    (True, False)
    """
    return (
        s.startswith(("/", "./", "../", "~", "\\"))
        or bool(re.match(r"^[A-Za-z]:[\\/]", s))
        or s.count("/") > 1
        or not HUB_ID.match(s)
    )


def local_weights_folder(value: str, *, marker: str = "config.json") -> Path | None:
    """The local checkpoint folder ``value`` names for a transformers loader (a folder holding ``marker``:
    ``config.json`` for a model, ``adapter_config.json`` for an adapter); None for a hub id that is no local
    path (the caches and the hub decide). A file, a folder without ``marker``, or a path that does not exist
    raise the :class:`~genmetrics.errors.WeightsUnavailableError` naming it and the fix.

    >>> local_weights_folder("facebook/dinov2-base") is None
    True
    >>> local_weights_folder("./no/such/folder")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights './no/such/folder' are not available. ...No such file or folder. ...
    """
    from genmetrics.backbones.weights import FIX_OPTION, unavailable_error
    from genmetrics.core.options import expand_user

    p = expand_user(value, what="weights path")  # local paths first (relative: from the working directory)
    if p.exists():
        if not p.is_dir():
            raise unavailable_error(
                value,
                [str(p)],
                hint=f"Fix: pass the checkpoint *folder* (holding {marker}) with {FIX_OPTION}, not a single file.",
            )
        if not (p / marker).is_file():
            raise unavailable_error(
                value,
                [str(p)],
                hint=f"The folder has no {marker}. Fix: pass the folder that save_pretrained() wrote, with {FIX_OPTION}.",
            )
        return p
    if looks_like_local_path(value):
        raise unavailable_error(
            value,
            [str(p)],
            hint=f"No such file or folder. Fix: pass an existing local folder with {FIX_OPTION}, or a hub id "
            "such as 'Qwen/Qwen3-VL-2B-Instruct'.",
        )
    return None


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
    # a snapshot holding config.json (what the loader looks up first); a folder with no snapshot, or only
    # hub bookkeeping (.no_exist, left by a lookup that found nothing), holds no model
    return [str(p) for p in places], any(has_snapshot(p / name, "config.json") for p in places)


def has_snapshot(folder: Path, marker: str) -> bool:
    """Whether ``folder`` (a Hugging Face cache's ``models--org--name``) has a snapshot holding ``marker`` (a
    folder with no snapshot, or only the ``.no_exist`` a lookup that found nothing leaves, holds no model); a
    folder that cannot be listed counts as having one (the loader decides).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "snapshots" / "abc").mkdir(parents=True)
    ...     empty = has_snapshot(Path(d), "config.json")
    ...     _ = (Path(d) / "snapshots" / "abc" / "config.json").write_text("{}")
    ...     empty, has_snapshot(Path(d), "config.json")
    (False, True)
    """
    try:
        return any((s / marker).exists() for s in (folder / "snapshots").iterdir())
    except FileNotFoundError:
        return False
    except OSError:
        return True


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


def check_clip_weights(weights: str) -> None:
    """:func:`check_weights_available` for open_clip weights as a user spells them, local checkpoints
    included: a path without its architecture is the loader's :class:`~genmetrics.errors.InputError`, a
    ``MODEL:PATH`` whose file does not exist its :class:`~genmetrics.errors.WeightsUnavailableError` (unless a
    backbone provider is installed).

    >>> check_clip_weights("ViT-B-32:/no/such/ckpt.safetensors")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights 'ViT-B-32:/no/such/ckpt.safetensors' are not available (no such file or folder). ...
    """
    from genmetrics.backbones.clip_names import missing_checkpoint, parse_clip_weights
    from genmetrics.backbones.provider import current_provider

    w = parse_clip_weights(weights)
    missing = missing_checkpoint(w) if current_provider() is None else None
    if missing is not None:
        raise missing
    check_weights_available(weights)


def check_metric_weights(default: str | None, factory: str, options: Mapping[str, Any]) -> None:
    """:func:`check_weights_available` for a metric built by ``factory`` (``"module:Class"``) with ``options``,
    its card's ``default`` weights unless ``options`` name others. Only when every option is one the metric
    accepts (read from its source, :mod:`genmetrics.core.static_options`): a misspelt option is reported by
    ``create_metric`` first, as it would be on a machine with network, and a metric that needs trained heads
    (:data:`REQUIRED_OWN_WEIGHTS`) which ``options`` do not give is left to its card's ``precheck``
    (:func:`check_metric`) or ``create_metric``: a missing backbone would only hide what is missing.

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
    weights = requested_weights(default, options)
    family = weights_kind(default) if weights and default and weights_kind(weights) is None else None
    if family == "open_clip":  # a local checkpoint (MODEL:PATH), judged as the loader would
        check_clip_weights(str(weights))
    elif family == "hf":  # a transformers metric given a local path, judged as its loader would
        from genmetrics.backbones.provider import current_provider

        if current_provider() is None:
            local_weights_folder(str(weights))
    if family is None:
        check_weights_available(weights)


def hub_folder_missing(value: str) -> tuple[list[str], str | None] | None:
    """For a hub id ``org/name`` of a trained folder (MIE heads, a TPIPS adapter) that is no local path:
    ``(places looked, why)`` when no cache holds it and it cannot be downloaded (``why``: the hub's reason, None
    when downloads are off); None when the loader decides (a local path, a cached id, a hub that answers).

    >>> import tempfile
    >>> from unittest import mock
    >>> with tempfile.TemporaryDirectory() as home, mock.patch.dict(os.environ, {"GENMETRICS_HOME": home, "GENMETRICS_OFFLINE": "1"}):
    ...     looked, why = hub_folder_missing("org/heads")
    ...     (Path(home) / "hf" / "models--org--heads").mkdir(parents=True)
    ...     looked[1:], why, hub_folder_missing("org/heads"), hub_folder_missing("./runs/a")
    (['the Hugging Face Hub'], None, None, None)
    """
    if not HUB_ID.match(value) or os.path.exists(os.path.expanduser(value)):
        return None
    from genmetrics.backbones import hub
    from genmetrics.backbones.weights import hf_cache_dir, offline

    folder = hf_cache_dir()  # where the loaders download a trained folder (snapshot_download's cache_dir)
    if (folder / ("models--" + value.replace("/", "--"))).exists():
        return None
    looked = [str(folder), "the Hugging Face Hub"]
    if offline():
        return looked, None
    why = hub.unreachable()
    return None if why is None else (looked, why)


def missing_folder(
    value: str, *, what: str, hint: str, marker: str | None = None
) -> WeightsUnavailableError | None:
    """The error for a trained folder (``what``: "TPIPS adapter") named by a path that is no folder, by a
    spelling that is no hub id (``org/name``), or by a folder without ``marker`` (the file the loader reads
    first, when given); None for a folder that holds it or a hub id (the loader decides).

    >>> print(missing_folder("./runs/a", what="TPIPS adapter", hint="Fix: train one."))  # doctest: +ELLIPSIS
    weights 'runs/a' are not available. Looked in: runs/a. ...No such TPIPS adapter folder. Fix: train one.
    >>> missing_folder("org/adapter", what="TPIPS adapter", hint="")  # a hub id
    >>> print(missing_folder(".", what="TPIPS adapter", hint="Fix: train one.", marker="no-such.json"))  # doctest: +ELLIPSIS
    weights '...' are not available. ...The folder has no no-such.json. Fix: train one.
    """
    from genmetrics.backbones.weights import unavailable_error

    p = Path(value).expanduser()
    if p.is_dir():
        if marker is None or (p / marker).is_file():
            return None
        return unavailable_error(str(p), [str(p)], hint=f"The folder has no {marker}. {hint}")
    if p.exists() or value.startswith((".", "/", "~")) or value.count("/") != 1:
        return unavailable_error(str(p), [str(p)], hint=f"No such {what} folder. {hint}")
    return None


def check_metric(card: MetricCard, options: Mapping[str, Any]) -> None:
    """What the metric of ``card`` built with ``options`` would refuse for want of weights, raised before its
    module is imported: first the card's ``precheck`` (``"module:function"``, called with ``options``: the
    family's judgement of its own trained weights, e.g. MIE without heads), then
    :func:`check_metric_weights`. A misspelt option is left to ``create_metric``, as there.

    >>> from genmetrics.core.registry import get_card
    >>> check_metric(get_card("mie"), {"hedas": "runs/mie"})  # misspelt: create_metric names it
    >>> check_metric(get_card("mie"), {})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: the mie metric needs trained heads ...
    """
    if not card.precheck and requested_weights(card.default_weights, options) is None:
        return  # a pixel metric, or a built model passed: nothing to look for, nothing to import
    from genmetrics.core.static_options import static_options

    known = static_options(card.factory)
    if known is None or any(k not in known for k in options):
        return
    if card.precheck:
        _precheck_function(card)(options)
    check_metric_weights(card.default_weights, card.factory, options)


def _precheck_function(card: MetricCard) -> Any:
    """The function a card's ``precheck`` names (``"module:function"``); a name that does not import is the
    metric's card at fault (a plugin's), said as one :class:`PluginError`, not an import traceback.

    >>> import dataclasses
    >>> from genmetrics.core.registry import get_card
    >>> _precheck_function(dataclasses.replace(get_card("psnr"), precheck="nowhere.at_all:check"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.PluginError: metric 'psnr': its card's precheck 'nowhere.at_all:check' cannot be loaded (No module named 'nowhere'); ...
    """
    from genmetrics.errors import PluginError

    module, _, function = card.precheck.partition(":") if card.precheck else ("", "", "")
    try:
        fn = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as e:
        raise PluginError(
            f"metric {card.name!r}: its card's precheck {card.precheck!r} cannot be loaded ({e}); expected "
            "'module:function' naming a function that takes the metric's options. Fix: correct or remove "
            "precheck= in the metric's register_metric call (docs/plugins.md)"
        ) from None
    if not callable(fn):
        raise PluginError(f"metric {card.name!r}: its card's precheck {card.precheck!r} is not a function")
    return fn
