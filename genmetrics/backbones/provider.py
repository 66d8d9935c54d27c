"""The public backbone-provider hook: swap the default weights of every loader for models built elsewhere.

Every loader of *default* weights (:func:`genmetrics.backbones.openclip.load_open_clip`,
:func:`genmetrics.backbones.hf.load_vlm`, DINO in ``baselines``, the family helpers that build a backbone
from a name) first calls :func:`provide` with the backbone ``kind`` and the ``weights`` string it was
asked for. When a provider is installed and returns something other than ``None``, that is used instead
of loading weights; otherwise loading goes on as usual.

A provider is any callable ``fn(kind: str, weights: str, **options) -> object | None``. The result per kind:

============  ==========================================  ==============================================
kind          who asks                                    a provider returns
============  ==========================================  ==============================================
``open_clip`` ``load_open_clip`` (clip_i, clip_t, raclip)  ``(model, tokenizer)``
``dino``      the ``dino`` baseline                       a ``Dinov2Model``-like module
``vlm``       ``load_vlm`` (tpips, mie); options:          ``(model, processor)``
              ``vlm_kind`` ("qwen3vl", "qwen3_5" or None),
              ``for_generation`` (bool)
============  ==========================================  ==============================================

Install one in-process with :func:`use_provider` (a context manager) or :func:`set_provider`, or for a
subprocess (a CLI run) with the environment variable ``GENMETRICS_BACKBONE_PROVIDER="package.module:function"``.
An in-process provider wins over the environment variable. :func:`genmetrics.testing.tiny_backbones` is
the provider the test-suite uses (tiny random models, nothing downloads)::

    GENMETRICS_BACKBONE_PROVIDER=genmetrics.testing:tiny_backbones genmetrics score clip_t ...

>>> from genmetrics.backbones.provider import provide, use_provider
>>> provide("open_clip", "ViT-B-32/openai") is None          # nothing installed: load real weights
True
>>> with use_provider(lambda kind, weights, **o: ("model", "tokenizer") if kind == "open_clip" else None):
...     provide("open_clip", "ViT-B-32/openai"), provide("dino", "facebook/dinov2-base")
(('model', 'tokenizer'), None)
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from genmetrics.errors import GenmetricsError, InputError

__all__ = [
    "ENV_VAR",
    "Provider",
    "current_provider",
    "describe_provider",
    "provide",
    "set_provider",
    "use_provider",
]

ENV_VAR = "GENMETRICS_BACKBONE_PROVIDER"

Provider = Callable[..., Any]

_provider: Provider | None = None
_env_cache: tuple[str, Provider] | None = None


def set_provider(fn: Provider | None) -> Provider | None:
    """Install ``fn`` as the process-wide provider (``None`` removes it); returns the previous one.

    >>> previous = set_provider(lambda kind, weights, **o: None)
    >>> set_provider(previous) is not None
    True
    """
    global _provider
    if fn is not None and not callable(fn):
        raise InputError(
            f"set_provider expects a callable fn(kind, weights, **options) or None, got {type(fn).__name__}"
        )
    previous, _provider = _provider, fn
    return previous


@contextlib.contextmanager
def use_provider(fn: Provider | None) -> Iterator[Provider | None]:
    """Use ``fn`` as the provider inside the ``with`` block, then restore the previous one.

    >>> with use_provider(lambda kind, weights, **o: f"{kind}:{weights}"):
    ...     provide("dino", "facebook/dinov2-base")
    'dino:facebook/dinov2-base'
    """
    previous = set_provider(fn)
    try:
        yield fn
    finally:
        set_provider(previous)


def _from_env() -> Provider | None:
    global _env_cache
    spec = os.environ.get(ENV_VAR, "").strip()
    if not spec:
        return None
    if _env_cache is not None and _env_cache[0] == spec:
        return _env_cache[1]
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise InputError(
            f"{ENV_VAR}={spec!r}: expected 'package.module:function' (e.g. "
            "'genmetrics.testing:tiny_backbones'); unset it to load real weights"
        )
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise InputError(
            f"{ENV_VAR}={spec!r}: cannot import it ({type(e).__name__}: {e}); fix the name or unset "
            "the variable"
        ) from None
    if not callable(fn):
        raise InputError(f"{ENV_VAR}={spec!r} names a {type(fn).__name__}, not a function")
    _env_cache = (spec, fn)
    return fn


def current_provider() -> Provider | None:
    """The provider in force: the in-process one, else the one named by ``GENMETRICS_BACKBONE_PROVIDER``.

    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):
    ...     current_provider() is tiny_backbones
    True
    """
    return _provider if _provider is not None else _from_env()


def describe_provider() -> str | None:
    """A name for the provider in force (for manifests: results from a provider's models are not mixed
    with results from real weights), or ``None``.

    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):
    ...     describe_provider()
    'genmetrics.testing:tiny_backbones'
    """
    fn = current_provider()
    if fn is None:
        return None
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def provide(kind: str, weights: str, **options: Any) -> Any:
    """Ask the installed provider for a ``kind`` backbone standing in for ``weights``; ``None`` when no
    provider is installed or it declines (then the caller loads the real weights).

    >>> with use_provider(lambda kind, weights, **o: None):  # a provider may decline
    ...     provide("open_clip", "ViT-B-32/openai") is None
    True
    """
    fn = current_provider()
    if fn is None:
        return None
    try:
        return fn(kind, str(weights), **options)
    except GenmetricsError:
        raise
    except Exception as e:  # name the provider, not a traceback from inside it
        raise InputError(
            f"backbone provider {describe_provider()} failed when asked for {kind!r} ({weights!s}): "
            f"{type(e).__name__}: {e}; fix the provider or unset {ENV_VAR}"[:600]
        ) from e
