"""transformers / peft loading for the VLM backbones (Qwen3-VL for TPIPS, Qwen3.5 for MIE).

Weights policy (DESIGN section 7), shared with :mod:`genmetrics.backbones.weights`:

* a local folder is used as is (``from_pretrained(path)``);
* a hub id (``"Qwen/Qwen3-VL-Embedding-2B"``) is looked up in ``$GENMETRICS_HOME/hf`` first, then in the
  default Hugging Face cache (where ``hf download ID`` puts it); if neither has it, it is downloaded into
  ``$GENMETRICS_HOME/hf`` unless offline (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` or
  ``GENMETRICS_OFFLINE`` set, read at call time, so no request is even attempted);
* anything that fails to resolve raises :class:`~genmetrics.errors.WeightsUnavailableError` naming the
  weights, where it looked and how to fix it.

``trust_remote_code`` is off by default. Precision: bf16 on CUDA, fp32 on CPU unless ``dtype`` is given.
This module imports torch, transformers and peft (it is only imported by the model families that need them);
nothing downloads at import time.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import transformers
from huggingface_hub import try_to_load_from_cache
from huggingface_hub.constants import HF_HUB_CACHE
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors import safe_open

from genmetrics.backbones.hub import hub_calls, unreachable
from genmetrics.backbones.precheck import local_weights_folder
from genmetrics.backbones.provider import provide
from genmetrics.backbones.weights import FIX_OPTION as _FIX_OPTION
from genmetrics.backbones.weights import hf_cache_dir, offline, unavailable_error
from genmetrics.core.options import expand_user
from genmetrics.errors import InputError

__all__ = [
    "VLM_KINDS",
    "add_lora",
    "check_adapter_file",
    "hf_cache_dir",
    "load_auto_model",
    "load_peft_adapter",
    "load_vlm",
    "quiet_peft",
    "resolve_dtype_device",
    "unavailable_error",
]

#: kind -> (config.model_type, base model class, generation model class)
VLM_KINDS: dict[str, tuple[str, str, str]] = {
    "qwen3vl": ("qwen3_vl", "Qwen3VLModel", "Qwen3VLForConditionalGeneration"),
    "qwen3_5": ("qwen3_5", "Qwen3_5Model", "Qwen3_5ForConditionalGeneration"),
}
_KIND_ALIASES = {"qwen3_vl": "qwen3vl", "qwen3-vl": "qwen3vl", "qwen3.5": "qwen3_5", "qwen35": "qwen3_5"}


def resolve_dtype_device(dtype: Any = None, device: Any = None) -> tuple[Any, Any]:
    """``device`` default: CUDA if available, else CPU. ``dtype`` default: bf16 on CUDA, fp32 elsewhere.

    ``dtype`` may be a ``torch.dtype`` or a string (``"bf16"``, ``"bfloat16"``, ``"fp16"``, ``"fp32"``...).

    >>> resolve_dtype_device(None, "cpu"), resolve_dtype_device("bf16", "cpu")
    ((torch.float32, device(type='cpu')), (torch.bfloat16, device(type='cpu')))
    """
    dev = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if dtype is None:
        return (torch.bfloat16 if dev.type == "cuda" else torch.float32), dev
    if isinstance(dtype, str):
        names = {
            "bf16": torch.bfloat16,
            "bfloat16": torch.bfloat16,
            "fp16": torch.float16,
            "float16": torch.float16,
            "half": torch.float16,
            "fp32": torch.float32,
            "float32": torch.float32,
            "float": torch.float32,
        }
        if dtype.lower() not in names:
            raise InputError(
                f"dtype {dtype!r} is not understood; expected one of {sorted(names)} or a torch.dtype"
            )
        return names[dtype.lower()], dev
    return dtype, dev


def _resolve(
    model_id_or_path: str | os.PathLike, *, marker: str, local_files_only: bool | None, revision: str | None
) -> tuple[str, dict[str, Any], list[str]]:
    """Return ``(name_or_path, from_pretrained kwargs, places looked)`` or raise WeightsUnavailableError.

    ``marker`` is the file that must exist (``config.json`` for a model, ``adapter_config.json`` for an
    adapter).
    """
    s = os.fspath(model_id_or_path)
    local = local_weights_folder(s, marker=marker)  # a local path: that folder, or the error naming it
    if local is not None:
        return str(local), {}, [str(local)]
    p = expand_user(s, what="weights path")
    lfo = offline() if local_files_only is None else bool(local_files_only)
    ours = hf_cache_dir()
    looked = [f"{p.absolute()} (local folder: none)", f"{ours} (GENMETRICS_HOME cache)"]
    caches: list[Path | None] = [ours, None]
    looked.append(f"{HF_HUB_CACHE} (Hugging Face cache)")
    for cache in caches:
        try:
            hit = try_to_load_from_cache(s, marker, cache_dir=cache, revision=revision)
        except Exception:  # noqa: BLE001 - malformed ids etc.: treat as a miss
            hit = None
        if isinstance(hit, str):
            kw: dict[str, Any] = {"local_files_only": lfo}
            if cache is not None:
                kw["cache_dir"] = str(cache)
            return s, kw, looked
    if lfo:
        raise unavailable_error(s, looked)
    try:
        ours.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a read-only GENMETRICS_HOME: say so, and how to do without it
        raise unavailable_error(
            s,
            looked,
            cause=e,
            hint=f"{ours} cannot be created or written (GENMETRICS_HOME is "
            "read-only?). Fix: set GENMETRICS_HOME to a writable folder, or pass a local folder with "
            f"{_FIX_OPTION}.",
        ) from None
    down = unreachable()
    if down is not None:  # the first failed request decides: no download is tried
        looked.append("the Hugging Face Hub")
        raise unavailable_error(s, looked, why=down)
    looked.append("the Hugging Face Hub (download)")
    return s, {"cache_dir": str(ours), "local_files_only": False}, looked


def load_auto_model(model_id_or_path: str | os.PathLike) -> Any:
    """A transformers ``AutoModel`` from where :func:`load_vlm` looks, in its order: a local folder holding
    ``config.json``, ``GENMETRICS_HOME``'s ``hf/`` cache, the Hugging Face cache (``HF_HOME``, where
    weights used before by other programs are), then a download into ``GENMETRICS_HOME`` unless offline.
    Weights that none of them gives raise one :class:`~genmetrics.errors.WeightsUnavailableError` naming every
    place looked (a folder without ``config.json`` says so).

    >>> import tempfile
    >>> from transformers import Dinov2Config, Dinov2Model
    >>> cfg = Dinov2Config(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
    ...                    image_size=14, patch_size=7)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Dinov2Model(cfg).save_pretrained(d)
    ...     type(load_auto_model(d)).__name__
    'Dinov2Model'
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     load_auto_model(d)
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights ... are not available...
    """
    from transformers import AutoModel

    name, kw, looked = _resolve(model_id_or_path, marker="config.json", local_files_only=None, revision=None)
    why: str | None = None
    try:
        with _hub(kw) as why:
            return AutoModel.from_pretrained(name, **kw)
    except OSError as e:
        raise unavailable_error(os.fspath(model_id_or_path), looked, cause=e, why=why) from None


def load_vlm(
    model_id_or_path: str | os.PathLike,
    *,
    kind: str | None = None,
    dtype: Any = None,
    device: Any = None,
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
    local_files_only: bool | None = None,
    revision: str | None = None,
    for_generation: bool = False,
) -> tuple[Any, Any]:
    """Load a Qwen3-VL or Qwen3.5 VLM and its processor: returns ``(model, processor)``.

    Args:
        model_id_or_path: a local ``save_pretrained`` folder or a hub id.
        kind: ``"qwen3vl"`` (``Qwen3VLModel``), ``"qwen3_5"`` (``Qwen3_5Model``) or ``None`` to read it from
            the checkpoint's ``config.json`` (``model_type``). A mismatch raises ``InputError``.
        dtype: ``torch.dtype`` or string; default bf16 on CUDA, fp32 on CPU.
        device: default CUDA if available, else CPU.
        attn_implementation: ``"sdpa"`` (default; needed for custom 4D boolean masks), ``"eager"`` or
            ``"flash_attention_2"``.
        trust_remote_code: off by default (DESIGN section 7).
        local_files_only: ``None`` = only when offline (``HF_HUB_OFFLINE`` etc.); ``True`` never downloads.
        revision: hub revision (branch, tag or commit).
        for_generation: load ``*ForConditionalGeneration`` (with LM head) instead of the base model, e.g.
            for the generative triplet-head baseline.

    The processor is ``AutoProcessor.from_pretrained`` of the same checkpoint, so its image settings
    (patch 16, merge 2, mean/std 0.5, pixel budget) follow the checkpoint; if its patch/merge sizes
    disagree with the model's vision config they are corrected to the model's values with a warning.
    The model is returned in eval mode on ``device``. An installed backbone provider
    (:mod:`genmetrics.backbones.provider`, kind ``"vlm"``) is asked first.

    A local folder (here one holding the tiny random Qwen3-VL), and a hub id answered by a provider:

    >>> import tempfile
    >>> from genmetrics.backbones.provider import use_provider
    >>> from genmetrics.testing import tiny_backbones, tiny_qwen3vl, tiny_qwen3vl_processor
    >>> with tempfile.TemporaryDirectory() as d:
    ...     tiny_qwen3vl().save_pretrained(d)
    ...     _ = tiny_qwen3vl_processor().save_pretrained(d)
    ...     model, processor = load_vlm(d, device="cpu")
    >>> type(model).__name__, model.training, type(processor).__name__
    ('Qwen3VLModel', False, 'Qwen3VLProcessor')
    >>> with use_provider(tiny_backbones):
    ...     model, processor = load_vlm("Qwen/Qwen3.5-4B")  # nothing downloads
    >>> type(model).__name__
    'Qwen3_5Model'
    """
    if kind is not None:
        kind = _KIND_ALIASES.get(kind, kind)
        if kind not in VLM_KINDS:
            raise InputError(f"kind={kind!r} is not supported; expected one of {sorted(VLM_KINDS)} or None")
    torch_dtype, dev = resolve_dtype_device(dtype, device)
    provided = provide("vlm", os.fspath(model_id_or_path), vlm_kind=kind, for_generation=for_generation)
    if provided is not None:  # a backbone provider (tests, plugins): see genmetrics.backbones.provider
        model, processor = provided
        return model.to(dev).eval(), processor
    name, kw, looked = _resolve(
        model_id_or_path, marker="config.json", local_files_only=local_files_only, revision=revision
    )
    if revision is not None:
        kw["revision"] = revision
    what = os.fspath(model_id_or_path)
    with _hub(kw) as why:
        model, processor = _from_pretrained(
            name,
            kw,
            what,
            looked,
            why,
            kind,
            for_generation,
            torch_dtype,
            attn_implementation,
            trust_remote_code,
        )
    model = model.to(dev).eval()
    return model, processor


def _hub(kw: dict[str, Any]) -> Any:
    """:func:`~genmetrics.backbones.hub.hub_calls` for a ``from_pretrained`` with ``kw`` from :func:`_resolve`: a
    local folder (no ``local_files_only`` key) needs no network."""
    return hub_calls(offline=bool(kw.get("local_files_only")), network="local_files_only" in kw)


def _from_pretrained(
    name: str,
    kw: dict[str, Any],
    what: str,
    looked: list[str],
    why: str | None,
    kind: str | None,
    for_generation: bool,
    torch_dtype: Any,
    attn_implementation: str,
    trust_remote_code: bool,
) -> tuple[Any, Any]:
    try:
        config = transformers.AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code, **kw)
    except OSError as e:
        raise unavailable_error(what, looked, cause=e, why=why) from e
    model_type = getattr(config, "model_type", None)
    detected = next((k for k, (mt, _, _) in VLM_KINDS.items() if mt == model_type), None)
    if kind is None:
        if detected is None:
            raise InputError(
                f"{what!r} has model_type {model_type!r}; load_vlm supports "
                f"{sorted(mt for mt, _, _ in VLM_KINDS.values())} (Qwen3-VL, Qwen3.5)"
            )
        kind = detected
    elif detected != kind:
        raise InputError(
            f"kind={kind!r} expects model_type {VLM_KINDS[kind][0]!r} but {what!r} has model_type {model_type!r}"
        )
    _, base_cls, gen_cls = VLM_KINDS[kind]
    model_cls = getattr(transformers, gen_cls if for_generation else base_cls)

    try:
        processor = transformers.AutoProcessor.from_pretrained(
            name, trust_remote_code=trust_remote_code, **kw
        )
    except OSError as e:
        raise unavailable_error(what, looked, cause=e, why=why) from e
    _align_processor(processor, config)

    try:
        model = model_cls.from_pretrained(
            name,
            config=config,
            dtype=torch_dtype,
            attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
            **kw,
        )
    except OSError as e:
        raise unavailable_error(what, looked, cause=e, why=why) from e
    return model, processor


def _align_processor(processor: Any, config: Any) -> None:
    vc = getattr(config, "vision_config", None)
    if vc is None:
        return
    want = {
        "patch_size": vc.patch_size,
        "merge_size": vc.spatial_merge_size,
        "temporal_patch_size": vc.temporal_patch_size,
    }
    for attr in ("image_processor", "video_processor"):
        sub = getattr(processor, attr, None)
        if sub is None:
            continue
        wrong = {k: (getattr(sub, k, None), v) for k, v in want.items() if getattr(sub, k, v) != v}
        if wrong:
            warnings.warn(
                f"{attr} settings {', '.join(f'{k}={a}' for k, (a, _) in wrong.items())} disagree with the model's "
                f"vision config; using {', '.join(f'{k}={b}' for k, (_, b) in wrong.items())}",
                stacklevel=3,
            )
            for k, (_, v) in wrong.items():
                setattr(sub, k, v)


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft calls a transformers method deprecated in 5.x (``is_gradient_checkpointing``); its
    FutureWarning says nothing actionable to users, so it is filtered around peft calls only.

    >>> with quiet_peft():
    ...     warnings.warn("is_gradient_checkpointing is deprecated", FutureWarning)  # not shown
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def load_peft_adapter(
    model: Any,
    adapter_path_or_id: str | os.PathLike,
    *,
    is_trainable: bool = False,
    adapter_name: str = "default",
    local_files_only: bool | None = None,
    revision: str | None = None,
) -> Any:
    """Wrap ``model`` with a saved peft adapter (``PeftModel.from_pretrained``), same weights policy as
    :func:`load_vlm` (local folder with ``adapter_config.json``, or a hub id looked up in the caches).

    ``is_trainable=False`` (default) returns an inference-mode adapter.

    A LoRA adapter saved and loaded back onto a fresh copy of the same base model:

    >>> import tempfile, torch
    >>> from genmetrics.testing import tiny_qwen3vl
    >>> lora = add_lora(tiny_qwen3vl(), r=4)
    >>> with torch.no_grad():  # move LoRA B off zero so the adapter matters
    ...     _ = [p.normal_() for n, p in lora.named_parameters() if "lora_B" in n]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     lora.save_pretrained(d)
    ...     again = load_peft_adapter(tiny_qwen3vl(), d)
    >>> b1 = {k: v for k, v in lora.state_dict().items() if "lora_B" in k}
    >>> b2 = {k: v for k, v in again.state_dict().items() if "lora_B" in k}
    >>> len(b1) > 0 and all(torch.equal(b1[k], b2[k]) for k in b1)
    True
    """
    name, kw, looked = _resolve(
        adapter_path_or_id, marker="adapter_config.json", local_files_only=local_files_only, revision=revision
    )
    if revision is not None:
        kw["revision"] = revision
    what = os.fspath(adapter_path_or_id)
    weights_file = check_adapter_file(Path(name)) if Path(name).is_dir() else None
    why: str | None = None
    try:
        with quiet_peft(), _hub(kw) as why:
            peft_model = PeftModel.from_pretrained(
                model, name, adapter_name=adapter_name, is_trainable=is_trainable, **kw
            )
    except OSError as e:
        raise unavailable_error(what, looked, cause=e, why=why) from e
    except ValueError as e:
        if "adapter_config.json" in str(e) or "Can't find" in str(e):
            raise unavailable_error(what, looked, cause=e, why=why) from e
        raise
    except RuntimeError as e:  # load_state_dict: a tensor of another shape than the backbone's LoRA layer
        m = _SIZE_MISMATCH.search(str(e))
        if m is None:
            raise
        raise InputError(
            f"{weights_file or name}: tensor {m['name']!r} has shape {m['got']}, but this backbone's LoRA layer "
            f"is {m['want']}; the adapter was saved for another backbone or LoRA rank: pass the base weights it "
            "was trained on"
        ) from None
    if weights_file is not None:
        _check_adapter_keys(peft_model, weights_file, adapter_name)
    return peft_model


_SIZE_MISMATCH = re.compile(
    r"size mismatch for (?P<name>[\w.]+): copying a param with shape (?P<got>torch\.Size\(\[[^\]]*\]\)) from "
    r"checkpoint, the shape in current model is (?P<want>torch\.Size\(\[[^\]]*\]\))"
)
_PICKLES = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth", "adapter_model.pkl")


def check_adapter_file(folder: Path) -> Path:
    """The peft adapter weights of ``folder``, checked before anything loads them: ``adapter_model.safetensors``
    must exist (a pickle such as ``adapter_model.bin`` is refused, never unpickled) and hold only finite values.
    Raises :class:`~genmetrics.errors.InputError` naming the file (and the tensor).

    >>> import tempfile, torch
    >>> from safetensors.torch import save_file
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     _ = (Path(d) / "adapter_model.bin").write_bytes(b"not read")
    ...     check_adapter_file(Path(d))
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: .../adapter_model.bin is a pickle file; genmetrics loads peft adapters only from safetensors (adapter_model.safetensors) and never unpickles a file: ...
    """
    path = folder / "adapter_model.safetensors"
    if not path.is_file():
        pickled = [folder / n for n in _PICKLES if (folder / n).is_file()]
        if pickled:
            raise InputError(
                f"{pickled[0]} is a pickle file; genmetrics loads peft adapters only from safetensors "
                "(adapter_model.safetensors) and never unpickles a file: re-save the adapter with "
                "save_pretrained(safe_serialization=True) where it was trained, or convert it with "
                "safetensors.torch.save_file on a machine that trusts it"
            )
        raise InputError(
            f"{folder}: no adapter_model.safetensors next to adapter_config.json; restore the adapter"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                t = f.get_tensor(key)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    bad = int((~torch.isfinite(t)).sum())
                    raise InputError(
                        f"{path}: tensor {key!r} holds {bad} NaN or infinite value(s); the file is corrupt or "
                        "was saved from a diverged run: retrain or restore it"
                    )
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - any safetensors parse failure: one clear line
        raise InputError(
            f"{path}: not a readable safetensors file ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
            "restore the adapter"
        ) from None
    return path


def _check_adapter_keys(peft_model: Any, path: Path, adapter_name: str) -> None:
    """The file's tensors are exactly the adapter's (peft loads non-strictly: a missing tensor would keep its
    initial value, an extra one would be ignored)."""
    expected = set(get_peft_model_state_dict(peft_model, adapter_name=adapter_name))
    with safe_open(str(path), framework="pt") as f:
        found = set(f.keys())
    missing, extra = sorted(expected - found), sorted(found - expected)
    if missing:
        raise InputError(
            f"{path}: tensor {missing[0]!r} is missing ({len(missing)} missing in all); the adapter is incomplete "
            "or was saved for another backbone: restore it or pass the base weights it was trained on"
        )
    if extra:
        raise InputError(
            f"{path}: unexpected tensor {extra[0]!r} ({len(extra)} unexpected in all); the adapter was saved for "
            "another backbone or configuration: pass the base weights it was trained on"
        )


def add_lora(
    model: Any,
    r: int = 16,
    alpha: int | None = None,
    dropout: float = 0.05,
    target_modules: str | list[str] = "all-linear",
    exclude_modules: str | list[str] | None = r".*visual.*",
    *,
    modules_to_save: list[str] | None = None,
) -> Any:
    """LoRA on the language tower only (DESIGN section 4/9): returns a ``peft.PeftModel``.

    Defaults: r=16, alpha=2r, dropout 0.05, ``target_modules="all-linear"`` (every ``nn.Linear`` except
    the LM head), ``exclude_modules=r".*visual.*"`` (the vision tower, incl. its mergers and DeepStack
    mergers, gets no adapters). Every parameter whose name contains ``visual`` is frozen afterwards,
    whatever the arguments. ``modules_to_save`` are full-trainable copies; they must name modules that
    are not ``nn.ModuleList`` (wrap a list of heads in a module). LoRA B starts at zero, so the wrapped
    model initially computes exactly what the base model does, and lora_A gradients are zero at step 0.

    >>> from genmetrics.testing import tiny_qwen3vl
    >>> lora = add_lora(tiny_qwen3vl(), r=4, target_modules=["q_proj", "v_proj"])
    >>> trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    >>> all("lora_" in n for n in trainable), any("visual" in n for n in trainable)  # language tower only
    (True, False)
    """
    if r <= 0:
        raise InputError(f"LoRA rank r must be positive, got {r}")
    config = LoraConfig(
        r=r,
        lora_alpha=2 * r if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        exclude_modules=exclude_modules,
        modules_to_save=modules_to_save,
        bias="none",
    )
    with quiet_peft():
        peft_model = get_peft_model(model, config)
    for n, p in peft_model.named_parameters():
        if "visual" in n:
            p.requires_grad_(False)
    return peft_model
