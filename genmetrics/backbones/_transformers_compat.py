"""The one private transformers member genmetrics reads, in one place.

* ``PretrainedConfig._attn_implementation``: the attention implementation a model was built with
  (``"sdpa"``, ``"eager"``, ``"flash_attention_2"``, ...). transformers exposes no public reader; the
  Qwen-VL runtime (:func:`genmetrics.backbones.qwen_vl.attn_implementation`) passes it on when it calls
  the language tower itself.

On a transformers that dropped it, :func:`attn_implementation_of` raises :class:`~genmetrics.errors.DependencyChanged`
naming the member and the installed version; ``tests/backbones/test_transformers_compat.py`` runs
:func:`check_transformers_private_apis` on the installed transformers.
"""

from __future__ import annotations

from typing import Any

from genmetrics.errors import DependencyChanged

#: the private names used here (the scan in tests/test_private_access.py allows them in this file only)
PRIVATE_APIS = ("transformers.PretrainedConfig._attn_implementation",)


#: the supported range, named in the error when a member is missing
REQUIREMENT = "transformers>=5.2,<6"


def _changed(member: str) -> DependencyChanged:
    return DependencyChanged.missing("transformers", member, __name__, REQUIREMENT)


def attn_implementation_of(config: Any) -> str | None:
    """The attention implementation ``config`` was built with, or None when it names none.

    >>> from genmetrics.testing import tiny_qwen3vl_config
    >>> attn_implementation_of(tiny_qwen3vl_config())
    'sdpa'
    """
    from transformers import PretrainedConfig

    if isinstance(config, PretrainedConfig) and not hasattr(type(config), "_attn_implementation"):
        raise _changed("PretrainedConfig._attn_implementation")
    impl = getattr(config, "_attn_implementation", None)
    return None if impl is None else str(impl)


def check_transformers_private_apis() -> None:
    """Raise :class:`~genmetrics.errors.DependencyChanged` naming the first member of :data:`PRIVATE_APIS` the installed
    transformers lacks.

    >>> check_transformers_private_apis()
    """
    from transformers import PretrainedConfig

    if not hasattr(PretrainedConfig, "_attn_implementation"):
        raise _changed("PretrainedConfig._attn_implementation")
