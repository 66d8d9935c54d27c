"""open_clip loading with genmetrics' weights policy, and the one import place for the open_clip helpers.

OpenAI weights were trained with QuickGELU: their tags map to the ``-quickgelu`` configs, otherwise the
activations are silently wrong. Each weights record carries its preprocessing (open_clip's own).

The helpers live in modules with one job each and are re-exported here (the names docs and DESIGN use):
:mod:`~genmetrics.backbones.clip_preprocess` (``clip_image_batch``, ``clip_preprocess_cfg``),
:mod:`~genmetrics.backbones.clip_tokens` (``tokenize``, ``trim_padding``),
:mod:`~genmetrics.backbones.clip_text` (``encode_text_ids``, ``TextEmbeddingCache``),
:mod:`~genmetrics.backbones.clip_vision` (``encode_image``), :mod:`~genmetrics.accel.clip_packed`
(``PackedBlock``, ``packed_vision_blocks``, ``release_packed_weights``).
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import open_clip
import torch

from genmetrics.accel.clip_packed import PackedBlock, packed_vision_blocks, release_packed_weights
from genmetrics.backbones.clip_names import (
    DEFAULT_CLIP,
    ClipWeights,
    is_local_checkpoint,
    missing_checkpoint,
    parse_clip_weights,
)
from genmetrics.backbones.clip_preprocess import (
    OPENAI_MEAN,
    OPENAI_STD,
    clip_image_batch,
    clip_preprocess_cfg,
)
from genmetrics.backbones.clip_text import TextEmbeddingCache, encode_text_ids
from genmetrics.backbones.clip_tokens import tokenize, trim_padding
from genmetrics.backbones.clip_vision import encode_image
from genmetrics.backbones.hub import hub_calls
from genmetrics.backbones.precheck import CLIP_OPTION
from genmetrics.backbones.provider import provide
from genmetrics.backbones.weights import genmetrics_home, offline, weights_unavailable
from genmetrics.errors import InputError

__all__ = [
    "DEFAULT_CLIP",
    "OPENAI_MEAN",
    "OPENAI_STD",
    "ClipWeights",
    "PackedBlock",
    "TextEmbeddingCache",
    "clip_image_batch",
    "clip_preprocess_cfg",
    "encode_image",
    "encode_text_ids",
    "check_finite_weights",
    "check_weights_file",
    "load_open_clip",
    "packed_vision_blocks",
    "parse_clip_weights",
    "release_packed_weights",
    "tokenize",
    "trim_padding",
]


#: the weight files genmetrics loads; anything else is refused before a byte of it is interpreted
SAFE_WEIGHT_FORMATS = (
    "safetensors (.safetensors), or a zip torch file written by torch.save that torch.load(weights_only=True) "
    "reads (.pt / .pth / .bin)"
)


def check_weights_file(path: str | os.PathLike) -> str:
    """The format of a local open_clip weights file, ``"safetensors"`` or ``"zip"`` (torch's zip format), read
    from its first bytes; anything else (a legacy or raw pickle, a text file) and a suffix that does not
    match the content are refused with an :class:`~genmetrics.errors.InputError` naming the file and the
    safe formats. Nothing in the file is unpickled here.

    >>> import pickle, tempfile
    >>> from safetensors.torch import save_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_file({"w": torch.zeros(2)}, f"{d}/ok.safetensors")
    ...     _ = Path(f"{d}/old.pt").write_bytes(pickle.dumps({"w": [0.0]}))
    ...     fmt = check_weights_file(f"{d}/ok.safetensors")
    ...     check_weights_file(f"{d}/old.pt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: --weights .../old.pt: a pickle ..., not a safe weights file...
    >>> fmt
    'safetensors'
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise InputError(f"--weights {str(p)!r}: cannot read the file ({type(e).__name__}: {e})") from None
    if head[:4] == b"PK\x03\x04":
        fmt = "zip"
    elif len(head) > 8 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < (1 << 30):
        fmt = "safetensors"  # a little-endian u64 header length, then the JSON header
    else:
        kind = "a pickle (legacy torch.save or raw pickle)" if head[:1] == b"\x80" else "of an unknown format"
        raise InputError(
            f"--weights {str(p)}: {kind}, not a safe weights file: genmetrics never unpickles a file (a pickle "
            f"can run code). Expected {SAFE_WEIGHT_FORMATS}. Convert it where you trust it, e.g. "
            "safetensors.torch.save_file(state_dict, 'model.safetensors')"
        )
    if (fmt == "safetensors") != (p.suffix == ".safetensors"):
        raise InputError(
            f"--weights {str(p)}: the file holds {fmt} data but is named {p.suffix or 'without a suffix'}; "
            f"rename it to {'.safetensors' if fmt == 'safetensors' else '.pt'} (open_clip picks the reader by "
            "the suffix)"
        )
    return fmt


def check_finite_weights(model: Any, what: str) -> None:
    """Refuse a model whose loaded floating-point tensors (its ``state_dict``: parameters and persistent
    buffers; not derived buffers such as a causal mask, which holds ``-inf`` by design) hold NaN or inf,
    naming ``what`` (the weights) and the first tensors that do (:class:`~genmetrics.errors.InputError`).

    >>> lin = torch.nn.Linear(2, 2)
    >>> with torch.no_grad():
    ...     _ = lin.bias.fill_(float("nan"))
    >>> check_finite_weights(lin, "w.safetensors")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: --weights w.safetensors: tensor 'bias' holds 2 NaN/inf values; the file is damaged or was tampered with: use intact weights
    """
    bad = []
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                bad.append(f"tensor {name!r} holds {int((~torch.isfinite(t)).sum())} NaN/inf values")
    if bad:
        more = f" (and {len(bad) - 2} more tensors)" if len(bad) > 2 else ""
        raise InputError(
            f"--weights {what}: {'; '.join(bad[:2])}{more}; the file is damaged or was tampered with: use "
            "intact weights"
        )


_CLIP_OPTION = CLIP_OPTION


def _download_url(w: ClipWeights) -> str | None:
    """Where open_clip would download ``w`` from: the hub (``None``: :func:`~genmetrics.backbones.hub.endpoint`)
    or the URL of a weight with no hub copy."""
    if w.pretrained and not w.model.startswith("hf-hub:"):
        try:
            cfg = open_clip.pretrained.get_pretrained_cfg(w.model, w.pretrained)
        except Exception:  # noqa: BLE001 - an unknown tag: open_clip names it below
            return None
        if cfg and not cfg.get("hf_hub") and cfg.get("url"):
            return str(cfg["url"])
    return None


def _refuse_checkpoint(path: str, e: BaseException) -> InputError:
    """The error for a local checkpoint open_clip could not load: the file, the tensors, the fix."""
    text = re.sub(r"\s+", " ", str(e)).strip()
    if isinstance(e, pickle.UnpicklingError) or "weights_only" in text or "Weights only load failed" in text:
        return InputError(
            f"--weights {path}: the file holds Python objects that only a full unpickle could build (refused "
            f"with torch.load(weights_only=True); nothing in it ran). Expected {SAFE_WEIGHT_FORMATS} holding a "
            "state dict of tensors"
        )
    if "loading state_dict" in text:
        detail = text.split(":", 1)[1].strip() if ":" in text else text
        return InputError(
            f"--weights {path}: its tensors do not fit the architecture ({detail[:400]}); pass the model the "
            "weights were trained with (MODEL:PATH) or intact weights"
        )
    return InputError(
        f"--weights {path}: not a readable open_clip checkpoint ({type(e).__name__}: {text[:300]})"
    )


def load_open_clip(spec: str | ClipWeights | None = None, *, device: Any = "cpu", precision: str = "fp32"):
    """Return ``(model, preprocess, tokenizer)`` for open_clip weights, honouring the offline policy.

    An installed backbone provider (:mod:`genmetrics.backbones.provider`, kind ``"open_clip"``) is asked
    first; its ``(model, tokenizer)`` is returned as ``(model, None, tokenizer)`` (genmetrics preprocesses
    with :func:`~genmetrics.backbones.clip_preprocess.clip_image_batch`, never with open_clip's ``preprocess``).

    >>> from genmetrics.backbones.provider import use_provider
    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):  # nothing downloads: the provider answers
    ...     model, preprocess, tokenizer = load_open_clip("ViT-B-32/openai")
    >>> type(model).__name__, preprocess, type(tokenizer).__name__
    ('CLIP', None, 'SimpleTokenizer')

    The model is built outside ``torch.inference_mode`` even when called inside it (a metric loading its
    weights lazily during ``update``), so its weights are ordinary tensors with version counters and
    :func:`~genmetrics.backbones.clip_vision.encode_image` can keep their packed copy.

    A local weights file (``MODEL:PATH``) must be safetensors or a zip torch file that
    ``torch.load(weights_only=True)`` reads (:func:`check_weights_file`); its tensors must match the
    architecture (no missing, extra or wrongly shaped tensor) and, like any loaded weights, be finite
    (:func:`check_finite_weights`). Each fault is one :class:`~genmetrics.errors.InputError` naming the file
    and the tensor.
    """
    with torch.inference_mode(False):
        return _load_open_clip(spec, device=device, precision=precision)


def _load_open_clip(spec: str | ClipWeights | None, *, device: Any, precision: str):
    w = parse_clip_weights(spec)
    provided = provide("open_clip", str(w))
    if provided is not None:
        model, tokenizer = provided
        return model.to(device).eval(), None, tokenizer
    cache_dir = str(genmetrics_home() / "open_clip")
    looked = [cache_dir]
    local = is_local_checkpoint(w)
    if local:
        missing = missing_checkpoint(w)  # the pre-check's words
        if missing is not None:
            raise missing
        looked = [w.pretrained]
        check_weights_file(w.pretrained)
    url = None if local else _download_url(w)
    why: str | None = None
    try:
        # open_clip logs its own download failure before raising, and the hub library its retries: the error
        # raised below says what went wrong, in one line (genmetrics.backbones.hub)
        with hub_calls(url, offline=offline(), network=not local) as why:
            model, _, preprocess = open_clip.create_model_and_transforms(
                w.model,
                pretrained=w.pretrained or None,
                device=device,
                precision=precision,
                cache_dir=cache_dir,
                weights_only=True,
            )
    except Exception as e:  # noqa: BLE001 - sorted below; anything not recognised is raised as it came
        msg = str(e).lower()
        unknown_model = "unknown model" in msg or ("config" in msg and "not found" in msg)
        if local and not unknown_model:  # the file exists and has a safe format: what failed is its content
            raise _refuse_checkpoint(w.pretrained, e) from None
        if why is not None and not unknown_model:
            raise weights_unavailable(str(w), looked, _CLIP_OPTION, why=why) from None
        if isinstance(e, (OSError, ValueError)) or (
            isinstance(e, RuntimeError)
            and any(k in msg for k in ("unknown model", "not found", "download", "pretrained", "checkpoint"))
        ):
            raise weights_unavailable(str(w), looked, _CLIP_OPTION, e) from None
        raise
    check_finite_weights(model, w.pretrained if local else str(w))
    with hub_calls(
        url, offline=offline(), network=w.model.startswith("hf-hub:")
    ):  # its config may be on the hub
        tokenizer = open_clip.get_tokenizer(w.model)
    model.eval()
    return model, preprocess, tokenizer
